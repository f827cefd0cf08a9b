"""Approval rules of a :class:`~phasegate.domain.session.SessionState`.

Who may decide (allowlist, signed or unsigned policy), what a decision does,
and what an approval's deadline does when it passes: ``on_timeout: reject``
records a rejection by :data:`DEADLINE_ACTOR` that reopens the phase;
``escalate`` marks the session ``approval_overdue`` and says where to send the
webhook. These functions only read the state; ``SessionState`` applies their
verdicts through the owners of its fields (``ledger``). The workflow only
keeps the timer and calls the webhook activity.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from phasegate.domain.approvals import Deciders, Decision, refusal
from phasegate.domain.errors import ApprovalRefused, SessionError
from phasegate.domain.session.messages import ApprovalDecision
from phasegate.domain.session.plan import NotifyRequest

if TYPE_CHECKING:
    from phasegate.domain.session.state import SessionState

__all__ = [
    "DEADLINE_ACTOR",
    "ApprovalExpiry",
    "approval_binding",
    "check_decision",
    "expiry",
]

#: The actor of decisions and audit entries made because a deadline passed.
DEADLINE_ACTOR = "phasegate:deadline"


class ApprovalExpiry(BaseModel):
    """What an approval deadline did (see :func:`expiry` and ``SessionState.apply_deadline``)."""

    phase: int
    action: Literal["reject", "escalate"]
    waited: str = Field("", description="The gate's timeout, as written (for the audit).")
    notify: NotifyRequest | None = Field(
        None, description="escalate with a webhook configured: the call to make."
    )


def check_decision(
    state: SessionState, decision: ApprovalDecision, session_id: str = ""
) -> SessionError | None:
    """Why a decision must be refused (nothing to decide, wrong phase, not allowed,
    unsigned where signatures are required, bad signature or reused nonce), or None."""
    if not state.awaiting_approval:
        return ApprovalRefused(
            f"nothing awaits approval: session is {state.status} on phase {state.current.index}",
            hint="approvals are decided after the phase's checkpoint passes",
        )
    if decision.phase != state.current.index:
        return ApprovalRefused(
            f"phase {decision.phase} is not awaiting approval; phase {state.current.index} is",
            where="phase",
        )
    allowed = state.allowed_approvers()
    if state.nobody_may_approve():
        return ApprovalRefused(
            f"nobody may approve phase {state.current.index}: this session's approvers "
            f"({', '.join(state.options.approvers or []) or 'none'}) name none of the gate's",
            where="approver",
            hint="start a new session whose --approver names someone the gate allows",
        )
    return refusal(
        Deciders(
            keys=state.book.approver_keys,
            unsigned_ok=state.book.unsigned_approvals,
            names=allowed,
            scope="session",
            gate_noun="phase",
            how=f"phasegate approve {session_id or 'SESSION'} --as NAME",
        ),
        Decision(
            scope_id=session_id,
            gate=decision.phase,
            approver=decision.approver,
            decision=decision.decision,
            comment=decision.comment,
            nonce=decision.nonce,
            signature=decision.signature,
            binding=approval_binding(state),
        ),
        used_nonces=state.book.used_nonces,
    )


def approval_binding(state: SessionState) -> dict[str, str] | None:
    """What a version-2 signed decision binds besides the decision itself: the evidence
    awaiting approval and the session's first run (None for sessions from before)."""
    pending = state.phases.pending
    if not state.book.signs_evidence or not state.awaiting_approval or pending is None:
        return None
    return {
        "evidence_sha256": pending.evidence_sha256 or "",
        "first_run_id": state.run_chain[0] if state.run_chain else "",
    }


def expiry(
    state: SessionState, phase: int, due_at: datetime, session_id: str = ""
) -> ApprovalExpiry | None:
    """What the gate's ``on_timeout`` does now that the deadline ``due_at`` of ``phase``
    passed, or None when that deadline no longer applies: the approval was decided,
    the phase rolled back, the session is paused or finished, a later checkpoint set a
    new deadline, or it already escalated."""
    if not state.approval_pending(phase, due_at) or state.status == "approval_overdue":
        return None
    approval = state.current.gate.approval
    if approval.on_timeout == "reject":
        return ApprovalExpiry(phase=phase, action="reject", waited=approval.timeout or "")
    # The definition's address wins: whoever starts a session (the agent, at level 2)
    # may name one where the gate names none, never redirect the lead's notices.
    url = approval.notify_url or state.options.notify_url
    expiry = ApprovalExpiry(phase=phase, action="escalate", waited=approval.timeout or "")
    if not url:
        return expiry
    payload = {
        "event": "approval_overdue",
        "session_id": session_id,
        "workflow_type": state.workflow_type,
        "phase": phase,
        "phase_name": state.current.name,
        "approvers": state.allowed_approvers(),
        "due_at": due_at.isoformat(),
    }
    return expiry.model_copy(update={"notify": NotifyRequest(url=url, payload=payload)})
