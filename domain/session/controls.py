"""Controls of a :class:`~phasegate.domain.session.SessionState`: pause, resume,
retry_phase, rollback (only backwards) and abandon, each authorised, checked and
audited.

Who may control a session is decided like who may approve it. The keys that may
sign its controls are ``state.operator_keys``: the deployment's operators
(``PHASEGATE_OPERATOR_KEYS`` on the worker) plus the approver keys the
deployment or the definition names (never keys the starter named: whoever
started a session may be the agent it gates). Where there are any, every control
must be signed by one of them (``domain.signing.check_signed_control``): the
actor the audit records is the signing key's name, and each nonce is accepted
once (shared with approvals). Where there are none, a control that only names
its actor is accepted if the deployment allows it (``state.unsigned_controls``);
otherwise every control is refused, with the fix. No client may act as
phasegate itself (actors starting with ``phasegate:``, e.g. the approval
deadline's).

Nothing here moves a session forward; ``SessionState`` delegates here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from phasegate.domain.approvals import Deciders, Decision, refusal
from phasegate.domain.errors import PhaseSequenceViolation, SessionError, SessionNotActive
from phasegate.domain.limits import RESERVED_PREFIX
from phasegate.domain.session.messages import AuditEntry, ControlRequest
from phasegate.domain.signing import ApproverKey, check_signed_control

if TYPE_CHECKING:
    from phasegate.domain.session.state import SessionState

__all__ = ["RESERVED_ACTOR_PREFIX", "apply_control", "check_control", "control_keys"]

#: Actors phasegate itself records (``phasegate:deadline``); no client may claim one.
RESERVED_ACTOR_PREFIX = RESERVED_PREFIX


def control_keys(state: SessionState) -> list[ApproverKey]:
    """The keys that may sign controls of the session (operators and trusted approvers)."""
    return list(dict.fromkeys(state.operator_keys))


def check_control(
    state: SessionState, req: ControlRequest, session_id: str = ""
) -> SessionError | None:
    """Why a control request must be refused (not authorised, or not applicable now),
    or None. ``session_id`` is the workflow id the signature must name."""
    return _check_actor(state, req, session_id) or _check_action(state, req)


def _check_actor(state: SessionState, req: ControlRequest, session_id: str) -> SessionError | None:
    """Whether the request may act on the session at all: the one approval policy
    (``domain.approvals``) with the session's control keys and a control's signature."""
    keys = control_keys(state)
    signers = ", ".join(sorted({k.name for k in keys}))
    how = f"phasegate control {session_id or 'SESSION'} {req.action} --as NAME"
    return refusal(
        Deciders(
            keys=keys,
            unsigned_ok=state.unsigned_controls,
            scope="session",
            how=how,
            kind="control",
            signing_hint=f"controls of this session are signed by: {signers}; such a person "
            f"runs `{how}` with NAME's key in their key directory",
        ),
        Decision(
            scope_id=session_id, gate=state.current.index, approver=req.actor, decision=req.action
        ),
        used_nonces=state.used_nonces,
        signed=lambda: check_signed_control(
            keys=keys,
            session_id=session_id,
            action=req.action,
            actor=req.actor,
            reason=req.reason,
            to_phase=req.to_phase,
            nonce=req.nonce,
            signature=req.signature,
            used_nonces=frozenset(state.used_nonces),
        ),
    )


def _check_action(state: SessionState, req: ControlRequest) -> SessionError | None:
    """Whether the action applies to the session as it is now."""
    if state.finished:
        return SessionNotActive(f"session is {state.status}; controls no longer apply")
    if req.action == "pause" and state.status == "paused":
        return SessionNotActive("session is already paused")
    if req.action == "resume" and state.status != "paused":
        return SessionNotActive("session is not paused", hint="only a paused session resumes")
    if req.action == "abandon" and not req.reason.strip():
        return SessionError("abandon needs a reason", where="reason")
    if req.action == "rollback":
        done = sorted(state.past)
        if req.to_phase is None or req.to_phase not in state.past:
            return PhaseSequenceViolation(
                f"rollback goes back to a completed phase; {req.to_phase} is not one",
                where="to_phase",
                hint=f"completed phases: {', '.join(map(str, done)) or 'none'}",
            )
    return None


def apply_control(state: SessionState, req: ControlRequest, now: datetime) -> None:
    """Carry out a checked control request and audit it."""
    phase = state.current.index
    if req.action == "pause":
        state.paused_from, state.status = state.status, "paused"
    elif req.action == "resume":
        state.status, state.paused_from = state.paused_from or "active", None
    elif req.action == "abandon":
        state.status = "abandoned"
    elif req.action == "retry_phase":
        _retry_phase(state)
    elif req.action == "rollback":
        assert req.to_phase is not None
        _rollback(state, req.to_phase)
    if req.nonce:
        state.used_nonces.append(req.nonce)  # a signed control is accepted once
    state.audit.append(
        AuditEntry(at=now, action=req.action, actor=req.actor, phase=phase, detail=req.reason)
    )
    state.updated_at = now


def _retry_phase(state: SessionState) -> None:
    """Reopen the current phase for new evidence: attempts start again from 1, and a
    passed checkpoint awaiting approval is withdrawn (its artifact kept as superseded),
    so the session takes a new checkpoint instead of waiting for a decision."""
    state.log_attempts()
    state.attempt_count = 0
    state.feedback = ""
    if state.pending is not None:
        state.superseded.append(state.pending.model_copy(update={"superseded": True}))
        state.pending = None
        state.approval_due_at = None
    if state.awaiting_approval:
        state.status = "active"
    elif state.status == "paused" and state.paused_from in (
        "awaiting_approval",
        "approval_overdue",
    ):
        state.paused_from = "active"


def _rollback(state: SessionState, to_phase: int) -> None:
    """Reopen completed phase ``to_phase``; later artifacts are kept as superseded."""
    undone = [k for k in state.artifacts if k >= to_phase]
    for k in sorted(undone):
        state.superseded.append(state.artifacts.pop(k).model_copy(update={"superseded": True}))
    if state.pending is not None:
        state.superseded.append(state.pending.model_copy(update={"superseded": True}))
        state.pending = None
    state.current = state.past[to_phase]
    for k in [k for k in state.past if k >= to_phase]:
        del state.past[k]
    state.completed = [c for c in state.completed if c.phase < to_phase]
    state.log_attempts()
    state.attempt_count = 0
    # Remembered answers about undone phases would now be wrong: forget them.
    state.processed = {k: r for k, r in state.processed.items() if r.current_phase < to_phase}
    state.approval_due_at = None
    state.paused_from = None
    state.status = "active"
