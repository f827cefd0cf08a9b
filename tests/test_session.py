"""GatedSession end to end on a real dev server: gating on every access path,
checkpoints, artifacts, approvals, idempotency, concurrency, signals, errors."""

from __future__ import annotations

import asyncio
import base64
import re
import uuid

import pytest
from conftest import FIXTURES
from fixture_evidence import GOOD_0
from temporalio.api.enums.v1 import EventType

from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import (
    ApprovalRefused,
    DefinitionError,
    PayloadTooLarge,
    PhasegateError,
    PhaseSequenceViolation,
    SessionNotActive,
    SpecParseError,
    WorkflowNotFound,
)
from phasegate.domain.session.messages import (
    ControlRequest,
    PhaseView,
    SequenceViolation,
    SessionOptions,
    TaskView,
)
from phasegate.domain.session.plan import PHASE_ATTRIBUTE_SECONDS

SECRET = "SECRET-FUTURE-CONTENT"


async def _history_text(pg: PhasegateClient, sid: str) -> str:
    """Every payload of the session's history, decoded (payload data is base64 in JSON)."""
    raw = (await pg.handle(sid).fetch_history()).to_json()
    decoded = [
        base64.b64decode(m).decode("utf-8", "replace")
        for m in re.findall(r'"data":\s*"([A-Za-z0-9+/=]+)"', raw)
    ]
    return raw + "\n".join(decoded)


async def _update_events(pg: PhasegateClient, sid: str) -> int:
    history = await pg.handle(sid).fetch_history()
    return sum(
        1
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    )


async def test_static_session_walkthrough(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))

    status = await pg.status(sid)
    assert (status.status, status.current_phase, status.total_phases) == ("active", 0, 3)

    view = await pg.phase(sid, 0)
    assert isinstance(view, PhaseView)
    assert str(tmp_path) in view.content  # jinja variable
    assert "Legacy name: Analyse" in view.content  # legacy placeholder
    assert "next phase 1" in view.content
    assert "[NOT_A_PLACEHOLDER]" in view.content  # other brackets untouched
    assert [t.name for t in view.tasks] == ["Read the code", "Write notes"]
    assert view.gate.fields["modules_found"].type == "integer"
    assert view.gate.fields["modules_found"].required

    task = await pg.task(sid, 0, 1)
    assert isinstance(task, TaskView) and "Read the code" in task.content
    task2 = await pg.task(sid, 0, "2")
    assert isinstance(task2, TaskView) and "next task: none" in task2.content

    # Incomplete evidence: every problem is listed, nothing advances.
    result = await pg.submit(sid, 0, {"modules_found": 0, "summary": 7})
    assert not result.passed and result.current_phase == 0 and result.next_phase is None
    fields = {p.field for p in result.problems}
    assert fields == {"modules_found", "summary"}
    assert all(p.message for p in result.problems)
    missing = await pg.submit(sid, 0, {})
    assert {p.field for p in missing.problems} >= {"modules_found", "summary"}
    assert (await pg.status(sid)).attempts == 2

    # Valid evidence advances and returns the next phase's content at once.
    result = await pg.submit(sid, 0, GOOD_0)
    assert result.passed and result.current_phase == 1
    assert result.next_phase is not None and result.next_phase.name == "Plan"
    assert "alice" in result.next_phase.content

    # Phase 1 needs alice's approval.
    result = await pg.submit(sid, 1, {"plan": "do it well"})
    assert result.passed and result.awaiting_approval and result.next_phase is None
    assert (await pg.status(sid)).status == "awaiting_approval"
    with pytest.raises(SessionNotActive):
        await pg.submit(sid, 1, {"plan": "again"})
    with pytest.raises(ApprovalRefused):
        await pg.decide(sid, approver="mallory", decision="approve")
    with pytest.raises(ApprovalRefused):
        await pg.decide(sid, approver="alice", decision="approve", phase=0)
    view = await pg.decide(sid, approver="alice", decision="reject", comment="add tests")
    assert view.status == "active" and view.feedback == "add tests"
    result = await pg.submit(sid, 1, {"plan": "do it well, with tests"})
    assert result.awaiting_approval
    view = await pg.decide(sid, approver="alice", decision="approve", comment="ok")
    assert view.status == "active" and view.current_phase == 2
    assert [a.decision for a in view.approvals] == ["reject", "approve"]

    # Earlier artifacts are visible from later phases.
    current = await pg.phase(sid, 2)
    assert isinstance(current, PhaseView) and SECRET in current.content
    assert current.artifacts["0"].evidence == GOOD_0
    assert current.artifacts["1"].approved_by == "alice"
    assert current.artifacts["1"].submitted_at is not None

    # Lenient gate: a validator failure is a warning, a missing field still blocks.
    blocked = await pg.submit(sid, 2, {"tests_run": 3, "coverage": 50})
    assert not blocked.passed and [p.field for p in blocked.problems] == ["tests_passed"]
    done = await pg.submit(sid, 2, {"tests_run": 3, "tests_passed": 3, "coverage": 50})
    assert done.passed and done.completed and done.warnings
    summary = await pg.result(sid)
    assert summary.status == "completed" and summary.completed_phases == [0, 1, 2]

    # A finished session still answers reads, including completed phases.
    old = await pg.phase(sid, 0)
    assert isinstance(old, PhaseView) and old.state == "completed"
    assert old.artifacts["0"].evidence == GOOD_0


