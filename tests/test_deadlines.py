"""Approval deadlines under Temporal time skipping (v2, on the dev server): escalate
(with a webhook to a real HTTP server on loopback, retried after a failure) and reject."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import SessionOptions, SessionView
from phasegate.domain.session.state import DEADLINE_ACTOR
from phasegate.testing import dev_server_options
from phasegate.worker import build_worker

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "library"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def ts_env() -> AsyncIterator[WorkflowEnvironment]:
    """A second dev server whose workflows run on a virtual clock that skips idle time."""
    async with await WorkflowEnvironment.start_time_skipping_v2(
        **dev_server_options()
    ) as environment:
        yield environment


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []
    fail_first = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        if cls.fail_first > 0:
            cls.fail_first -= 1
            self.send_response(503)
        else:
            cls.received.append(body)
            self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, type[_Hook]]]:
    handler = type("Hook", (_Hook,), {"received": [], "fail_first": 1})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", handler
    finally:
        server.shutdown()
        server.server_close()


async def _wait_status(
    pg: PhasegateClient, sid: str, wanted: str, timeout: float = 30
) -> SessionView:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        view = await pg.status(sid)
        if view.status == wanted or loop.time() > deadline:
            return view
        await asyncio.sleep(0.1)


async def test_overdue_approval_escalates_and_notifies(ts_env, settings_for, webhook):
    url, hook = webhook
    settings = settings_for(FIXTURES)
    pg = PhasegateClient(ts_env.client, settings.task_queue)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        async with build_worker(ts_env.client, settings, executor=pool):
            sid = await pg.start("deadline_escalate_v1", options=SessionOptions(notify_url=url))
            result = await pg.submit(sid, 0, {"plan": "the plan"})
            assert result.awaiting_approval
            started = await pg.status(sid)
            assert started.approval_due_at is not None
            view = await _wait_status(pg, sid, "approval_overdue")
            assert view.status == "approval_overdue", view
            for _ in range(300):  # the webhook failed once (503) and was retried
                if hook.received:
                    break
                await asyncio.sleep(0.1)
            assert len(hook.received) == 1
            payload = hook.received[0]
            assert payload["event"] == "approval_overdue" and payload["session_id"] == sid
            assert payload["phase"] == 0 and payload["approvers"] == ["lead"]
            view = await pg.status(sid)
            actions = [(a.action, a.actor) for a in view.audit]
            assert ("escalate", DEADLINE_ACTOR) in actions and ("notify", DEADLINE_ACTOR) in actions
            # Overdue is still approvable, by an allowed approver only.
            view = await pg.decide(
                sid, approver="lead", decision="approve", comment="late but fine"
            )
            assert view.status == "active" and view.current_phase == 1


async def test_overdue_approval_can_reject(ts_env, settings_for):
    settings = settings_for(FIXTURES)
    pg = PhasegateClient(ts_env.client, settings.task_queue)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        async with build_worker(ts_env.client, settings, executor=pool):
            sid = await pg.start("deadline_reject_v1")
            assert (await pg.submit(sid, 0, {"plan": "the plan"})).awaiting_approval
            view = await _wait_status(pg, sid, "active")
            assert view.status == "active" and view.current_phase == 0
            assert view.approvals[-1].approver == DEADLINE_ACTOR
            assert view.approvals[-1].decision == "reject"
            assert "30m" in view.feedback
            # The phase reopened: the agent resubmits and a person can still approve in time.
            assert (await pg.submit(sid, 0, {"plan": "the better plan"})).awaiting_approval
            view = await pg.decide(sid, approver="lead", decision="approve")
            assert view.current_phase == 1


async def test_decision_in_time_cancels_the_deadline(ts_env, settings_for):
    settings = settings_for(FIXTURES)
    pg = PhasegateClient(ts_env.client, settings.task_queue)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        async with build_worker(ts_env.client, settings, executor=pool):
            with ts_env.with_time_skipping_disabled():
                sid = await pg.start("deadline_reject_v1")
            assert (await pg.submit(sid, 0, {"plan": "the plan"})).awaiting_approval
            view = await pg.decide(sid, approver="lead", decision="approve")
            assert view.current_phase == 1
            await asyncio.sleep(0.5)
            view = await pg.status(sid)
            assert [a.approver for a in view.approvals] == ["lead"]
            assert not any(a.actor == DEADLINE_ACTOR for a in view.audit)


async def test_pause_and_resume_keep_the_deadline(ts_env, settings_for):
    from phasegate.domain.session.messages import ControlRequest

    settings = settings_for(FIXTURES)
    pg = PhasegateClient(ts_env.client, settings.task_queue)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        async with build_worker(ts_env.client, settings, executor=pool):
            with ts_env.with_time_skipping_disabled():
                sid = await pg.start("deadline_escalate_v1")
            assert (await pg.submit(sid, 0, {"plan": "the plan"})).awaiting_approval
            await pg.control(sid, ControlRequest(action="pause", reason="r", actor="ops"))
            await pg.control(sid, ControlRequest(action="resume", actor="ops"))
            view = await pg.status(sid)
            assert view.status == "awaiting_approval" and view.approval_due_at is not None
            await ts_env.fast_forward(pg.handle(sid), timedelta(hours=3))
            view = await _wait_status(pg, sid, "approval_overdue")
            assert view.status == "approval_overdue", view


async def test_deadline_survives_continue_as_new(ts_env, settings_for):
    from phasegate.domain.session.messages import ControlRequest

    settings = settings_for(FIXTURES)
    pg = PhasegateClient(ts_env.client, settings.task_queue)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        async with build_worker(ts_env.client, settings, executor=pool):
            with ts_env.with_time_skipping_disabled():
                sid = await pg.start(
                    "deadline_escalate_v1", options=SessionOptions(continue_as_new_after_events=12)
                )
            first_run = (await pg.handle(sid).describe()).run_id
            assert (await pg.submit(sid, 0, {"plan": "the plan"})).awaiting_approval
            for _ in range(3):  # grow history until the run continues as new
                await pg.control(sid, ControlRequest(action="pause", reason="r", actor="ops"))
                await pg.control(sid, ControlRequest(action="resume", actor="ops"))
            assert (await pg.handle(sid).describe()).run_id != first_run
            await ts_env.fast_forward(pg.handle(sid), timedelta(hours=3))
            view = await _wait_status(pg, sid, "approval_overdue")
            assert view.status == "approval_overdue", view
