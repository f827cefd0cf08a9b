"""Controls of a :class:`~phasegate.domain.session.SessionState`: pause, resume,
retry_phase, rollback (only backwards) and abandon, each checked and audited.

Nothing here moves a session forward; ``SessionState`` delegates here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from phasegate.domain.errors import PhaseSequenceViolation, SessionError, SessionNotActive
from phasegate.domain.messages import AuditEntry, ControlRequest

if TYPE_CHECKING:
    from phasegate.domain.session import SessionState

__all__ = ["apply_control", "check_control"]


def check_control(state: SessionState, req: ControlRequest) -> SessionError | None:
    """Why a control request must be refused, or None."""
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
        state.log_attempts()
        state.attempt_count = 0
        state.feedback = ""
    elif req.action == "rollback":
        assert req.to_phase is not None
        _rollback(state, req.to_phase)
    state.audit.append(
        AuditEntry(at=now, action=req.action, actor=req.actor, phase=phase, detail=req.reason)
    )
    state.updated_at = now


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
