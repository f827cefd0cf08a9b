"""A four-phase session and the calls ``GatedSession`` makes around ``SessionState``,
with the activities (render, verify, webhook) replaced by their outcomes. Shared by
test_session_state.py and test_session_state_machine.py; no server."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any, Literal

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from phasegate.domain.gates import load_gate
from phasegate.domain.session.messages import (
    ApprovalDecision,
    CheckpointResult,
    CheckpointSubmission,
    ControlRequest,
    DefinitionRef,
    PhaseDefinition,
)
from phasegate.domain.session.state import ApprovalBook, PhaseLedger, SessionState
from phasegate.domain.signing import ApproverKey, canonical_message
from phasegate.domain.verify import VerifyResult

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SESSION_ID = "unit-session"
HOOK = "https://hooks.example/phasegate"

# Gate files as people write them (the same YAML load_gate reads from disk).
GATES = yaml.safe_load(
    f"""
- evidence_schema:
    summary: {{type: string, min_length: 3}}
    count: {{type: integer, min: 1}}
- evidence_schema: {{plan: {{type: string, required: true}}}}
  approval: {{required: true, approvers: [lead, ops], timeout: 2h, on_timeout: reject}}
- checkpoint: {{strict: false}}   # lenient: only verify and hard problems block
  evidence_schema:
    tests_run: integer
    tests_passed: integer
    notes: {{type: string, required: false, min_length: 10}}
  rules: [{{name: passed_le_run, expr: tests_passed <= tests_run}}]
  verify:
    - {{name: tests, kind: command, argv: [pytest, -q], timeout_seconds: 120}}
    - {{kind: file_exists, path: NOTES.md}}
  approval:
    {{required: true, approvers: [lead], timeout: 1h, on_timeout: escalate, notify_url: {HOOK}}}
- evidence_schema: {{done: boolean}}
"""
)
GOOD: dict[int, dict[str, Any]] = {
    0: {"summary": "three modules", "count": 3},
    1: {"plan": "the plan"},
    2: {"tests_run": 4, "tests_passed": 4},
    3: {"done": True},
}
BAD: dict[int, dict[str, Any]] = {
    0: {"summary": "x", "count": 0},
    1: {},
    2: {"tests_run": "four"},
    3: {"done": "yes"},
}


def make_phase(index: int, gate: dict[str, Any], **kw: Any) -> PhaseDefinition:
    """A rendered phase whose gate is parsed by load_gate."""
    return PhaseDefinition(
        index=index,
        label=str(index),
        name=f"Phase {index}",
        content=f"content of phase {index}",
        gate=load_gate(gate, source=f"tests/phases/{index}/gate-definition.yaml"),
        **kw,
    )


PHASES = [make_phase(i, gate) for i, gate in enumerate(GATES)]
PHASES[0].example_evidence = '{"summary": "three modules", "count": 3}'


def requires_approval(index: int) -> bool:
    return PHASES[index].requires_approval or PHASES[index].gate.approval.required


_BOOK_FIELDS = set(ApprovalBook.model_fields)


def new_state(phases: list[PhaseDefinition] = PHASES, **kw: Any) -> SessionState:
    """A session on ``phases``; keyword arguments naming the approval book's fields
    (``approver_keys``, ``unsigned_approvals``…) go to its book, the rest to the state."""
    n = len(phases)
    book = {k: kw.pop(k) for k in list(kw) if k in _BOOK_FIELDS}
    return SessionState(
        workflow_type="unit_v1",
        ref=DefinitionRef(workflow_type="unit_v1", total_phases=n, static_phase_count=n),
        phases=PhaseLedger(current=phases[0]),
        book=ApprovalBook(**book),
        started_at=NOW,
        updated_at=NOW,
        **kw,
    )


def verify_results(ok: bool) -> list[VerifyResult]:
    """What the verify activity reports for PHASES[2]'s checks."""
    tests = VerifyResult(
        name="tests",
        kind="command",
        passed=ok,
        message=f"`pytest -q` exited with {0 if ok else 1}",
        exit_code=0 if ok else 1,
        excerpt="4 passed" if ok else "1 failed, 3 passed",
    )
    notes = VerifyResult(name="file_exists_2", kind="file_exists", passed=True, message="ok")
    return [tests, notes]


def submit(
    state: SessionState,
    phase: int,
    evidence: dict[str, Any],
    *,
    sid: str | None = None,
    now: datetime = NOW,
    via: Literal["update", "signal"] = "update",
    verify_ok: bool = True,
    phases: list[PhaseDefinition] = PHASES,
) -> CheckpointResult:
    """What GatedSession._checkpoint does; a refusal is raised, as the validator would."""
    sub = CheckpointSubmission(phase=phase, evidence=evidence, submission_id=sid)
    if sid and sid in state.answers.by_submission:
        return state.repeat(sid)
    problem = state.check_submission(sub)
    if problem is not None:
        raise problem
    evaluation = state.evaluate(sub)
    verify = verify_results(verify_ok) if state.needs_verify(evaluation) else []
    result, advance = state.apply_submission(sub, now, via, evaluation, verify)
    following = phases[state.current.index + 1] if advance and not state.is_last_phase() else None
    return state.finish_submission(sub, result, following, now)


def decide(
    state: SessionState,
    approver: str,
    decision: Literal["approve", "reject"] = "approve",
    *,
    phase: int | None = None,
    comment: str = "",
    now: datetime = NOW,
    phases: list[PhaseDefinition] = PHASES,
    **signed: Any,
) -> bool:
    """What GatedSession.decide_approval does; returns whether the session advanced."""
    d = ApprovalDecision(
        phase=state.current.index if phase is None else phase,
        approver=approver,
        decision=decision,
        comment=comment,
        **signed,
    )
    problem = state.check_decision(d, SESSION_ID)
    if problem is not None:
        raise problem
    following = None
    if decision == "approve" and not state.is_last_phase():
        following = phases[state.current.index + 1]
    return state.apply_decision(d, following, now)


def control(state: SessionState, action: str, now: datetime = NOW, **kw: Any) -> None:
    """What GatedSession.control does."""
    req = ControlRequest(action=action, actor="ops", **kw)  # type: ignore[arg-type]
    problem = state.check_control(req)
    if problem is not None:
        raise problem
    state.apply_control(req, now)


def to_phase(state: SessionState, index: int) -> None:
    """Walk a fresh state to ``index`` with good evidence and lead's approvals."""
    while state.current.index < index:
        result = submit(state, state.current.index, GOOD[state.current.index])
        if result.awaiting_approval:
            assert decide(state, "lead")


class Signer:
    """An approver's Ed25519 key; signs decisions as ``phasegate approve`` does."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.private = Ed25519PrivateKey.generate()
        raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key = ApproverKey(name=name, public_key=base64.b64encode(raw).decode())

    def sign(self, phase: int, decision: str, nonce: str, comment: str = "") -> dict[str, str]:
        message = canonical_message(
            session_id=SESSION_ID,
            phase=phase,
            decision=decision,
            nonce=nonce,
            approver=self.name,
            comment=comment,
        )
        signature = base64.b64encode(self.private.sign(message)).decode()
        return {"nonce": nonce, "signature": signature}
