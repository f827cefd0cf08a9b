"""A model provider that cannot be reached, on the dev server (issue 19): an Ollama
that went away after the run started. A refused connection is no failure a new plan
can fix: the run ends at once, naming the URL, after one attempt of one model request
(it took 4 plans x 5 attempts, about 70 s, each replan against the same dead server),
and the worker logs no traceback for it."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from orchestration_helpers import start
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError

from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.workflows import Orchestration

BUG = Issue(id="41", title="Export sometimes writes an empty file", labels=["bug"])  # analyst first
MODEL_ACTIVITY = "agent__phasegate_{agent}__model_request"


@contextlib.contextmanager
def answers_once() -> Iterator[str]:
    """A server that accepts one connection (the run's start-up check), then goes away:
    every later connection is refused. Yields its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(60)
    port = listener.getsockname()[1]

    def once() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            conn.close()
        listener.close()

    thread = threading.Thread(target=once, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        with contextlib.suppress(OSError):
            listener.close()
        thread.join(5)


@pytest.mark.parametrize("agent", ["planner", "analyst"])
async def test_a_refused_connection_ends_the_run_at_once_naming_the_url(
    env, settings_for, run_worker, tmp_path, caplog, agent
):
    work = tmp_path / "repo"
    work.mkdir()
    caplog.set_level(logging.DEBUG)
    with answers_once() as url:
        settings = settings_for(model_providers={"ollama": {"base_url": url}})
        profile = Profile(
            working_dir=str(work),
            models={"analyst": "demo", "architect": "demo", "reviewer": "demo",
                    agent: "ollama:llama3"},
            developer=DeveloperProfile(mode="mcp"),
        )  # fmt: skip
        async with run_worker(settings):
            began = time.monotonic()
            handle = await start(env.client, settings.task_queue, BUG, profile)
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            took = time.monotonic() - began
            history = await handle.query(Orchestration.history)
            events = list((await handle.fetch_history()).events)
    message = str(failed.value.cause)
    assert f"the ollama provider at {url} refused the connection" in message, message
    assert "PHASEGATE_MODEL_PROVIDERS" in message
    assert took < 15, took
    started = [
        e.activity_task_started_event_attributes.attempt
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    model_requests = [
        e
        for e in events
        if e.activity_task_scheduled_event_attributes.activity_type.name
        == MODEL_ACTIVITY.format(agent=agent)
    ]
    assert len(model_requests) == 1 and max(started) == 1  # one request, one attempt
    kinds = [h.kind for h in history]
    assert "replan" not in kinds and "replan_requested" not in kinds, kinds
    assert kinds[-1] == "failed"
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]
    assert not tracebacks, [r.getMessage() for r in tracebacks]
