"""How a gate's verdict on the evidence and the workspace checks of the verify activity
make one verdict on a checkpoint: a failed check is a problem and blocks, even under
``strict: false``; checks that could not run at all are one failed check."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from phasegate.domain.errors import (
    PayloadTooLarge,
    PhaseSequenceViolation,
    SessionError,
    SessionNotActive,
)
from phasegate.domain.gates import GateEvaluation, Problem
from phasegate.domain.session.messages import CheckpointSubmission
from phasegate.domain.verify import VerifyResult

if TYPE_CHECKING:
    from phasegate.domain.session.state import SessionState

__all__ = ["evidence_size", "submission_refusal", "verify_unavailable", "with_verify"]


def verify_unavailable(cause: str) -> list[VerifyResult]:
    """The verdict when the checks could not run at all: one failed check (it blocks)."""
    return [
        VerifyResult(
            name="verify",
            kind="activity",
            passed=False,
            message=f"the workspace checks could not run: {cause}",
        )
    ]


def with_verify(evaluation: GateEvaluation, verify: list[VerifyResult]) -> GateEvaluation:
    """The gate's verdict with the failed workspace checks added as problems (they block)."""
    failed = [
        Problem(
            field=f"verify:{r.name}",
            rule=f"verify:{r.kind}",
            message=r.message,
            expected="check passes",
            got=_tail(r.excerpt),
        )
        for r in verify
        if not r.passed
    ]
    if not failed:
        return evaluation
    return evaluation.model_copy(
        update={"passed": False, "problems": [*evaluation.problems, *failed]}
    )


def _tail(text: str, limit: int = 160) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def evidence_size(evidence: dict[str, Any]) -> int:
    """Bytes of the evidence as compact JSON (what the cap is measured on)."""
    return len(json.dumps(evidence, separators=(",", ":"), default=str).encode())


def submission_refusal(state: SessionState, sub: CheckpointSubmission) -> SessionError | None:
    """Why a submission must be refused before it touches history, or None."""
    if sub.submission_id and sub.submission_id in state.answers:
        return None  # a repeat: answered with the original result
    if state.status == "paused":
        return SessionNotActive(
            f"session is paused; checkpoints are refused until it is resumed "
            f"(phase {state.current.index})",
            hint="ask a person to resume it: phasegate control SESSION resume",
        )
    if state.finished:
        return SessionNotActive(
            f"session is {state.status}; it takes no more checkpoints",
            hint="start a new session",
        )
    if state.awaiting_approval:
        who = ", ".join(state.allowed_approvers()) or "an approver"
        return SessionNotActive(
            f"phase {state.current.index} passed its checkpoint and awaits approval by {who}",
            hint="wait for the decision; a rejection reopens the phase with feedback",
        )
    if sub.phase != state.current.index:
        done = sub.phase in state.phases.past
        return PhaseSequenceViolation(
            f"phase {sub.phase} is {'already completed' if done else 'not reached yet'}; "
            f"the session is on phase {state.current.index} ({state.current.name})",
            where="phase",
            hint=f"submit evidence for phase {state.current.index}",
        )
    size = evidence_size(sub.evidence)
    if size > state.options.max_evidence_bytes:
        return PayloadTooLarge(
            f"evidence is {size} bytes; the limit is {state.options.max_evidence_bytes}",
            where="evidence",
            hint="submit paths or summaries instead of whole files",
        )
    return None
