"""What a new session writes to history and visibility (workflows/_session_patches.py):
loaded at engine 1, it records no patch marker but the load's, so the server upserts
``TemporalChangeVersion`` once per run instead of once per patch; its first prefetch is
a local activity in the workflow task that made it ready, so no activity task or second
workflow task comes before the agent's first message; and the engine level survives
continue-as-new."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from fixture_evidence import GOOD_0
from temporalio import client as client_interceptors
from temporalio import workflow as temporal_workflow
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import (
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import SessionOptions
from phasegate.temporal import SA_PHASE
from phasegate.testing import running_worker
from phasegate.workflows._kit import CARRY_PROOF

PATCH_MARKER = "core_patch"
LOCAL_ACTIVITY_MARKER = "core_local_activity"


def _patches(history: WorkflowHistory) -> list[str]:
    return [
        e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data.decode()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == PATCH_MARKER
    ]


def _change_version_upserts(history: WorkflowHistory) -> int:
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        and "TemporalChangeVersion"
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    )


def _before_the_agent(history: WorkflowHistory) -> tuple[list[str], list[str]]:
    """Event types before the first update, and the local activities among them."""
    kinds: list[str] = []
    local: list[str] = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            break
        kinds.append(EventType.Name(e.event_type).removeprefix("EVENT_TYPE_"))
        attrs = e.marker_recorded_event_attributes
        if attrs.marker_name == LOCAL_ACTIVITY_MARKER:
            local.append(json.loads(attrs.details["data"].payloads[0].data)["activity_type"])
    return kinds, local


async def _ready(pg: PhasegateClient, sid: str, run_id: str) -> WorkflowHistory:
    """The run's history once it has published its status (it is ready)."""
    handle = pg.temporal.get_workflow_handle(sid, run_id=run_id)
    for _ in range(400):
        history = await handle.fetch_history()
        if any(
            "PhasegateStatus"
            in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            for e in history.events
        ):
            return history
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} of {sid} never got ready")


async def test_a_new_session_records_only_the_loads_patch(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path), wait=False)
    # Ready after one workflow task: left alone (no query, which the server hands the
    # worker inside a workflow task, closing it early), its first task holds it all.
    first_run = (await pg.handle(sid).describe()).run_id
    await _ready(pg, sid, first_run)
    assert (await pg.submit(sid, 0, GOOD_0)).passed
    await pg.submit(sid, 1, {"plan": "the plan"})
    await pg.decide(sid, approver="alice", decision="approve")
    assert (await pg.submit(sid, 2, {"tests_run": 1, "tests_passed": 1})).completed
    history = await pg.handle(sid).fetch_history()
    kinds, local = _before_the_agent(history)
    assert local == ["load_session", "render_phase"], local
    assert "ACTIVITY_TASK_SCHEDULED" not in kinds, kinds
    # The task that made it ready, and the first update's own.
    assert kinds.count("WORKFLOW_TASK_COMPLETED") == 2, " ".join(kinds)
    assert [p for p in _patches(history) if '"load-on-session-worker"' not in p] == []
    assert _change_version_upserts(history) == 1


