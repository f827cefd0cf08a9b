"""What a new session writes to history and visibility (workflows/_session_patches.py):
loaded at engine 1, it records no patch marker but the load's, so the server upserts
``TemporalChangeVersion`` once per run instead of once per patch; its first prefetch is
a local activity in the workflow task that made it ready, so no activity task or second
workflow task comes before the agent's first message; and the engine level survives
continue-as-new."""

from __future__ import annotations

import asyncio
import json

from fixture_evidence import GOOD_0
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import SessionOptions
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
