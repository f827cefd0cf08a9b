"""Session controls through the `control` update: each audited; rollback only goes back."""

from __future__ import annotations

from typing import get_args

import pytest
from fixture_evidence import GOOD_0

from phasegate.domain.errors import PhasegateError, PhaseSequenceViolation, SessionNotActive
from phasegate.domain.session.messages import (
    ControlRequest,
    PhaseView,
    SequenceViolation,
    SessionStatus,
)
from phasegate.domain.session.views import details_markdown


async def _to_phase_2(pg, sid):
    assert (await pg.submit(sid, 0, GOOD_0)).passed
    assert (await pg.submit(sid, 1, {"plan": "the plan"})).awaiting_approval
    view = await pg.decide(sid, approver="alice", decision="approve")
    assert view.current_phase == 2


async def test_pause_resume_retry_are_audited(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    await pg.submit(sid, 0, {"modules_found": 0})
    await pg.submit(sid, 0, {})
    assert (await pg.status(sid)).attempts == 2
    result = await pg.control(
        sid, ControlRequest(action="retry_phase", reason="fresh start", actor="bob")
    )
    assert result.status == "active" and (await pg.status(sid)).attempts == 0
    await pg.control(sid, ControlRequest(action="pause", reason="review", actor="bob"))
    with pytest.raises(SessionNotActive):
        await pg.control(sid, ControlRequest(action="pause", actor="bob"))
    with pytest.raises(SessionNotActive) as err:
        await pg.submit(sid, 0, GOOD_0)
    assert "paused" in str(err.value)
    await pg.control(sid, ControlRequest(action="resume", actor="carol"))
    view = await pg.status(sid)
    assert [(a.action, a.actor, a.detail) for a in view.audit] == [
        ("retry_phase", "bob", "fresh start"),
        ("pause", "bob", "review"),
        ("resume", "carol", ""),
    ]
    assert all(a.at is not None and a.phase == 0 for a in view.audit)


async def test_rollback_keeps_superseded_artifacts(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    await _to_phase_2(pg, sid)
    result = await pg.control(
        sid,
        ControlRequest(action="rollback", to_phase=0, reason="wrong module count", actor="lead"),
    )
    assert result.current_phase == 0 and result.status == "active"
    view = await pg.status(sid)
    assert view.completed_phases == [] and view.artifacts == {}
    assert [(a.phase, a.superseded) for a in view.superseded] == [(0, True), (1, True)]
    assert view.superseded[0].evidence == GOOD_0  # nothing recorded is lost
    assert view.audit[-1].action == "rollback" and view.audit[-1].phase == 2
    # Phases after the rollback point are future again: not readable.
    assert isinstance(await pg.phase(sid, 1), SequenceViolation)
    assert isinstance(await pg.phase(sid, 2), SequenceViolation)
    # Work goes forward again only through the gates.
    again = await pg.submit(sid, 0, {"modules_found": 4, "summary": "four modules after all"})
    assert again.passed and again.next_phase and again.next_phase.phase == 1
    current = await pg.phase(sid, 1)
    assert isinstance(current, PhaseView) and current.artifacts["0"].evidence["modules_found"] == 4


async def test_rollback_never_moves_forward(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    assert (await pg.submit(sid, 0, GOOD_0)).passed  # on phase 1 now
    for target in (1, 2, 5, -1, None):
        with pytest.raises(PhaseSequenceViolation):
            await pg.control(sid, ControlRequest(action="rollback", to_phase=target, actor="x"))
    assert (await pg.status(sid)).current_phase == 1


async def test_abandon_is_terminal_and_needs_a_reason(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    with pytest.raises(PhasegateError):
        await pg.control(sid, ControlRequest(action="abandon", actor="bob"))
    await pg.control(sid, ControlRequest(action="abandon", reason="spec withdrawn", actor="bob"))
    summary = await pg.result(sid)
    assert summary.status == "abandoned"
    view = await pg.status(sid)
    assert view.status == "abandoned" and view.audit[-1].detail == "spec withdrawn"
    with pytest.raises(PhasegateError):
        await pg.submit(sid, 0, GOOD_0)


def test_every_status_renders_web_ui_details(tmp_path):
    """A status the details renderer does not know would fail the workflow task."""
    from phasegate.domain.session.messages import DefinitionRef, PhaseDefinition
    from phasegate.domain.session.state import PhaseLedger, SessionState

    state = SessionState(
        workflow_type="w",
        ref=DefinitionRef(workflow_type="w", total_phases=2, static_phase_count=2),
        phases=PhaseLedger(current=PhaseDefinition(index=0, label="0", name="First", content="x")),
    )
    for status in get_args(SessionStatus):
        state.status = status
        assert "phase 0 (1 of 2)" in details_markdown(state)


async def test_rollback_forgets_answers_about_undone_phases(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    first = await pg.submit(sid, 0, GOOD_0, submission_id="p0")
    assert first.next_phase and first.next_phase.phase == 1
    await pg.control(
        sid, ControlRequest(action="rollback", to_phase=0, reason="redo", actor="lead")
    )
    # The same submission id after a rollback is a new submission, not a stale "passed"
    # pointing ahead. (Sent with a fresh update id: within one run Temporal itself answers a
    # repeated update id with its first outcome, which the agent has already seen.)
    from phasegate.domain.session.messages import CheckpointSubmission
    from phasegate.workflows.gated_session import GatedSession

    again = await pg.handle(sid).execute_update(
        GatedSession.submit_checkpoint,
        CheckpointSubmission(phase=0, evidence={"modules_found": 0}, submission_id="p0"),
        id="p0-after-rollback",
    )
    assert not again.passed and again.current_phase == 0 and again.next_phase is None
    view = await pg.status(sid)
    assert [a.phase for a in view.attempt_log] == [0]  # the undone attempt stays on record
    assert view.attempt_log[0].passed and view.attempt_log[0].evidence_sha256


async def test_large_evidence_survives_continue_as_new(session_env, tmp_path):
    """Near-cap evidence in many attempts must not push the carried state past 2 MB."""
    from phasegate.domain.session.messages import SessionOptions

    pg, _ = session_env
    sid = await pg.start(
        "mini_v1", str(tmp_path), options=SessionOptions(continue_as_new_after_events=40)
    )
    first_run = (await pg.handle(sid).describe()).run_id
    blob = "x" * 250_000
    for i in range(12):  # 12 x 250 KB of failed attempts: 3 MB of evidence
        result = await pg.submit(
            sid, 0, {"modules_found": 0, "summary": blob}, submission_id=f"b{i}"
        )
        assert not result.passed
    assert (await pg.submit(sid, 0, GOOD_0)).passed
    assert (await pg.handle(sid).describe()).run_id != first_run
    view = await pg.status(sid)
    assert view.current_phase == 1 and len(view.attempt_log) == 13
    assert all(a.evidence_bytes > 0 for a in view.attempt_log)
