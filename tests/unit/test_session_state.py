"""``SessionState`` driven directly, without a server: submissions, approvals (allowlist,
signed and unsigned policy), controls, approval deadlines, the verify budget and the
continue-as-new carry. ``session_helpers`` makes the calls ``GatedSession`` makes, with
the activities (render, verify, webhook) replaced by their outcomes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from session_helpers import (
    BAD,
    GOOD,
    HOOK,
    NOW,
    PHASES,
    SESSION_ID,
    Signer,
    control,
    decide,
    make_phase,
    new_state,
    submit,
    to_phase,
    verify_results,
)

from phasegate.domain.errors import (
    ApprovalRefused,
    PayloadTooLarge,
    PhaseSequenceViolation,
    SessionNotActive,
)
from phasegate.domain.session.bounds import CARRY_LIMIT_BYTES
from phasegate.domain.session.messages import CheckpointSubmission, SessionOptions
from phasegate.domain.session.state import (
    DEADLINE_ACTOR,
    VERIFY_SLACK_SECONDS,
    SessionState,
)
from phasegate.domain.signing import UNSIGNED_REASON
from phasegate.domain.verify import CommandCheck, FileExistsCheck

# --------------------------------------------------------------------------- submissions


def test_passing_evidence_advances_and_answers_with_the_next_phase() -> None:
    state = new_state()
    result = submit(state, 0, GOOD[0], sid="s1", now=NOW + timedelta(minutes=1))
    assert result.passed and not result.completed and not result.awaiting_approval
    assert result.current_phase == 1 and result.attempt == 1 and result.submission_id == "s1"
    assert result.next_phase is not None and result.next_phase.phase == 1
    assert result.next_phase.content == "content of phase 1"
    assert state.current.index == 1 and state.status == "active" and state.attempts.count == 0
    assert [c.phase for c in state.phases.completed] == [0] and state.phases.completed[0].attempts == 1
    assert state.phases.artifacts[0].evidence == GOOD[0] and state.phases.pending is None
    assert state.updated_at == NOW + timedelta(minutes=1)
    assert [a.phase for a in state.attempts.earlier] == [0]
    # The advance's answer carries the next phase's whole view, gate schema included.
    assert result.next_phase.gate.json_schema["required"] == list(result.next_phase.gate.fields)
    # Remembered without the next phase's view; a repeat builds it again from state.
    assert state.answers.by_submission["s1"].next_phase is None
    assert state.repeat("s1") == result


def test_failing_evidence_is_recorded_and_does_not_advance() -> None:
    state = new_state()
    result = submit(state, 0, BAD[0], sid="bad")
    assert not result.passed and result.current_phase == 0 and result.next_phase is None
    assert {p.field for p in result.problems} == {"summary", "count"}
    assert result.example_evidence == PHASES[0].example_evidence
    assert state.current.index == 0 and state.attempts.count == 1 and not state.phases.completed
    assert state.attempts.current[0].evidence == BAD[0] and state.attempts.current[0].evidence_sha256
    assert state.status_view().last_problems == result.problems
    assert state.answers.by_submission["bad"] == result


def test_a_repeated_submission_id_never_advances_twice() -> None:
    state = new_state()
    first = submit(state, 0, GOOD[0], sid="once")
    before = state.model_dump()
    again = submit(state, 0, GOOD[0], sid="once")
    assert again == first and state.model_dump() == before
    assert state.check_submission(CheckpointSubmission(phase=0, submission_id="once")) is None


def test_the_last_phase_completes_the_session() -> None:
    state = new_state()
    to_phase(state, 3)
    result = submit(state, 3, GOOD[3], sid="last")
    assert result.passed and result.completed and result.next_phase is None
    assert result.current_phase == 3 and state.status == "completed" and state.finished
    assert [c.phase for c in state.phases.completed] == [0, 1, 2, 3]
    assert state.summary().completed_phases == [0, 1, 2, 3]
    with pytest.raises(SessionNotActive, match="completed"):
        submit(state, 3, GOOD[3])


def test_wrong_phase_is_a_sequence_violation() -> None:
    state = new_state()
    with pytest.raises(PhaseSequenceViolation, match="not reached yet") as err:
        submit(state, 1, GOOD[1])
    assert err.value.where == "phase"
    submit(state, 0, GOOD[0])
    with pytest.raises(PhaseSequenceViolation, match="already completed"):
        submit(state, 0, GOOD[0])
    assert state.attempts.count == 0  # refusals record nothing


def test_oversize_evidence_is_refused() -> None:
    state = new_state(options=SessionOptions(max_evidence_bytes=64))
    with pytest.raises(PayloadTooLarge) as err:
        submit(state, 0, {"summary": "x" * 100, "count": 1})
    assert err.value.where == "evidence" and state.attempts.count == 0


def test_paused_and_awaiting_sessions_refuse_checkpoints() -> None:
    state = new_state()
    control(state, "pause", reason="lunch")
    with pytest.raises(SessionNotActive, match="paused"):
        submit(state, 0, GOOD[0])
    control(state, "resume")
    to_phase(state, 1)
    assert submit(state, 1, GOOD[1]).awaiting_approval
    with pytest.raises(SessionNotActive, match="awaits approval by lead, ops"):
        submit(state, 1, GOOD[1])


def test_verify_runs_only_for_otherwise_passing_evidence_and_blocks_lenient_gates() -> None:
    state = new_state()
    to_phase(state, 2)
    sub = CheckpointSubmission(phase=2, evidence=BAD[2])
    assert not state.needs_verify(state.evaluate(sub))
    lenient = {"tests_run": 1, "tests_passed": 2}  # the rule fails: only a warning here
    evaluation = state.evaluate(CheckpointSubmission(phase=2, evidence=lenient))
    assert evaluation.passed and evaluation.warnings and state.needs_verify(evaluation)
    result = submit(state, 2, lenient, verify_ok=False)
    assert not result.passed and result.current_phase == 2
    failed = [p for p in result.problems if p.field.startswith("verify:")]
    assert [(p.field, p.rule, p.got) for p in failed] == [
        ("verify:tests", "verify:command", "1 failed, 3 passed")
    ]
    assert result.verify == verify_results(False)
    result = submit(state, 2, lenient, verify_ok=True)
    assert result.passed and result.awaiting_approval and result.warnings
    assert state.phases.pending is not None
    assert [r["passed"] for r in state.phases.pending.outputs["verify"]] == [True, True]


def test_checks_that_cannot_run_block() -> None:
    state = new_state()
    to_phase(state, 2)
    sub = CheckpointSubmission(phase=2, evidence=GOOD[2])
    unavailable = state.verify_unavailable("worker lost")
    result, advance = state.apply_submission(sub, NOW, "update", None, unavailable)
    assert not result.passed and not advance
    assert result.problems[-1].field == "verify:verify"
    assert "could not run: worker lost" in result.problems[-1].message


def test_a_signal_clears_the_last_signal_error() -> None:
    state = new_state()
    state.last_signal_error = "earlier refusal"
    submit(state, 0, BAD[0], via="update")
    assert state.last_signal_error == "earlier refusal"
    submit(state, 0, BAD[0], via="signal")
    assert state.last_signal_error is None and state.attempts.current[-1].via == "signal"


def test_only_the_last_ten_attempts_keep_their_evidence() -> None:
    state = new_state()
    for i in range(12):
        submit(state, 0, {**BAD[0], "i": i})
    assert [bool(a.evidence) for a in state.attempts.current] == [False] * 2 + [True] * 10
    assert all(a.evidence_sha256 for a in state.attempts.current)


# --------------------------------------------------------------------------- approvals


def test_approval_allowlist_and_approve_advances() -> None:
    state = new_state()
    to_phase(state, 1)
    assert submit(state, 1, GOOD[1]).awaiting_approval
    assert state.status_view().awaiting_approval_from == ["lead", "ops"]
    with pytest.raises(ApprovalRefused, match="'mallory' may not approve") as err:
        decide(state, "mallory")
    assert err.value.where == "approver" and "lead, ops" in (err.value.hint or "")
    with pytest.raises(ApprovalRefused, match="must name its approver"):
        decide(state, "  ")
    with pytest.raises(ApprovalRefused, match="phase 0 is not awaiting"):
        decide(state, "ops", phase=0)
    assert decide(state, "ops", comment="fine", now=NOW + timedelta(minutes=5))
    assert state.current.index == 2 and state.phases.artifacts[1].approved_by == "ops"
    assert [(a.approver, a.decision, a.phase) for a in state.book.records] == [("ops", "approve", 1)]
    assert state.audit[-1].action == "approve" and state.audit[-1].detail == "fine"
    assert state.book.due_at is None and state.phases.pending is None


def test_session_approvers_narrow_the_gate_never_widen_it() -> None:
    # The gate allows lead and ops; the session narrows to ops.
    state = new_state(options=SessionOptions(approvers=["ops", "qa"]))
    submit(state, 0, GOOD[0])
    assert submit(state, 1, GOOD[1]).awaiting_approval
    assert state.allowed_approvers() == ["ops"]
    for outsider in ("lead", "qa"):  # qa is named by the session but not by the gate
        with pytest.raises(ApprovalRefused):
            decide(state, outsider)
    assert decide(state, "ops")


def test_session_approvers_naming_none_of_the_gates_lock_the_approval() -> None:
    # A starter naming only itself must not become an approver: nobody may decide.
    state = new_state(options=SessionOptions(approvers=["agent"]))
    submit(state, 0, GOOD[0])
    assert submit(state, 1, GOOD[1]).awaiting_approval
    assert state.nobody_may_approve()
    for who in ("agent", "lead"):
        with pytest.raises(ApprovalRefused, match="nobody may approve"):
            decide(state, who)


def test_nothing_to_approve_is_refused() -> None:
    state = new_state()
    with pytest.raises(ApprovalRefused, match="nothing awaits approval"):
        decide(state, "lead")


def test_reject_reopens_the_phase_with_feedback() -> None:
    state = new_state()
    to_phase(state, 1)
    submit(state, 1, GOOD[1])
    assert not decide(state, "lead", "reject", comment="add a rollback plan")
    assert state.status == "active" and state.current.index == 1 and state.phases.pending is None
    assert state.feedback == "add a rollback plan" and state.book.due_at is None
    assert state.status_view().feedback == "add a rollback plan"
    result = submit(state, 1, {"plan": "plan with rollback"})
    assert result.awaiting_approval and state.feedback == ""
    assert not decide(state, "ops", "reject")
    assert state.feedback == "rejected by ops"


def test_signed_only_deployment_without_keys_accepts_no_decision() -> None:
    state = new_state(unsigned_approvals=False)
    submit(state, 0, GOOD[0])
    submit(state, 1, GOOD[1])
    with pytest.raises(ApprovalRefused, match="only signed approvals") as err:
        decide(state, "lead")
    assert err.value.where == "approver_keys"


def test_signed_approvals() -> None:
    lead, ops = Signer("lead"), Signer("ops")
    state = new_state(approver_keys=[lead.key, ops.key], unsigned_approvals=False)
    submit(state, 0, GOOD[0])
    submit(state, 1, GOOD[1])
    with pytest.raises(ApprovalRefused) as err:
        decide(state, "lead")
    assert err.value.message == UNSIGNED_REASON and err.value.where == "signature"
    forged = ops.sign(1, "approve", "n" * 16)  # ops's signature claimed as lead's
    with pytest.raises(ApprovalRefused, match="signature does not match"):
        decide(state, "lead", **forged)
    wrong_phase = lead.sign(0, "approve", "m" * 16)
    with pytest.raises(ApprovalRefused, match="signature does not match"):
        decide(state, "lead", **wrong_phase)
    reject = lead.sign(1, "reject", "r" * 16, comment="redo")
    assert not decide(state, "lead", "reject", comment="redo", **reject)
    assert state.book.used_nonces == ["r" * 16]
    submit(state, 1, GOOD[1])
    with pytest.raises(ApprovalRefused, match="nonce already used"):
        decide(state, "lead", "reject", comment="redo", **reject)
    assert decide(state, "lead", **lead.sign(1, "approve", "a" * 16))
    assert state.current.index == 2


# --------------------------------------------------------------------------- deadlines


def test_a_passed_checkpoint_sets_the_deadline_the_timer_runs_for() -> None:
    state = new_state()
    assert state.approval_deadline() is None
    to_phase(state, 1)
    submit(state, 1, GOOD[1], now=NOW)
    due = NOW + timedelta(hours=2)
    assert state.book.due_at == due and state.approval_deadline() == (1, due)
    assert state.approval_pending(1, due) and not state.approval_pending(1, NOW)
    assert state.status_view().approval_due_at == due
    control(state, "pause", reason="r")
    assert state.approval_deadline() is None and not state.approval_pending(1, due)
    control(state, "resume")
    assert state.approval_deadline() == (1, due)


def test_no_timeout_means_no_deadline() -> None:
    phases = [make_phase(0, {"evidence_schema": {"a": "string"}, "approval": True})]
    state = new_state(phases)
    assert submit(state, 0, {"a": "x"}, phases=phases).awaiting_approval
    assert state.book.due_at is None and state.approval_deadline() is None


def test_expiry_with_on_timeout_reject_reopens_the_phase() -> None:
    state = new_state()
    to_phase(state, 1)
    submit(state, 1, GOOD[1])
    phase, due = state.approval_deadline() or (0, NOW)
    expiry = state.apply_deadline(phase, due, due, SESSION_ID)
    assert expiry is not None and expiry.action == "reject" and expiry.notify is None
    assert state.status == "active" and state.current.index == 1 and state.phases.pending is None
    last = state.book.records[-1]
    assert (last.approver, last.decision, last.at) == (DEADLINE_ACTOR, "reject", due)
    assert "no decision within 2h" in state.feedback and "reopened" in state.feedback
    assert state.audit[-1].action == "reject" and state.audit[-1].actor == DEADLINE_ACTOR
    assert state.approval_deadline() is None
    assert state.apply_deadline(phase, due, due) is None  # fired once only


def test_expiry_with_on_timeout_escalate_marks_overdue_and_asks_to_notify() -> None:
    state = new_state()
    to_phase(state, 2)
    submit(state, 2, GOOD[2])
    phase, due = state.approval_deadline() or (0, NOW)
    later = due + timedelta(seconds=1)
    expiry = state.apply_deadline(phase, due, later, SESSION_ID)
    assert expiry is not None and expiry.action == "escalate"
    assert state.status == "approval_overdue" and state.awaiting_approval
    assert state.audit[-1].action == "escalate" and state.audit[-1].detail == (
        "no decision within 1h"
    )
    assert state.updated_at == later and state.phases.pending is not None
    assert expiry.notify is not None and expiry.notify.url == HOOK
    assert expiry.notify.payload == {
        "event": "approval_overdue",
        "session_id": SESSION_ID,
        "workflow_type": "unit_v1",
        "phase": 2,
        "phase_name": "Phase 2",
        "approvers": ["lead"],
        "due_at": due.isoformat(),
    }
    # Escalated once; no timer is armed for an overdue approval; it is still decidable.
    assert state.apply_deadline(phase, due, later) is None
    assert state.approval_deadline() is None
    with pytest.raises(SessionNotActive, match="awaits approval"):
        submit(state, 2, GOOD[2])
    state.apply_notification(phase, HOOK, later, error="HTTP 503")
    state.apply_notification(phase, HOOK, later)
    assert [(a.action, a.actor, a.detail) for a in state.audit[-2:]] == [
        ("notify", DEADLINE_ACTOR, f"notify {HOOK} failed: HTTP 503"),
        ("notify", DEADLINE_ACTOR, f"notified {HOOK}"),
    ]
    assert decide(state, "lead", comment="late but fine")
    assert state.current.index == 3 and state.status == "active"


def test_escalation_notifies_the_gates_address_else_the_sessions_else_nowhere() -> None:
    # The gate's own address wins: a starter cannot redirect the lead's notices.
    state = new_state(options=SessionOptions(notify_url="https://agent.example/x"))
    to_phase(state, 2)
    submit(state, 2, GOOD[2])
    phase, due = state.approval_deadline() or (0, NOW)
    expiry = state.apply_deadline(phase, due, due)
    assert expiry and expiry.notify and expiry.notify.url == "https://hooks.example/phasegate"

    due = NOW + timedelta(seconds=60)
    quiet = [make_phase(0, {"approval": {"required": True, "timeout": 60}})]
    state = new_state(quiet, options=SessionOptions(notify_url="https://ops.example/hook"))
    submit(state, 0, {}, phases=quiet)
    expiry = state.apply_deadline(0, due, due)
    assert expiry and expiry.notify and expiry.notify.url == "https://ops.example/hook"

    state = new_state(quiet)
    submit(state, 0, {}, phases=quiet)
    expiry = state.apply_deadline(0, due, due)
    assert expiry is not None and expiry.action == "escalate" and expiry.notify is None


def test_a_stale_deadline_changes_nothing() -> None:
    state = new_state()
    to_phase(state, 1)
    submit(state, 1, GOOD[1])
    phase, due = state.approval_deadline() or (0, NOW)
    decide(state, "lead", "reject")
    submit(state, 1, GOOD[1], now=NOW + timedelta(minutes=30))  # a new deadline
    new_due = NOW + timedelta(minutes=30, hours=2)
    assert state.approval_deadline() == (1, new_due)
    before = state.model_dump()
    assert state.apply_deadline(phase, due, due) is None  # the first approval's timer
    assert state.apply_deadline(0, new_due, new_due) is None  # another phase
    assert state.model_dump() == before
    control(state, "pause", reason="r")
    paused = state.model_dump()
    assert state.apply_deadline(1, new_due, new_due + timedelta(days=1)) is None
    assert state.model_dump() == paused


# --------------------------------------------------------------------------- verify budget


def test_verify_budget_and_request_come_from_the_typed_checks() -> None:
    state = new_state()
    to_phase(state, 2)
    checks = state.current.gate.verify
    assert isinstance(checks[0], CommandCheck) and isinstance(checks[1], FileExistsCheck)
    assert checks[1].name == "file_exists_2"
    assert state.verify_timeout() == timedelta(seconds=120 + VERIFY_SLACK_SECONDS)
    sub = CheckpointSubmission(phase=2, evidence=GOOD[2])
    state.ref = state.ref.model_copy(update={"base_commit": "abc123"})
    state.target = "/work/space"
    req = state.verify_request(sub, SESSION_ID)
    assert req.checks == checks and req.evidence == GOOD[2] and req.base_commit == "abc123"
    assert (req.workspace, req.target, req.session_id) == ("/work/space", "/work/space", SESSION_ID)


def test_verify_budget_sums_command_timeouts_with_their_default() -> None:
    gate = {
        "verify": [
            {"kind": "command", "argv": ["make", "test"]},  # default timeout: 300 s
            {"kind": "command", "argv": ["make", "lint"], "timeout_seconds": 45.5},
            {"kind": "git_changed"},
            {"kind": "glob_count", "pattern": "tests/*.py", "min": 1},
        ]
    }
    state = new_state([make_phase(0, gate)])
    assert state.verify_timeout() == timedelta(seconds=300 + 45.5 + VERIFY_SLACK_SECONDS)
    assert new_state().verify_timeout() == timedelta(seconds=VERIFY_SLACK_SECONDS)


# --------------------------------------------------------------------------- carry


def test_carry_round_trips() -> None:
    state = new_state(approver_keys=[Signer("lead").key])
    submit(state, 0, BAD[0], sid="a")
    submit(state, 0, GOOD[0], sid="b")
    submit(state, 1, GOOD[1], sid="c")
    revived = SessionState.model_validate(state.carry())
    assert revived == state
    assert revived.repeat("b") == state.repeat("b")
    assert revived.approval_deadline() == state.approval_deadline()
    assert revived.status_view() == state.status_view()


def test_carry_compacts_a_state_too_large_for_one_payload() -> None:
    big = "x" * 200_000
    phases = [
        PHASES[0].model_copy(update={"index": i, "label": str(i), "content": big})
        for i in range(10)
    ]
    state = new_state(phases)
    for i in range(9):
        submit(state, i, GOOD[0], phases=phases)
    for _ in range(3):
        submit(state, 9, {**BAD[0], "blob": "y" * 60_000}, phases=phases)
    data = state.carry()
    revived = SessionState.model_validate(data)
    assert len(revived.model_dump_json()) < CARRY_LIMIT_BYTES
    assert [i for i, p in sorted(revived.phases.past.items()) if p.content == big] == [6, 7, 8]
    assert all(not a.evidence for a in revived.attempts.current)
    assert revived.current.content == big and revived.current.index == 9
    assert revived.phase_view(0).name == "Phase 0"  # type: ignore[union-attr]
    assert revived.check_submission(CheckpointSubmission(phase=9, evidence=GOOD[0])) is None
