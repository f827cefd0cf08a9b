"""One approval policy for every workflow: who may decide a gate, and whether a decision
sent to decide it is acceptable.

A gated session's phase approval and controls, an orchestration's step approval or
escalation, a signed replan request, and every workflow to come decide the same way:

- the workflow's state says *whether* a gate is open (nothing to decide, wrong phase
  or gate) — that part is its own;
- :func:`refusal` says whether *this decision* may decide it, by one rule: a named,
  non-reserved approver (:func:`~phasegate.domain.trust.reserved_actor`), on the
  allowlist if there is one, and — where the deciders have keys — signed by that
  approver's key over the scope, the gate, the decision, the comment, a fresh nonce
  and the binding (``domain.signing.canonical_message`` version 2). Where nobody has
  keys, name-only decisions are accepted only if the deployment allows them.

Every refusal is an :class:`~phasegate.domain.errors.ApprovalRefused` saying what was
wrong, where (the field) and what to do next. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from phasegate.domain.errors import ApprovalRefused
from phasegate.domain.signing import ApproverKey, check_signed_decision
from phasegate.domain.trust import reserved_actor

__all__ = ["Deciders", "Decision", "refusal"]


@dataclass(frozen=True)
class Deciders:
    """Who may decide a gate.

    Attributes:
        keys: Signed approvers; non-empty means every decision must be signed.
        unsigned_ok: Name-only decisions are accepted where ``keys`` is empty.
        names: The allowlist of approver names (empty: anyone the keys name, or, with
            no keys, anyone named).
        scope: What is decided, in messages: ``session`` or ``orchestration``.
        gate_noun: What a gate is called there: ``phase`` or ``gate``.
        how: The command that sends a valid decision (named in refusals).
        kind: ``approval`` (a decision on a gate) or ``control`` (pause, resume, ...).
        signing_hint: Who signs and how, named when a signature is refused.
    """

    keys: Sequence[ApproverKey] = ()
    unsigned_ok: bool = True
    names: Sequence[str] = ()
    scope: str = "session"
    gate_noun: str = "phase"
    how: str = ""
    kind: Literal["approval", "control"] = "approval"
    signing_hint: str = ""


@dataclass(frozen=True)
class Decision:
    """A decision as every workflow receives it (the message's fields, one shape).

    Attributes:
        scope_id: The session's or orchestration's workflow id (a signature binds it).
        gate: The phase or gate number decided.
        approver: Who the decision claims to be from.
        decision: ``approve`` or ``reject``.
        comment: Bound by the signature.
        nonce: The nonce the approver signed.
        signature: Base64 Ed25519 signature (None: unsigned).
        binding: What else the signature binds (the evidence decided, the first run).
    """

    scope_id: str
    gate: int
    approver: str
    decision: str
    comment: str = ""
    nonce: str | None = None
    signature: str | None = None
    binding: Mapping[str, str] | None = field(default=None)


def refusal(
    deciders: Deciders,
    decision: Decision,
    *,
    used_nonces: Collection[str],
    signed: Callable[[], str | None] | None = None,
) -> ApprovalRefused | None:
    """Why ``decision`` may not decide its gate under ``deciders``, or None.

    Checks, first failure reported: a name; not one of phasegate's own actors; on the
    allowlist; a way to decide at all (keys, or unsigned decisions allowed); and, with
    keys, a valid signature by the sender's key and a fresh nonce.

    Args:
        signed: Checks the signature of a message that is not an approval (a control
            signs ``canonical_control_message``); default: the approval's own check.
    """
    how = f" ({deciders.how})" if deciders.how else ""
    role = "actor" if deciders.kind == "control" else "approver"
    if not decision.approver.strip():
        return ApprovalRefused(
            f"{'a control' if deciders.kind == 'control' else 'an approval'} must name its {role}",
            where=role,
            hint=deciders.how or None,
        )
    if reason := reserved_actor(decision.approver):
        return ApprovalRefused(reason, where=role, hint=f"use your own name{how}")
    if deciders.names and decision.approver not in deciders.names:
        return ApprovalRefused(
            f"{decision.approver!r} may not approve {deciders.gate_noun} {decision.gate} of "
            f"this {deciders.scope}",
            where=role,
            hint=f"allowed approvers: {', '.join(deciders.names)}",
        )
    if not deciders.keys:
        return None if deciders.unsigned_ok else _unsigned_refused(deciders)
    if signed is not None:
        reason = signed()
    else:
        reason = check_signed_decision(
            keys=list(deciders.keys),
            session_id=decision.scope_id,
            phase=decision.gate,
            decision=decision.decision,
            approver=decision.approver,
            comment=decision.comment,
            nonce=decision.nonce,
            signature=decision.signature,
            used_nonces=frozenset(used_nonces),
            binding=decision.binding,
        )
    if reason is None:
        return None
    reason = reason.replace("for session ", f"for {deciders.scope} ")
    return ApprovalRefused(
        reason.replace("this session requires", f"this {deciders.scope} requires"),
        where="signature",
        hint=deciders.signing_hint or (f"sign it{how}" if deciders.how else None),
    )


def _unsigned_refused(deciders: Deciders) -> ApprovalRefused:
    """Nobody holds a key and the deployment refuses name-only messages of this kind."""
    if deciders.kind == "control":
        return ApprovalRefused(
            "this deployment accepts only signed controls, and neither it nor this session "
            "names a key that may sign them, so no control can be accepted",
            where="operator_keys",
            hint="name operators on the worker: PHASEGATE_OPERATOR_KEYS="
            '"$(phasegate keys export NAME)" phasegate worker (create the key with '
            "`phasegate keys new NAME`), then `phasegate control SESSION ACTION --as NAME`; "
            "or set PHASEGATE_ALLOW_UNSIGNED_CONTROLS=1 where agents cannot reach Temporal",
        )
    return ApprovalRefused(
        f"this deployment accepts only signed approvals and this {deciders.scope} names "
        "no approver keys, so no decision can be accepted",
        where="approver_keys",
        hint="name signed approvers on the worker (`phasegate dev --approver-key NAME`, "
        "PHASEGATE_APPROVER_KEYS, or approver_keys in metadata.json), or set "
        "PHASEGATE_ALLOW_UNSIGNED_APPROVALS=1 where agents cannot reach Temporal",
    )
