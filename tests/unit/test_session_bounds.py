"""What a long or hostile session can pile up stays bounded (issue 8, item 4), no server.

Each test rebuilds an attack the issue reproduced against the pure state: the
continue-as-new input, query answers and the final result stay under
Temporal's payload limit, and nothing recorded is lost without its digest.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from session_helpers import BAD, GOOD, NOW, PHASES, make_phase, new_state, submit

from phasegate.domain.session.bounds import (
    CARRY_LIMIT_BYTES,
    TASKS_PAGE,
    VIEW_EVIDENCE_BYTES,
    canonical,
    evidence_digest,
)
from phasegate.domain.session.messages import (
    MAX_TEXT_CHARS,
    ApprovalDecision,
    ControlRequest,
    PhaseArtifact,
    RenderedTask,
    SessionOptions,
    StartSession,
)
from phasegate.domain.session.state import SessionState

BIG = 256 * 1024  # within the default evidence cap


def _size(data: Any) -> int:
    return len(canonical(data.model_dump(mode="json") if hasattr(data, "model_dump") else data))


def _ten_phase_state() -> tuple[SessionState, list[dict[str, Any]]]:
    """A 10-phase session where every phase passed with ~256 KiB of evidence."""
    gate = {"evidence_schema": {"blob": {"type": "string"}}}
    phases = [make_phase(i, gate) for i in range(10)]
    state = new_state(phases, options=SessionOptions(max_evidence_bytes=BIG + 100))
    sent = []
    for i in range(10):
        evidence = {"blob": f"{i}" * (BIG - 20)}
        sent.append(evidence)
        result = submit(state, i, evidence, phases=phases, sid=f"s{i}")
        assert result.passed, result.problems
    assert state.status == "completed"
    return state, sent


def test_many_failed_attempts_with_ids_still_continue_as_new_under_the_limit():
    # The issue: ~1,160 failed attempts with submission ids pushed the input over 2 MB.
    state = new_state()
    noisy = {"summary": "x" * 5000, "count": 0}
    for n in range(1200):
        submit(state, 0, noisy, sid=f"attempt-{n:05d}-" + "i" * 100, now=NOW + timedelta(seconds=n))
    carried = state.carry()
    assert len(canonical(carried)) <= CARRY_LIMIT_BYTES
    revived = SessionState.model_validate(carried)
    assert revived.attempts.count == 1200 and revived.current.index == 0
    # The newest answers are still remembered: a repeat answers as the first time did.
    last = "attempt-01199-" + "i" * 100
    assert revived.repeat(last).attempt == 1200


def test_large_evidence_on_every_phase_keeps_queries_results_and_carry_bounded():
    # The issue: 256 KiB evidence on each of 10 phases broke the phase query and completion.
    state, sent = _ten_phase_state()
    summary = state.summary()
    assert _size(summary) < VIEW_EVIDENCE_BYTES + 64 * 1024
    kept = {k: a for k, a in summary.artifacts.items() if not a.evidence_elided}
    assert "9" in kept and kept["9"].evidence == sent[9]  # newest first
    for key, artifact in summary.artifacts.items():
        sha, size = evidence_digest(sent[int(key)])
        assert (artifact.evidence_sha256, artifact.evidence_bytes) == (sha, size)
        assert artifact.evidence == ({} if artifact.evidence_elided else sent[int(key)])
    view = state.phase_view(9)
    assert _size(view) < VIEW_EVIDENCE_BYTES + 64 * 1024
    # Each phase's whole evidence is one `artifact` query away while the state holds it.
    for i in range(10):
        artifact = state.artifact(i)
        assert isinstance(artifact, PhaseArtifact) and artifact.evidence == sent[i]
    carried = state.carry()
    assert len(canonical(carried)) <= CARRY_LIMIT_BYTES
    revived = SessionState.model_validate(carried)
    for i in range(10):
        artifact = revived.phases.artifacts[i]
        assert artifact.evidence_sha256 == evidence_digest(sent[i])[0]  # never without a digest
        assert artifact.evidence == sent[i] or artifact.evidence_elided


def test_a_phase_with_many_tasks_is_served_a_page_at_a_time():
    tasks = [
        RenderedTask(id=f"T{n:03d}", number=n, name=f"task {n}", content=f"do {n}")
        for n in range(1, 701)
    ]
    phases = [make_phase(0, {"evidence_schema": {"done": "boolean"}}, tasks=tasks)]
    state = new_state(phases)
    first = state.phase_view(0)
    assert len(first.tasks) == TASKS_PAGE and first.tasks_total == 700
    last = state.phase_view(0, tasks_offset=700 - 50)
    assert [t.number for t in last.tasks] == list(range(651, 701))
    assert state.task_view(0, "T700").content == "do 700"


def test_status_stays_small_whatever_the_audit_holds():
    state = new_state()
    reason = "r" * MAX_TEXT_CHARS
    for n in range(900):
        action = "pause" if n % 2 == 0 else "resume"
        req = ControlRequest(action=action, reason=reason, actor="ops")
        assert state.check_control(req) is None
        state.apply_control(req, NOW + timedelta(seconds=n))
    view = state.status_view()
    assert len(view.audit) == 100 and view.audit_total == 900
    assert _size(view) < 300 * 1024
    assert len(canonical(state.carry())) <= CARRY_LIMIT_BYTES
    assert state.audit[0].action == "pause"  # the first entries are kept when trimmed


@pytest.mark.parametrize(
    "build",
    [
        lambda: ControlRequest(action="abandon", reason="x" * 1_500_000),
        lambda: ControlRequest(action="pause", actor="a" * 10_000),
        lambda: ApprovalDecision(phase=1, approver="lead", decision="approve", comment="c" * 10**6),
        lambda: SessionOptions(approvers=["x"] * 10_000),
        lambda: SessionOptions(custom_notes="n" * 200_000),  # extra keys are bounded too
        lambda: SessionOptions(max_evidence_bytes=50 * 1024 * 1024),
        lambda: StartSession(workflow_type="w" * 10_000),
    ],
    ids=["control-reason", "actor", "comment", "approvers", "extra-option", "evidence-cap", "type"],
)
def test_oversized_inputs_are_refused_by_their_model(build):
    # A refused update input never reaches a handler, so nothing lands in history.
    with pytest.raises(ValidationError):
        build()


def test_repeat_of_a_compacted_answer_never_points_ahead():
    state = new_state()
    submit(state, 0, BAD[0], sid="bad")
    submit(state, 0, GOOD[0], sid="good")
    revived = SessionState.model_validate(state.carry())
    assert revived.repeat("good").passed and revived.repeat("bad").problems
    assert json.loads(PHASES[0].example_evidence or "{}") == GOOD[0]


def test_worst_case_session_still_carries_under_the_limit():
    # The largest rendered phase allowed, awaiting approval of the largest evidence allowed,
    # after many attempts, answers and controls: continue-as-new must still fit.
    from phasegate.domain.session.messages import MAX_EVIDENCE_BYTES_LIMIT

    gate = {
        "evidence_schema": {"blob": {"type": "string"}},
        "approval": {"required": True, "approvers": ["lead"]},
    }
    big_phase = make_phase(0, gate).model_copy(update={"content": "p" * (500 * 1024)})
    phases = [big_phase, make_phase(1, gate)]
    state = new_state(phases, options=SessionOptions(max_evidence_bytes=MAX_EVIDENCE_BYTES_LIMIT))
    for n in range(300):
        submit(state, 0, {"blob": 5}, sid=f"bad-{n}", phases=phases)
    evidence = {"blob": "e" * (MAX_EVIDENCE_BYTES_LIMIT - 20)}
    assert submit(state, 0, evidence, sid="good", phases=phases).awaiting_approval
    carried = state.carry()
    assert len(canonical(carried)) <= CARRY_LIMIT_BYTES
    revived = SessionState.model_validate(carried)
    assert revived.phases.pending is not None and revived.phases.pending.evidence == evidence


def test_a_flood_of_failing_submissions_never_grows_the_state():
    # Review finding: ~3,600 failing submissions on one phase pushed carry over 2 MB.
    state = new_state()
    noisy = {"summary": "x" * 2000, "count": 0}
    for n in range(4000):
        submit(state, 0, noisy, sid=f"flood-{n:05d}", now=NOW + timedelta(seconds=n))
    assert len(state.attempts.current) <= 200 and len(state.attempts.earlier) <= 500
    assert state.attempts.count == 4000 and state.attempts.current[-1].number == 4000
    assert len(canonical(state.carry())) <= CARRY_LIMIT_BYTES


def test_many_decisions_stay_bounded_in_status_and_carry():
    state = new_state()
    for n in range(3000):
        submit(state, 0, GOOD[0], sid=f"p0-{n}") if state.current.index == 0 else None
        assert submit(state, 1, GOOD[1]).awaiting_approval
        reject = ApprovalDecision(
            phase=1, approver="lead", decision="reject", comment="c" * 500, nonce=f"n{n:020d}"
        )
        assert state.check_decision(reject) is None
        state.apply_decision(reject, None, NOW + timedelta(seconds=n))
    view = state.status_view()
    assert len(view.approvals) == 100 and len(view.audit) == 100
    carried = state.carry()
    assert len(canonical(carried)) <= CARRY_LIMIT_BYTES
    revived = SessionState.model_validate(carried)
    assert revived.book.records[-1].comment == "c" * 500


@pytest.mark.parametrize(
    "actor", ["lead\x1b[2J\nfake line", "\u200bphasegate:deadline", "lead\u202eevil"]
)
def test_names_with_control_or_invisible_characters_are_refused(actor):
    with pytest.raises(ValidationError, match="control or invisible"):
        ControlRequest(action="pause", actor=actor)
    with pytest.raises(ValidationError, match="control or invisible"):
        ApprovalDecision(phase=1, approver=actor, decision="approve")


@pytest.mark.parametrize(
    "actor", [" phasegate:deadline", "PhaseGate:deadline", "phasegate\uff1adeadline"]
)
def test_lookalikes_of_phasegates_own_actor_are_refused(actor):
    state = new_state()
    problem = state.check_control(ControlRequest(action="pause", actor=actor))
    assert problem is not None and "reserved" in str(problem)