async def test_future_content_never_leaks(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    for phase in (1, 2, 7, -1):
        view = await pg.phase(sid, phase)
        assert isinstance(view, SequenceViolation)
        assert view.error == "phase_sequence_violation" and view.current_phase == 0
        assert SECRET not in view.model_dump_json()
        task = await pg.task(sid, phase, 1)
        assert isinstance(task, SequenceViolation)
        assert SECRET not in task.model_dump_json()
    with pytest.raises(PhaseSequenceViolation) as err:
        await pg.submit(sid, 2, {"tests_run": 1, "tests_passed": 1})
    assert SECRET not in str(err.value)
    status = await pg.status(sid)
    assert SECRET not in status.model_dump_json()
    result = await pg.submit(sid, 0, {"modules_found": 0})
    assert SECRET not in result.model_dump_json()
    # With the default prefetch the next phase (only) is rendered ahead into history;
    # phase 2 is two ahead, so nothing of it is there yet.
    assert SECRET not in await _history_text(pg, sid)


async def test_without_prefetch_history_never_holds_a_future_phase(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path), options=SessionOptions(prefetch=False))
    assert (await pg.submit(sid, 0, GOOD_0)).passed  # now on phase 1; phase 2 is next
    assert (await pg.submit(sid, 1, {"plan": "the plan"})).awaiting_approval
    assert SECRET not in await _history_text(pg, sid)
    await pg.decide(sid, approver="alice", decision="approve")
    assert SECRET in await _history_text(pg, sid)  # reached, so rendered: this check can fail


async def test_a_deployment_without_prefetch_overrides_the_starter(
    env, settings_for, run_worker, tmp_path
):
    # PHASEGATE_PREFETCH=0 on the worker: a starter asking for prefetch gets none.
    settings = settings_for(FIXTURES / "library", prefetch=False)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("mini_v1", str(tmp_path), options=SessionOptions(prefetch=True))
        assert (await pg.submit(sid, 0, GOOD_0)).passed
        assert (await pg.submit(sid, 1, {"plan": "the plan"})).awaiting_approval
        assert SECRET not in await _history_text(pg, sid)
        await pg.decide(sid, approver="alice", decision="approve")
        assert SECRET in await _history_text(pg, sid)  # reached, so rendered


async def test_protocol_violations_never_touch_history(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path), options=SessionOptions(max_evidence_bytes=200))
    with pytest.raises(PhaseSequenceViolation):
        await pg.submit(sid, 1, GOOD_0)
    with pytest.raises(PayloadTooLarge) as err:
        await pg.submit(sid, 0, {**GOOD_0, "blob": "x" * 500})
    assert "200" in str(err.value)
    await pg.control(sid, ControlRequest(action="pause", reason="lunch", actor="bob"))
    with pytest.raises(SessionNotActive) as err:
        await pg.submit(sid, 0, GOOD_0)
    assert "paused" in str(err.value)
    assert await _update_events(pg, sid) == 1  # only the pause was accepted
    await pg.control(sid, ControlRequest(action="resume", actor="bob"))
    assert (await pg.submit(sid, 0, GOOD_0)).passed


