"""The ``current`` query: an agent's first read (the status and the current phase's view)
in one answer, and what a client does against a worker that predates it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from fixture_evidence import GOOD_0
from temporalio import client as client_interceptors
from temporalio import workflow
from temporalio.client import Client, QueryWorkflowInput
from temporalio.worker import Worker

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import PhaseQuery, PhaseView, SessionView


class _CountQueries(client_interceptors.Interceptor):
    """Counts the queries a client sends, by name."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def intercept_client(
        self, next: client_interceptors.OutboundInterceptor
    ) -> client_interceptors.OutboundInterceptor:
        return _Counting(next, self.sent)


class _Counting(client_interceptors.OutboundInterceptor):
    def __init__(self, next: client_interceptors.OutboundInterceptor, sent: list[str]) -> None:
        super().__init__(next)
        self._sent = sent

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self._sent.append(input.query)
        return await super().query_workflow(input)


def _counting(env_client: Client) -> tuple[Client, list[str]]:
    counter = _CountQueries()
    config = env_client.config()
    return Client(**{**config, "interceptors": [*config["interceptors"], counter]}), counter.sent


async def test_the_first_read_is_one_query_and_matches_the_two_it_replaces(
    session_env, env, tmp_path
):
    pg, settings = session_env
    client, sent = _counting(env.client)
    counted = PhasegateClient(client, settings.task_queue)
    sid = await pg.start("mini_v1", str(tmp_path))

    current = await counted.current(sid)
    assert sent == ["current"]
    assert current.status == await pg.status(sid)
    assert current.phase == await pg.phase(sid, 0)
    sent.clear()
    assert await counted.phase(sid) == current.phase  # `phasegate phase SESSION`: one query too
    assert sent == ["current"]

    # Awaiting approval: the phase it waits on; finished: no phase.
    await pg.submit(sid, 0, GOOD_0)
    await pg.submit(sid, 1, {"plan": "the plan"})
    waiting = await counted.current(sid)
    assert waiting.status.status == "awaiting_approval"
    assert isinstance(waiting.phase, PhaseView) and waiting.phase.phase == 1
    await pg.decide(sid, approver="alice", decision="approve")
    await pg.submit(sid, 2, {"tests_run": 1, "tests_passed": 1})
    done = await counted.current(sid)
    assert done.status.status == "completed" and done.phase is None


@workflow.defn(name="GatedSession", sandboxed=False)
class _BeforeCurrent:
    """A session as a worker from before the ``current`` query answers it."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.query
    def status(self) -> SessionView:
        return SessionView(workflow_type="old_v1", status="active", current_phase=0, total_phases=2)

    @workflow.query
    def phase(self, q: PhaseQuery) -> PhaseView:
        return PhaseView(phase=q.phase, label=str(q.phase), name="Old", content="old content")


async def test_against_a_worker_from_before_it_the_client_reads_twice(env):
    queue = f"old-{uuid.uuid4().hex[:8]}"
    client, sent = _counting(env.client)
    async with Worker(env.client, task_queue=queue, workflows=[_BeforeCurrent]):
        handle = await env.client.start_workflow(
            "GatedSession", id=f"old-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        try:
            current = await PhasegateClient(client, queue).current(handle.id)
        finally:
            await handle.terminate("test over")
            await asyncio.sleep(0)
    assert sent == ["current", "status", "phase"]
    assert current.status.workflow_type == "old_v1"
    assert current.phase is not None and current.phase.content == "old content"