async def test_the_engine_level_survives_continue_as_new(session_env, tmp_path):
    pg, _ = session_env
    options = SessionOptions(continue_as_new_after_events=12)
    sid = await pg.start("mini_v1", str(tmp_path), options=options)
    first_run = (await pg.handle(sid).describe()).run_id
    for i in range(3):  # failed attempts grow history past the limit
        assert not (await pg.submit(sid, 0, {"modules_found": 0}, submission_id=f"f{i}")).passed
    assert (await pg.submit(sid, 0, GOOD_0)).passed
    later_run = (await pg.handle(sid).describe()).run_id
    assert later_run != first_run, "expected a continue-as-new"
    later = await _ready(pg, sid, later_run)
    # The carried state's proof is _kit's, asked by every workflow type it carries.
    assert [p for p in _patches(later) if f'"{CARRY_PROOF}"' not in p] == []
    assert _change_version_upserts(later) == 1
    # The continued run's first prefetch is local too: its marker comes before any activity
    # task (the agent's messages may land in between: the run answers once it is ready).
    order = [
        "render_phase"
        if e.marker_recorded_event_attributes.marker_name == LOCAL_ACTIVITY_MARKER
        and b'"render_phase"' in e.marker_recorded_event_attributes.details["data"].payloads[0].data
        else EventType.Name(e.event_type)
        for e in later.events
        if e.event_type
        in (EventType.EVENT_TYPE_MARKER_RECORDED, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    ]
    assert "render_phase" in order, order
    assert "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED" not in order[: order.index("render_phase")], order


async def test_a_held_phase_waits_for_a_timer_of_its_own_length(session_env, tmp_path):
    """Engine 3: a change of the phase alone always waits for the held attribute's timer,
    started at its full length: no decision reads the clock. Engine 2 compared
    ``workflow.now()`` with the time of the last upsert, and a replay does not always see
    the time a live run saw (the activation that takes a local activity's result, when its
    marker closed an earlier workflow task): under load, a replay upserted where the run
    had held, a nondeterminism error (the held timer then lasted 10 s less the time since
    the load's upsert)."""
    from phasegate.domain.session.plan import PHASE_ATTRIBUTE_SECONDS, SESSION_ENGINE

    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    await asyncio.sleep(1.5)  # an engine-2 timer would now be 1.5 s short
    await pg.submit(sid, 0, GOOD_0)
    timers: list[float] = []
    for _ in range(100):  # the timer starts with the prefetch's workflow task
        history = await pg.handle(sid).fetch_history()
        timers = [
            e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
        ]
        if timers:
            break
        await asyncio.sleep(0.05)
    assert timers == [PHASE_ATTRIBUTE_SECONDS], timers
    assert SESSION_ENGINE >= 3


# ---- engine 4: the held attribute's timer never refuses the run's close -----------------

_HOLD_SECONDS = 3.0  # how long the closing workflow task is held (the timer: 1 s)
_SLOW_NEXT_UPDATE: set[str] = set()  # sessions whose next update's task is held


class _HoldClosingTask(client_interceptors.Interceptor, Interceptor):
    """Holds the workflow task of a marked session's next update for ``_HOLD_SECONDS``
    (a blocking sleep in workflow code, on the worker's thread: the worker runs workflow
    code outside the sandbox, its deadlock detection off), so a timer fires while that
    task runs, as it does under load. Popped on first use: a replay of that update does not wait again."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _HoldInbound


class _HoldInbound(WorkflowInboundInterceptor):
    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        sid = temporal_workflow.info().workflow_id
        if sid in _SLOW_NEXT_UPDATE:
            _SLOW_NEXT_UPDATE.discard(sid)
            time.sleep(_HOLD_SECONDS)  # noqa: ASYNC251 (the point: the task is held)
        return await super().handle_update_handler(input)


def _two_phase_library(root: Path) -> Path:
    """quick_v1: two phases, no approval, so the last phase is entered by a change of the
    phase alone (held for the timer) and the session completes right after."""
    meta = {
        "workflow_type": "quick_v1",
        "name": "Two quick phases",
        "phases": [
            {"phase_number": 0, "phase_name": "Count"},
            {"phase_number": 1, "phase_name": "Report"},
        ],
    }
    folder = root / "quick_v1"
    for n in (0, 1):
        (folder / "phases" / str(n)).mkdir(parents=True)
        (folder / "phases" / str(n) / "phase.md").write_text(f"# Phase {n}\n\nCount things.\n")
        (folder / "phases" / str(n) / "gate-definition.yaml").write_text(
            "evidence_schema:\n  count: {type: integer, required: true, min: 1}\n"
        )
    (folder / "metadata.json").write_text(json.dumps(meta))
    return root


def _events(history: WorkflowHistory, kind: int) -> list[Any]:
    return [e for e in history.events if e.event_type == kind]


@pytest.mark.parametrize("engine", [3, 4])
async def test_a_timer_firing_during_the_closing_task_does_not_refuse_the_close(
    engine, env, settings_for, executor, tmp_path, monkeypatch
):
    """Under load, the held attribute's timer fired while a session's closing workflow
    task ran; the server then refused the task's completion (``UnhandledCommand``: a
    close command with a new event buffered), one more task and a full replay each time
    (0-60 a run at 200 agents). Engine 4 cancels the timer before the close, which
    withdraws the buffered firing. Here the timer is 1 s and the closing task is held
    3 s, so the timer always fires during it; engine 3 shows the refusal."""
    from phasegate.activities import definitions
    from phasegate.workflows import _session_visibility

    monkeypatch.setattr(definitions, "SESSION_ENGINE", engine)
    monkeypatch.setattr(_session_visibility, "PHASE_ATTRIBUTE_SECONDS", 1.0)
    monkeypatch.setenv("TEMPORAL_DEBUG", "1")  # the worker's deadlock detection off
    config = env.client.config()
    client = Client(**{**config, "interceptors": [*config["interceptors"], _HoldClosingTask()]})
    settings = settings_for(_two_phase_library(tmp_path / "library"))
    async with running_worker(client, settings, executor=executor):
        pg = PhasegateClient(client, settings.task_queue)
        sid = await pg.start("quick_v1", str(tmp_path))
        assert (await pg.submit(sid, 0, {"count": 1})).passed  # phase 1: held for the timer
        for _ in range(100):
            history = await pg.handle(sid).fetch_history()
            if _events(history, EventType.EVENT_TYPE_TIMER_STARTED):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the held attribute's timer never started")
        _SLOW_NEXT_UPDATE.add(sid)
        assert (await pg.submit(sid, 1, {"count": 2})).completed
        await pg.result(sid)
        history = await pg.handle(sid).fetch_history()
    refused = [
        e.workflow_task_failed_event_attributes.cause
        for e in _events(history, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    ]
    kinds = [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]
    if engine == 3:  # the refusal engine 4 removes
        assert refused == [WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND]
        assert "TIMER_FIRED" in kinds, kinds
        return
    assert refused == [], " ".join(kinds)
    assert "TIMER_FIRED" not in kinds, kinds
    assert kinds.index("TIMER_CANCELED") < kinds.index("WORKFLOW_EXECUTION_COMPLETED"), kinds
    # What the timer held was written with the close: the last phase and "completed".
    described = await pg.handle(sid).describe()
    assert described.typed_search_attributes.get(SA_PHASE) == 1


def test_recorded_engine_4_runs_cancel_their_timers_before_they_close():
    """tests/histories/engine_4_*: a status change cancels the held attribute's timer; a
    run continued as new cancels it before the close without writing (its next run
    writes when it loads), as it cancels an approval deadline's timer, which the next run
    arms again (all replay in test_durability)."""
    histories = Path(__file__).parent / "histories"

    def kinds(name: str) -> list[str]:
        (path,) = histories.glob(f"{name}--*.json")
        history = WorkflowHistory.from_json(path.stem.split("--", 1)[1], path.read_text())
        return [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]

    cancel = kinds("engine_4_cancel")
    assert "TIMER_FIRED" not in cancel
    assert cancel.index("TIMER_STARTED") < cancel.index("TIMER_CANCELED"), cancel
    for run in ("engine_4_run0", "engine_4_deadline_run0"):
        continued = kinds(run)
        assert "TIMER_FIRED" not in continued
        last_task = len(continued) - 1 - continued[::-1].index("WORKFLOW_TASK_COMPLETED")
        closing = continued[last_task + 1 :]  # what the closing workflow task wrote
        assert closing[-2:] == ["TIMER_CANCELED", "WORKFLOW_EXECUTION_CONTINUED_AS_NEW"], closing
        assert "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES" not in closing, closing
    assert kinds("engine_4_run1")[:6][-1] == "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"
    assert "TIMER_STARTED" in kinds("engine_4_deadline_run1")  # the deadline, armed again


async def test_a_worker_refuses_a_run_carried_from_a_newer_engine(
    session_env, tmp_path, monkeypatch
):
    """A run continued as new by a newer worker (its engine above this code's) fails its
    workflow task here, saying what to do, and the session stays running for a worker
    that knows its engine: replayed here it would not give the commands it recorded."""
    from phasegate.activities import definitions
    from phasegate.domain.session.plan import SESSION_ENGINE

    monkeypatch.setattr(definitions, "SESSION_ENGINE", SESSION_ENGINE + 1)  # "a newer worker"
    pg, _ = session_env
    options = SessionOptions(continue_as_new_after_events=12)
    sid = await pg.start("mini_v1", str(tmp_path), options=options)
    first_run = (await pg.handle(sid).describe()).run_id
    for i in range(6):  # failed attempts grow history past the limit
        await pg.handle(sid).signal("checkpoint", {"phase": 0, "evidence": {}}, rpc_timeout=None)
        if (await pg.handle(sid).describe()).run_id != first_run:
            break
        await asyncio.sleep(0.1)
    handle = pg.temporal.get_workflow_handle(sid)
    message = ""
    for _ in range(100):
        described = await handle.describe()
        if described.run_id != first_run:
            failed = _events(
                await handle.fetch_history(), EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            )
            if failed:
                message = failed[0].workflow_task_failed_event_attributes.failure.message
                break
        await asyncio.sleep(0.1)
    try:
        assert f"this session runs engine {SESSION_ENGINE + 1}" in message, message
        assert "upgrade phasegate on this worker" in message
        assert described.status is not None and described.status.name == "RUNNING"
    finally:
        await handle.terminate("test over")
