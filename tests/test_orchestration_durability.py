"""An orchestration survives its worker dying during a model request.

The worker runs as a separate process (``python -m phasegate.worker``), its LLM
agents on a loopback OpenAI-compatible server (``FakeOpenAI`` through
``PHASEGATE_MODEL_PROVIDERS``). The fake holds the analyst's request unanswered;
the worker is SIGKILLed while it waits, a new worker starts, the model request's
heartbeat timeout (PHASEGATE_MODEL_HEARTBEAT_SECONDS, 10 s here; pydantic-ai's 30 s by
default) hands the request to it, and the
orchestration completes: every output once, no step done twice, the planner's
output recorded before the kill kept and never asked for again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

from orchestration_helpers import approving_children

from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.messages import StartOrchestration
from phasegate.domain.settings import Settings
from phasegate.testing.fake_openai import FakeOpenAI
from phasegate.workflows import Orchestration

PLAN = {
    "reasoning": "Understand the request, design the change, then review it.",
    "steps": [
        {"agent": "analyst", "reason": "find where health checks belong"},
        {"agent": "architect", "reason": "design the endpoint"},
        {"agent": "developer", "reason": "build it through a gated session"},
        {"agent": "reviewer", "reason": "review the change"},
    ],
    "scope": "moderate",
}
ANALYSIS = {"findings": ["The router is in one module."], "scope": "moderate", "confidence": 0.9}
DESIGN = {
    "goal": "Add a health endpoint returning the version",
    "plan_markdown": "## Phase 1: Endpoint\n\n- [ ] 1.1 Add the health route\n",
    "confidence": 0.9,
}
REVIEW = {"approved": True, "comments": [], "severity": "none", "confidence": 0.9}
ISSUE = Issue(id="12", title="Add a health endpoint to the service", body="GET /health.")
MODEL = "fake:gpt-test"


def _worker(settings: Settings, base_url: str, cwd: Path, name: str) -> subprocess.Popen[str]:
    """``python -m phasegate.worker`` configured by environment, as a deployment runs it;
    its log goes to ``cwd/<name>.log`` (a pipe nobody reads could fill and stall it)."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "PHASEGATE_TASK_QUEUE": settings.task_queue,
        "PHASEGATE_HOME": settings.home,
        "PHASEGATE_MODEL_PROVIDERS": json.dumps({"fake": {"base_url": base_url}}),
        "PHASEGATE_ALLOW_UNSIGNED_APPROVALS": "1",  # the test approves the session's plan
        # The killed worker's request moves on after 10 s without a heartbeat, not 30.
        "PHASEGATE_MODEL_HEARTBEAT_SECONDS": "10",
    }
    with (cwd / f"{name}.log").open("w") as log:  # the child keeps its own copy
        proc = subprocess.Popen(
            [sys.executable, "-m", "phasegate.worker"],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "phasegate worker" in line, (line, (cwd / f"{name}.log").read_text())
    return proc


async def _until(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_worker_killed_during_a_model_request_loses_nothing(env, settings_for, tmp_path):
    work = tmp_path / "repo"
    work.mkdir()
    settings = settings_for().model_copy(
        update={"temporal_address": env.client.service_client.config.target_host}
    )
    async with FakeOpenAI() as fake:
        fake.tool_call(PLAN, prompt_tokens=100, completion_tokens=20).hang()
        fake.tool_call(ANALYSIS, prompt_tokens=200, completion_tokens=30)
        fake.tool_call(DESIGN, prompt_tokens=300, completion_tokens=40)
        fake.tool_call(REVIEW, prompt_tokens=400, completion_tokens=50)
        first = _worker(settings, fake.base_url, tmp_path, "first")
        second = None
        try:
            handle = await env.client.start_workflow(
                Orchestration.run,
                StartOrchestration(
                    issue=ISSUE,
                    profile=Profile(
                        working_dir=str(work),
                        models=dict.fromkeys(
                            ("planner", "analyst", "architect", "reviewer"), MODEL
                        ),
                        developer=DeveloperProfile(mode="command", agent="scripted"),
                    ),
                ),
                id=f"orch-kill-{uuid.uuid4().hex[:8]}",
                task_queue=settings.task_queue,
            )
            await _until(lambda: fake.hanging == 1, 30, "the analyst's request to arrive")
            before = await handle.query(Orchestration.state)
            assert [o.key for o in before.outputs] == ["planner_0"]
            first.kill()  # SIGKILL during the model request: no chance to clean up
            first.wait()
            fake.release()  # the dead worker's connection closes unanswered
            second = _worker(settings, fake.base_url, tmp_path, "second")
            pg = PhasegateClient(env.client, settings.task_queue)
            async with approving_children(pg, handle):  # a person approves the session's plan
                view = await asyncio.wait_for(handle.result(), timeout=80)
            history = await handle.fetch_history()
            entries = await handle.query(Orchestration.history)
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.communicate(timeout=30)

    assert view.status == "completed", view.failure
    keys = [o.key for o in view.outputs]
    assert keys == ["planner_0", "analyst_0", "architect_0", "developer_0", "reviewer_0"]
    # Nothing recorded before the kill was lost or redone: the planner's output is the
    # one it gave then, and the planner was asked once.
    planner = view.outputs[0]
    assert planner.output["steps"] == PLAN["steps"] and planner.sha256 == before.outputs[0].sha256
    replies = [r.reply for r in fake.requests]
    assert replies == ["tool_call", "hang", "tool_call", "tool_call", "tool_call"]
    # The retried request is the same request: the analyst's messages, sent again.
    assert fake.requests[1].body["messages"] == fake.requests[2].body["messages"]
    # One step_done per key; each step started once.
    done = Counter(e.key for e in entries if e.kind == "step_done")
    started = Counter(e.key for e in entries if e.kind == "step_started")
    assert done == Counter(keys[1:]) and started == Counter(keys[1:])
    # Temporal's own record: one model request per agent scheduled and completed; the
    # analyst's completed on its second attempt (the first died with the worker).
    scheduled: dict[int, str] = {}
    completed: list[str] = []
    attempts: dict[str, int] = {}
    for ev in history.events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.HasField("activity_task_started_event_attributes"):
            attrs = ev.activity_task_started_event_attributes
            attempts[scheduled[attrs.scheduled_event_id]] = attrs.attempt
        elif ev.HasField("activity_task_completed_event_attributes"):
            completed.append(
                scheduled[ev.activity_task_completed_event_attributes.scheduled_event_id]
            )
    requests = [n for n in completed if n.endswith("__model_request")]
    assert requests == [
        f"agent__phasegate_{a}__model_request"
        for a in ("planner", "analyst", "architect", "reviewer")
    ]
    assert attempts["agent__phasegate_analyst__model_request"] == 2
    assert view.usage.requests == 4
    assert (view.usage.input_tokens, view.usage.output_tokens) == (1000, 140)


def test_fake_openai_hangs_a_request_until_released():
    """``hang()``: the request gets no answer until ``release()``, then its connection
    closes unanswered; the next request takes the next scripted answer."""
    with FakeOpenAI() as fake:
        fake.hang().text("after")
        url = fake.base_url + "/chat/completions"
        body = json.dumps({"model": "m", "messages": []}).encode()
        outcome: list[object] = []

        def call() -> None:
            request = urllib.request.Request(url, body, {"content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    outcome.append(answer.status)
            except (urllib.error.URLError, ConnectionError, OSError) as exc:
                outcome.append(type(exc).__name__)

        thread = threading.Thread(target=call)
        thread.start()
        deadline = time.monotonic() + 5
        while fake.hanging < 1:
            assert time.monotonic() < deadline, "the request never arrived"
            time.sleep(0.01)
        time.sleep(0.2)
        assert outcome == [] and thread.is_alive()  # held: no answer yet
        assert [(r.reply, r.status) for r in fake.requests] == [("hang", 0)]
        fake.release()
        thread.join(timeout=5)
        assert not thread.is_alive() and outcome and outcome[0] != 200, outcome
        assert fake.hanging == 0
        request = urllib.request.Request(url, body, {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            data = json.loads(answer.read())
        assert data["choices"][0]["message"]["content"] == "after"


def test_stopping_fake_openai_lets_held_requests_go():
    fake = FakeOpenAI().start()
    fake.hang()
    url = fake.base_url + "/chat/completions"
    errors: list[str] = []

    def call() -> None:
        body = json.dumps({"model": "m", "messages": []}).encode()
        request = urllib.request.Request(url, body, {"content-type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=10)
        except Exception as exc:  # noqa: BLE001 - any failure: no answer came
            errors.append(type(exc).__name__)

    thread = threading.Thread(target=call)
    thread.start()
    while fake.hanging < 1:
        time.sleep(0.01)
    began = time.monotonic()
    fake.stop()
    thread.join(timeout=5)
    assert not thread.is_alive() and errors and time.monotonic() - began < 5
