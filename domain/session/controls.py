"""Controls of a :class:`~phasegate.domain.session.SessionState`: pause, resume,
retry_phase, rollback (only backwards) and abandon, each authorised, checked and
audited.

Who may control a session is decided like who may approve it. The keys that may
sign its controls are ``state.book.operator_keys``: the deployment's operators
(``PHASEGATE_OPERATOR_KEYS`` on the worker) plus the approver keys the
deployment or the definition names (never keys the starter named: whoever
started a session may be the agent it gates). Where there are any, every control
must be signed by one of them (``domain.signing.check_signed_control``): the
actor the audit records is the signing key's name, and each nonce is accepted
once (shared with approvals). Where there are none, a control that only names
its actor is accepted if the deployment allows it (``state.book.unsigned_controls``);
otherwise every control is refused, with the fix. No client may act as
phasegate itself (actors starting with ``phasegate:``, e.g. the approval
deadline's).

These functions only read the state: ``SessionState.apply_control`` carries a
checked control out through the owners of its fields (``ledger``). Nothing here
moves a session forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phasegate.domain.approvals import Deciders, Decision, refusal
from phasegate.domain.errors import PhaseSequenceViolation, SessionError, SessionNotActive
from phasegate.domain.limits import RESERVED_PREFIX
from phasegate.domain.session.messages import ControlRequest
from phasegate.domain.signing import check_signed_control

if TYPE_CHECKING:
    from phasegate.domain.session.state import SessionState

__all__ = ["RESERVED_ACTOR_PREFIX", "check_control"]

#: Actors phasegate itself records (``phasegate:deadline``); no client may claim one.
RESERVED_ACTOR_PREFIX = RESERVED_PREFIX


def check_control(
    state: SessionState, req: ControlRequest, session_id: str = ""
) -> SessionError | None:
    """Why a control request must be refused (not authorised, or not applicable now),
    or None. ``session_id`` is the workflow id the signature must name."""
    return _check_actor(state, req, session_id) or _check_action(state, req)


def _check_actor(state: SessionState, req: ControlRequest, session_id: str) -> SessionError | None:
    """Whether the request may act on the session at all: the one approval policy
    (``domain.approvals``) with the session's control keys and a control's signature."""
    keys = state.book.control_keys()
    signers = ", ".join(sorted({k.name for k in keys}))
    how = f"phasegate control {session_id or 'SESSION'} {req.action} --as NAME"
    return refusal(
        Deciders(
            keys=keys,
            unsigned_ok=state.book.unsigned_controls,
            scope="session",
            how=how,
            kind="control",
            signing_hint=f"controls of this session are signed by: {signers}; such a person "
            f"runs `{how}` with NAME's key in their key directory",
        ),
        Decision(
            scope_id=session_id, gate=state.current.index, approver=req.actor, decision=req.action
        ),
        used_nonces=state.book.used_nonces,
        signed=lambda: check_signed_control(
            keys=keys,
            session_id=session_id,
            action=req.action,
            actor=req.actor,
            reason=req.reason,
            to_phase=req.to_phase,
            nonce=req.nonce,
            signature=req.signature,
            used_nonces=frozenset(state.book.used_nonces),
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
        done = sorted(state.phases.past)
        if req.to_phase is None or req.to_phase not in state.phases.past:
            return PhaseSequenceViolation(
                f"rollback goes back to a completed phase; {req.to_phase} is not one",
                where="to_phase",
                hint=f"completed phases: {', '.join(map(str, done)) or 'none'}",
            )
    return None