async def test_idempotent_submission_ids(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    first = await pg.submit(sid, 0, GOOD_0, submission_id="s-1")
    again = await pg.submit(sid, 0, GOOD_0, submission_id="s-1")
    assert first == again and first.current_phase == 1
    # The same id after the phase moved on still returns the original answer.
    status = await pg.status(sid)
    assert status.current_phase == 1 and len(status.completed_phases) == 1
    # A repeat that bypasses Temporal's update-id dedupe (new update id) is also caught.
    from phasegate.domain.session.messages import CheckpointSubmission
    from phasegate.workflows.gated_session import GatedSession

    raw = await pg.handle(sid).execute_update(
        GatedSession.submit_checkpoint,
        CheckpointSubmission(phase=0, evidence=GOOD_0, submission_id="s-1"),
        id=str(uuid.uuid4()),
    )
    assert raw == first
    assert len((await pg.status(sid)).completed_phases) == 1


async def test_concurrent_submissions_advance_once(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    outcomes = await asyncio.gather(
        *(pg.submit(sid, 0, GOOD_0, submission_id=f"c-{i}") for i in range(4)),
        return_exceptions=True,
    )
    passed = [o for o in outcomes if not isinstance(o, BaseException) and o.passed]
    refused = [o for o in outcomes if isinstance(o, PhaseSequenceViolation)]
    assert len(passed) == 1 and len(refused) == 3, outcomes
    status = await pg.status(sid)
    assert status.current_phase == 1 and [c.phase for c in status.completed_phases] == [0]


async def test_fire_and_forget_submission(session_env, tmp_path):
    # The retired checkpoint signal's replacement: an update waited on only until accepted.
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    with pytest.raises(PhaseSequenceViolation):  # refused by the validator, still reported
        await pg.submit_nowait(sid, 2, {"tests_run": 1})
    sub_id = await pg.submit_nowait(sid, 0, GOOD_0)
    for _ in range(100):
        status = await pg.status(sid)
        if status.current_phase == 1:
            break
        await asyncio.sleep(0.05)
    assert status.current_phase == 1
    again = await pg.submit(sid, 0, GOOD_0, submission_id=sub_id)  # the outcome, by its id
    assert again.passed and again.current_phase == 1


async def test_unknown_workflow_and_bad_spec(session_env, tmp_path):
    pg, _ = session_env
    with pytest.raises(WorkflowNotFound) as err:
        await pg.start("nope_v9", str(tmp_path))
    assert "mini_v1" in str(err.value) and "spec_execution_v1" in str(err.value)

    spec = tmp_path / "tasks.md"
    spec.write_text("# Just prose\n\nNo phases or tasks here.\n")
    with pytest.raises(SpecParseError) as err:
        await pg.start("dyn_v1", str(tmp_path), options=SessionOptions(spec_path=str(spec)))
    assert "tasks.md:" in str(err.value)

    with pytest.raises(DefinitionError) as err:
        await pg.start("dyn_v1", str(tmp_path))
    assert "spec_path" in str(err.value)


async def test_render_failure_keeps_evidence(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("broken_v1", str(tmp_path))
    with pytest.raises(PhasegateError) as err:
        await pg.submit(sid, 0, {"done": True})
    assert "could not be rendered" in str(err.value) and "phase.md" in str(err.value)
    status = await pg.status(sid)
    assert status.current_phase == 0 and status.attempts == 1 and status.status == "active"


async def test_fallback_gate_from_markdown(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("fallback_v1", str(tmp_path))
    view = await pg.phase(sid, 0)
    assert isinstance(view, PhaseView)
    assert {"files_changed", "tests_passing"} <= set(view.gate.fields)
    result = await pg.submit(sid, 0, {"files_changed": ["a.py"]})
    assert not result.passed and "tests_passing" in {p.field for p in result.problems}


async def test_dynamic_session_snapshot(session_env, tmp_path):
    pg, _ = session_env
    spec = tmp_path / "tasks.md"
    spec.write_text(
        "# Spec\n\n## Phase 1: Setup\n\n"
        "- [ ] **Task 1.1**: Create repo\n  - **Dependencies**: None\n"
        "- [ ] **Task 1.2**: Add CI\n  - **Dependencies**: 1.1\n\n"
        "**Validation Gate:**\n- [ ] CI is green\n\n"
        "## Phase 2: Feature\n\n- [ ] **Task 2.1**: Build it\n"
    )
    sid = await pg.start("dyn_v1", str(tmp_path), options=SessionOptions(spec_path=str(tmp_path)))
    spec.write_text("# Spec\n\n## Phase 1: Changed\n\n- [ ] **Task 1.1**: Other\n")
    view = await pg.phase(sid, 0)
    assert isinstance(view, PhaseView)
    assert view.name == "Setup" and view.label == "1"
    assert "- 1.1 Create repo" in view.content and "- [ ] CI is green" in view.content
    assert [t.id for t in view.tasks] == ["1.1", "1.2"]
    task = await pg.task(sid, 0, "1.2")
    assert isinstance(task, TaskView) and "Depends on: 1.1" in task.content
    assert (await pg.status(sid)).total_phases == 2
    missing = await pg.submit(sid, 0, {"tasks_completed": ["1.1"]})
    assert not missing.passed
    assert any("1.2" in p.message for p in missing.problems)
    ok = await pg.submit(sid, 0, {"tasks_completed": ["1.1", "1.2"], "ci_is_green": True})
    assert ok.passed and ok.next_phase and ok.next_phase.name == "Feature"


async def test_a_status_change_is_published_at_once_with_the_phase(session_env, tmp_path):
    """The phase alone is held (an upsert costs the server as much as the advance); a
    status change is not, and carries the phase it happened on."""
    from phasegate.temporal import SA_PHASE, SA_STATUS

    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    assert (await pg.submit(sid, 0, GOOD_0)).passed
    sa = (await pg.handle(sid).describe()).typed_search_attributes
    assert (sa.get(SA_PHASE), sa.get(SA_STATUS)) == (0, "active")  # held: this test can fail
    assert (await pg.submit(sid, 1, {"plan": "the plan"})).awaiting_approval
    sa = (await pg.handle(sid).describe()).typed_search_attributes
    assert (sa.get(SA_PHASE), sa.get(SA_STATUS)) == (1, "awaiting_approval")
    upserts = [
        e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        async for e in pg.handle(sid).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    ours = [fields for fields in upserts if "PhasegatePhase" in fields]
    assert len(ours) == 2  # the load's and the status change's, nothing for phase 1 alone


async def test_visibility_search_attributes(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    await pg.submit(sid, 0, GOOD_0)
    from phasegate.temporal import SA_PHASE, SA_STATUS, SA_WORKFLOW

    # A change of the phase alone is held for PHASE_ATTRIBUTE_SECONDS after the last
    # upsert (the load's), then written by a timer.
    for _ in range(int(PHASE_ATTRIBUTE_SECONDS + 5) * 20):
        desc = await pg.handle(sid).describe()
        sa = desc.typed_search_attributes
        if sa.get(SA_PHASE) == 1:
            break
        await asyncio.sleep(0.05)
    assert (sa.get(SA_WORKFLOW), sa.get(SA_PHASE), sa.get(SA_STATUS)) == ("mini_v1", 1, "active")
    assert "mini_v1" in (await desc.static_summary() or "")
    for _ in range(60):  # visibility is eventually consistent (~1.5 s)
        listed = await pg.list(workflow_type="mini_v1", status="active")
        if any(s.session_id == sid for s in listed):
            break
        await asyncio.sleep(0.1)
    assert any(s.session_id == sid and s.phase == 1 for s in listed)
    from temporalio.api.sdk.v1 import WorkflowMetadata

    meta = await pg.handle(sid).query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "phase 1 (2 of 3): Plan" in meta.current_details
    assert "waiting for checkpoint evidence" in meta.current_details
