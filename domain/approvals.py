"""One approval policy for every workflow: who may decide a gate, and whether a decision
sent to decide it is acceptable.

A gated session's phase approval, an orchestration's step approval or escalation, a
signed replan request, and every workflow to come decide their gates the same way:

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

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

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
    """

    keys: Sequence[ApproverKey] = ()
    unsigned_ok: bool = True
    names: Sequence[str] = ()
    scope: str = "session"
    gate_noun: str = "phase"
    how: str = ""


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
    deciders: Deciders, decision: Decision, *, used_nonces: Collection[str]
) -> ApprovalRefused | None:
    """Why ``decision`` may not decide its gate under ``deciders``, or None.

    Checks, first failure reported: a name; not one of phasegate's own actors; on the
    allowlist; a way to decide at all (keys, or unsigned decisions allowed); and, with
    keys, a valid signature by the approver's key and a fresh nonce.
    """
    how = f" ({deciders.how})" if deciders.how else ""
    if not decision.approver.strip():
        return ApprovalRefused(
            "an approval must name its approver", where="approver", hint=deciders.how or None
        )
    if reason := reserved_actor(decision.approver):
        return ApprovalRefused(reason, where="approver", hint=f"decide under your own name{how}")
    if deciders.names and decision.approver not in deciders.names:
        return ApprovalRefused(
            f"{decision.approver!r} may not approve {deciders.gate_noun} {decision.gate} of "
            f"this {deciders.scope}",
            where="approver",
            hint=f"allowed approvers: {', '.join(deciders.names)}",
        )
    if not deciders.keys:
        if deciders.unsigned_ok:
            return None
        return ApprovalRefused(
            f"this deployment accepts only signed approvals and this {deciders.scope} names "
            "no approver keys, so no decision can be accepted",
            where="approver_keys",
            hint="name signed approvers on the worker (`phasegate dev --approver-key NAME`, "
            "PHASEGATE_APPROVER_KEYS, or approver_keys in metadata.json), or set "
            "PHASEGATE_ALLOW_UNSIGNED_APPROVALS=1 where agents cannot reach Temporal",
        )
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
        hint=f"sign it{how}" if deciders.how else None,
    )
