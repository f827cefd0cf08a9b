"""Controls of the pure session state (pause, resume, retry_phase, rollback, abandon):
what each does to a session, no server. Who may send them: tests/test_signed_controls.py."""

from __future__ import annotations

import pytest
from session_helpers import (
    BAD,
    GOOD,
    control,
    decide,
    new_state,
    submit,
    to_phase,
)

from phasegate.domain.errors import (
    ApprovalRefused,
    PhaseSequenceViolation,
    SessionError,
    SessionNotActive,
)

# --------------------------------------------------------------------------- controls


def test_pause_and_resume_restore_the_waiting_status() -> None:
    state = new_state()
    to_phase(state, 1)
    submit(state, 1, GOOD[1])
    with pytest.raises(SessionNotActive, match="not paused"):
        control(state, "resume")
    control(state, "pause", reason="holiday")
    assert state.status == "paused" and state.paused_from == "awaiting_approval"
    with pytest.raises(SessionNotActive, match="already paused"):
        control(state, "pause")
    with pytest.raises(ApprovalRefused, match="nothing awaits approval"):
        decide(state, "lead")
    control(state, "resume")
    assert state.status == "awaiting_approval" and state.paused_from is None
    assert [a.action for a in state.audit][-2:] == ["pause", "resume"]
    assert state.audit[-2].detail == "holiday" and state.audit[-2].actor == "ops"


def test_retry_phase_starts_the_attempt_count_again() -> None:
    state = new_state()
    submit(state, 0, BAD[0])
    submit(state, 0, BAD[0])
    state.feedback = "old feedback"
    control(state, "retry_phase", reason="fresh start")
    assert state.attempts.count == 0 and state.attempts.current == [] and state.feedback == ""
    assert len(state.attempts.earlier) == 2 and state.current.index == 0


def test_retry_phase_while_awaiting_approval_reopens_the_phase() -> None:
    # Issue 9, item 6: the passed checkpoint is withdrawn (kept as superseded), the
    # session takes new evidence instead of staying stuck awaiting approval.
    state = new_state()
    to_phase(state, 1)
    assert submit(state, 1, GOOD[1]).awaiting_approval and state.book.due_at
    control(state, "retry_phase", reason="plan needs a rollback section")
    assert state.status == "active" and state.phases.pending is None and state.book.due_at is None
    assert [(a.phase, a.superseded) for a in state.phases.superseded] == [(1, True)]
    assert state.audit[-1].action == "retry_phase" and state.audit[-1].phase == 1
    with pytest.raises(ApprovalRefused, match="nothing awaits approval"):
        decide(state, "lead")
    assert submit(state, 1, {"plan": "plan with rollback"}).awaiting_approval
    assert state.attempts.count == 1


def test_retry_phase_while_paused_awaiting_approval_resumes_as_active() -> None:
    state = new_state()
    to_phase(state, 1)
    submit(state, 1, GOOD[1])
    control(state, "pause", reason="review")
    control(state, "retry_phase", reason="redo")
    assert state.phases.pending is None and state.paused_from == "active"
    control(state, "resume")
    assert state.status == "active"


def test_rollback_reopens_a_completed_phase_and_forgets_later_answers() -> None:
    state = new_state()
    submit(state, 0, GOOD[0], sid="p0")
    submit(state, 1, GOOD[1], sid="p1")
    with pytest.raises(PhaseSequenceViolation, match="1 is not one") as err:
        control(state, "rollback", to_phase=1)
    assert err.value.hint == "completed phases: 0"
    with pytest.raises(PhaseSequenceViolation):
        control(state, "rollback")
    control(state, "rollback", to_phase=0, reason="redo")
    assert state.current.index == 0 and state.status == "active" and state.phases.completed == []
    assert state.phases.past == {} and state.phases.artifacts == {} and state.phases.pending is None
    assert [(a.phase, a.superseded) for a in state.phases.superseded] == [(0, True), (1, True)]
    assert state.answers.by_submission == {} and state.book.due_at is None
    # The same id is a new submission now, not a stale answer pointing ahead.
    assert not submit(state, 0, BAD[0], sid="p0").passed


def test_abandon_needs_a_reason_and_ends_everything() -> None:
    state = new_state()
    with pytest.raises(SessionError, match="needs a reason") as err:
        control(state, "abandon")
    assert err.value.where == "reason"
    control(state, "abandon", reason="spec withdrawn")
    assert state.status == "abandoned" and state.finished
    with pytest.raises(SessionNotActive, match="no longer apply"):
        control(state, "pause")
    with pytest.raises(SessionNotActive, match="abandoned"):
        submit(state, 0, GOOD[0])
