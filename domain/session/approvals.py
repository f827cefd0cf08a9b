"""Approval rules of a :class:`~phasegate.domain.session.SessionState`.

Who may decide (allowlist, signed or unsigned policy), what a decision does,
and what happens when an approval's deadline passes: ``on_timeout: reject``
records a rejection by :data:`DEADLINE_ACTOR` that reopens the phase;
``escalate`` marks the session ``approval_overdue``, audits it and says where
to send the webhook. The workflow only keeps the timer and calls the webhook
activity; ``SessionState`` delegates here. Pure: time comes in as an argument.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from phasegate.domain.approvals import Deciders, Decision, refusal
from phasegate.domain.errors import ApprovalRefused, SessionError
from phasegate.domain.session.messages import (
    ApprovalDecision,
    ApprovalRecord,
    AuditEntry,
    NotifyRequest,
)

if TYPE_CHECKING:
    from phasegate.domain.session.state import SessionState

__all__ = [
    "DEADLINE_ACTOR",
    "ApprovalExpiry",
    "approval_binding",
    "check_decision",
    "expire_approval",
    "record_decision",
    "record_notification",
]

#: The actor of decisions and audit entries made because a deadline passed.
DEADLINE_ACTOR = "phasegate:deadline"


class ApprovalExpiry(BaseModel):
    """What an approval deadline did (see :func:`expire_approval`)."""

    phase: int
    action: Literal["reject", "escalate"]
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
            keys=state.approver_keys,
            unsigned_ok=state.unsigned_approvals,
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
        used_nonces=state.used_nonces,
    )


def approval_binding(state: SessionState) -> dict[str, str] | None:
    """What a version-2 signed decision binds besides the decision itself: the evidence
    awaiting approval and the session's first run (None for sessions from before)."""
    if not state.signs_evidence or not state.awaiting_approval or state.pending is None:
        return None
    return {
        "evidence_sha256": state.pending.evidence_sha256 or "",
        "first_run_id": state.run_chain[0] if state.run_chain else "",
    }


def record_decision(state: SessionState, decision: ApprovalDecision, now: datetime) -> bool:
    """Record a checked decision. Returns True if the phase should now advance.

    A rejection drops the pending artifact and reopens the phase with the
    comment as feedback.
    """
    state.approvals.append(
        ApprovalRecord(
            phase=decision.phase,
            approver=decision.approver,
            decision=decision.decision,
            comment=decision.comment,
            at=now,
        )
    )
    state.updated_at = now
    state.approval_due_at = None
    if decision.nonce:
        state.used_nonces.append(decision.nonce)
    state.audit.append(
        AuditEntry(
            at=now,
            action=decision.decision,
            actor=decision.approver,
            phase=decision.phase,
            detail=decision.comment,
        )
    )
    if decision.decision == "approve":
        assert state.pending is not None
        state.pending.approved_by = decision.approver
        return True
    state.pending = None
    state.status = "active"
    state.feedback = decision.comment or f"rejected by {decision.approver}"
    return False


def expire_approval(
    state: SessionState, phase: int, due_at: datetime, now: datetime, session_id: str = ""
) -> ApprovalExpiry | None:
    """Apply the gate's ``on_timeout`` once the deadline ``due_at`` of ``phase`` passed.

    Returns None (and changes nothing) when that deadline no longer applies:
    the approval was decided, the phase rolled back, the session is paused or
    finished, a later checkpoint set a new deadline, or it already escalated.
    """
    if not state.approval_pending(phase, due_at) or state.status == "approval_overdue":
        return None
    approval = state.current.gate.approval
    if approval.on_timeout == "reject":
        rejection = ApprovalDecision(
            phase=phase,
            approver=DEADLINE_ACTOR,
            decision="reject",
            comment=f"no decision within {approval.timeout}; the phase is reopened",
        )
        record_decision(state, rejection, now)
        return ApprovalExpiry(phase=phase, action="reject")
    state.status = "approval_overdue"
    state.updated_at = now
    state.audit.append(
        AuditEntry(
            at=now,
            action="escalate",
            actor=DEADLINE_ACTOR,
            phase=phase,
            detail=f"no decision within {approval.timeout}",
        )
    )
    # The definition's address wins: whoever starts a session (the agent, at level 2)
    # may name one where the gate names none, never redirect the lead's notices.
    url = approval.notify_url or state.options.notify_url
    if not url:
        return ApprovalExpiry(phase=phase, action="escalate")
    payload = {
        "event": "approval_overdue",
        "session_id": session_id,
        "workflow_type": state.workflow_type,
        "phase": phase,
        "phase_name": state.current.name,
        "approvers": state.allowed_approvers(),
        "due_at": due_at.isoformat(),
    }
    return ApprovalExpiry(
        phase=phase, action="escalate", notify=NotifyRequest(url=url, payload=payload)
    )


def record_notification(
    state: SessionState, phase: int, url: str, now: datetime, error: str | None = None
) -> None:
    """Audit the webhook call an escalation asked for: delivered, or why not."""
    detail = f"notified {url}" if error is None else f"notify {url} failed: {error}"
    state.audit.append(
        AuditEntry(at=now, action="notify", actor=DEADLINE_ACTOR, phase=phase, detail=detail)
    )
