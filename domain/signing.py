"""Signed approvals and controls: the canonical messages people sign, and their checks.

A coding agent can call ``decide_approval`` or ``control`` as easily as a person
can, so a session may require every decision and every control (pause, resume,
retry_phase, rollback, abandon) to carry an Ed25519 signature made with a
person's private key (kept by ``client.keys``, outside the agent's reach). The
workflow holds only public keys (:class:`ApproverKey`) and checks each message
with :func:`check_signed_decision` or :func:`check_signed_control` in the update
validator, so a refused message never reaches history.

The signed bytes (:func:`canonical_message`) are::

    b"phasegate-approval-v1\\n" + JSON

where JSON is the UTF-8 encoding of an object with exactly the keys
``approver``, ``comment_sha256`` (hex SHA-256 of the UTF-8 comment), ``decision``
(``"approve"`` or ``"reject"``), ``nonce``, ``phase`` (integer) and
``session_id``, keys sorted, no whitespace, non-ASCII characters written as
themselves. For these value types that is the RFC 8785 (JCS) form, so a client
in any language can reproduce it. Keys and signatures travel as standard base64
without newlines. Sessions started since approvals bind their evidence require
version 2: ``b"phasegate-approval-v2\\n"`` + the same JSON with two more keys,
``evidence_sha256`` (of the evidence awaiting approval) and ``first_run_id`` (the
session's first run), both as ``status`` shows them in ``approval_binding``.

A control (:func:`canonical_control_message`) signs::

    b"phasegate-control-v1\\n" + JSON

with exactly the keys ``action`` (``pause``, ``resume``, ``retry_phase``,
``rollback`` or ``abandon``), ``actor`` (the signing key's name),
``nonce``, ``reason_sha256`` (hex SHA-256 of the UTF-8 reason), ``session_id``
and ``to_phase`` (the rollback target as an integer, ``null`` for other
actions), encoded the same way. The distinct prefix keeps a signed approval
from being replayed as a control and the reverse.

This module is imported by workflow code: it does no I/O and reads no clock,
environment or randomness. Ed25519 verification is deterministic. Import it
under ``workflow.unsafe.imports_passed_through()``: importing it primes
cryptography's native code so a failed verification inside the workflow sandbox
needs no late import (without that, a forged signature aborted the worker).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "CONTROL_ACTIONS",
    "CONTROL_PREFIX",
    "DECISIONS",
    "MESSAGE_PREFIX",
    "MESSAGE_PREFIX_V2",
    "NONCE_PATTERN",
    "UNSIGNED_REASON",
    "ApproverKey",
    "canonical_control_message",
    "canonical_message",
    "check_signed_control",
    "check_signed_decision",
    "decode_public_key",
    "fingerprint",
    "unsigned_control_reason",
    "verify_signature",
]

MESSAGE_PREFIX: Final = b"phasegate-approval-v1\n"
MESSAGE_PREFIX_V2: Final = b"phasegate-approval-v2\n"  # binds evidence and first run too
CONTROL_PREFIX: Final = b"phasegate-control-v1\n"
DECISIONS: Final = ("approve", "reject")
CONTROL_ACTIONS: Final = ("pause", "resume", "retry_phase", "rollback", "abandon")
NONCE_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{16,64}")

_PUBLIC_KEY_BYTES = 32
_SIGNATURE_BYTES = 64
# Longest base64 text worth decoding; anything longer cannot be a key or signature.
_MAX_B64_CHARS = 128

UNSIGNED_REASON: Final = (
    "decision is not signed; this session requires signed approvals "
    "(phasegate approve signs with your key: phasegate keys new NAME)"
)


def _b64decode_strict(text: str) -> bytes | None:
    """Decode standard base64 strictly: no whitespace, no URL-safe alphabet, padded.

    Returns ``None`` for anything that is not exactly that.
    """
    if not isinstance(text, str) or len(text) > _MAX_B64_CHARS:
        return None
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    # Refuse non-canonical spellings (stray padding bits) so one key has one text.
    if base64.b64encode(raw).decode("ascii") != text:
        return None
    return raw


def decode_public_key(public_key: str) -> bytes:
    """Decode and check an approver's public key.

    Args:
        public_key: Standard base64 (no newlines) of the 32-byte raw Ed25519 key.

    Returns:
        The 32 raw key bytes.

    Raises:
        ValueError: If the text is not canonical base64 of exactly 32 bytes.
    """
    raw = _b64decode_strict(public_key)
    if raw is None:
        raise ValueError(
            "public_key must be standard base64 (no newlines or spaces) of a raw Ed25519 "
            "public key, e.g. the contents of ~/.config/phasegate/keys/NAME.pub"
        )
    if len(raw) != _PUBLIC_KEY_BYTES:
        raise ValueError(
            f"public_key must decode to {_PUBLIC_KEY_BYTES} bytes (a raw Ed25519 public key), "
            f"got {len(raw)} bytes"
        )
    return raw


class ApproverKey(BaseModel):
    """An approver's name and Ed25519 public key, as a session stores it.

    The name is the ``approver`` a signed decision is made by; the public key is
    standard base64 (no newlines) of the 32-byte raw key. Invalid keys are
    rejected on construction.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=128, description="The approver's name.")
    public_key: str = Field(
        description="Standard base64 (no newlines) of the 32-byte raw Ed25519 public key."
    )

    @field_validator("public_key")
    @classmethod
    def _check_public_key(cls, value: str) -> str:
        decode_public_key(value)
        return value


def _check_decision(decision: str) -> None:
    if decision not in DECISIONS:
        raise ValueError(f"decision must be 'approve' or 'reject', got {decision!r}")


def canonical_message(
    *,
    session_id: str,
    phase: int,
    decision: str,
    nonce: str,
    approver: str,
    comment: str = "",
    binding: Mapping[str, str] | None = None,
) -> bytes:
    """The exact bytes an approver signs for one decision (see the module docstring).

    With ``binding`` (``{"evidence_sha256", "first_run_id"}``, what ``status`` shows as
    ``approval_binding``) the message is version 2 (:data:`MESSAGE_PREFIX_V2`): it also
    binds the evidence being approved and the session's first run, so a captured decision
    cannot approve other evidence after a reset, nor a session restarted under its id.

    Args:
        session_id: The session's workflow id.
        phase: The phase number being decided.
        decision: ``"approve"`` or ``"reject"``.
        nonce: A fresh random token; a session accepts each nonce once.
        approver: The approver's name (the name of their key).
        comment: The decision's comment; only its SHA-256 is embedded, which still
            binds it.

    Returns:
        ``MESSAGE_PREFIX`` followed by the canonical JSON, UTF-8 encoded.

    Raises:
        ValueError: If ``decision`` is not ``"approve"``/``"reject"``, or a text field
            cannot be encoded as UTF-8 (lone surrogates).
        TypeError: If ``phase`` is not an integer or a text field is not a string.
    """
    _check_decision(decision)
    if isinstance(phase, bool) or not isinstance(phase, int):
        raise TypeError(f"phase must be an integer, got {phase!r}")
    for field, value in (
        ("session_id", session_id),
        ("nonce", nonce),
        ("approver", approver),
        ("comment", comment),
    ):
        if not isinstance(value, str):
            raise TypeError(f"{field} must be a string, got {type(value).__name__}")
    fields: dict[str, object] = {
        "approver": approver,
        "comment_sha256": hashlib.sha256(comment.encode("utf-8")).hexdigest(),
        "decision": decision,
        "nonce": nonce,
        "phase": phase,
        "session_id": session_id,
    }
    if binding is not None:
        fields["evidence_sha256"] = str(binding.get("evidence_sha256", ""))
        fields["first_run_id"] = str(binding.get("first_run_id", ""))
    try:
        body = _canonical_json(fields)
    except UnicodeEncodeError as err:
        raise ValueError(f"approval fields must be valid Unicode text: {err}") from None
    return (MESSAGE_PREFIX if binding is None else MESSAGE_PREFIX_V2) + body


def _canonical_json(fields: dict[str, object]) -> bytes:
    """Sorted keys, no whitespace, non-ASCII as itself, UTF-8: JCS for these value types."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def canonical_control_message(
    *,
    session_id: str,
    action: str,
    nonce: str,
    actor: str,
    reason: str = "",
    to_phase: int | None = None,
) -> bytes:
    """The exact bytes a person signs for one control (see the module docstring).

    Args:
        session_id: The session's workflow id.
        action: ``pause``, ``resume``, ``retry_phase``, ``rollback`` or ``abandon``.
        nonce: A fresh random token; a session accepts each nonce once.
        actor: The signing key's name, which the audit records as the actor.
        reason: The control's reason; only its SHA-256 is embedded, which still binds it.
        to_phase: The rollback target; ``None`` for the other actions.

    Returns:
        ``CONTROL_PREFIX`` followed by the canonical JSON, UTF-8 encoded.

    Raises:
        ValueError: If ``action`` is not a control, or a text field cannot be encoded
            as UTF-8 (lone surrogates).
        TypeError: If ``to_phase`` is neither ``None`` nor an integer, or a text field
            is not a string.
    """
    if action not in CONTROL_ACTIONS:
        raise ValueError(f"action must be one of {', '.join(CONTROL_ACTIONS)}, got {action!r}")
    if to_phase is not None and (isinstance(to_phase, bool) or not isinstance(to_phase, int)):
        raise TypeError(f"to_phase must be an integer or None, got {to_phase!r}")
    for field, value in (
        ("session_id", session_id),
        ("nonce", nonce),
        ("actor", actor),
        ("reason", reason),
    ):
        if not isinstance(value, str):
            raise TypeError(f"{field} must be a string, got {type(value).__name__}")
    try:
        body = _canonical_json(
            {
                "action": action,
                "actor": actor,
                "nonce": nonce,
                "reason_sha256": hashlib.sha256(reason.encode("utf-8")).hexdigest(),
                "session_id": session_id,
                "to_phase": to_phase,
            }
        )
    except UnicodeEncodeError as err:
        raise ValueError(f"control fields must be valid Unicode text: {err}") from None
    return CONTROL_PREFIX + body


def _prime_native_exception() -> None:
    """Make cryptography's Rust code resolve ``InvalidSignature`` now, on import.

    The Rust extension looks the exception class up through Python's import
    system the first time a verification fails, and caches it process-wide. Inside
    Temporal's workflow sandbox that late import is refused, the extension panics
    across the FFI boundary and the whole worker process aborts. Failing one
    verification here, while this module is imported outside the sandbox (passed
    through), fills the cache first. Deterministic: a fixed key and message.
    """
    key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(_PRIME_PUBLIC_KEY_HEX))
    try:
        key.verify(bytes(_SIGNATURE_BYTES), MESSAGE_PREFIX)
    except InvalidSignature:
        pass


# Public key of the Ed25519 seed 00 01 .. 1f (any valid curve point would do).
_PRIME_PUBLIC_KEY_HEX = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
_prime_native_exception()


def verify_signature(*, key: ApproverKey, message: bytes, signature: str) -> bool:
    """Whether ``signature`` is ``key``'s Ed25519 signature of ``message``.

    Never raises: a malformed key, message or signature is simply ``False``.

    Args:
        key: The approver's public key.
        message: The signed bytes, normally from :func:`canonical_message`.
        signature: Standard base64 of the 64-byte signature.

    Returns:
        ``True`` only for a valid signature.
    """
    try:
        if not isinstance(message, bytes):
            return False
        raw_signature = _b64decode_strict(signature)
        if raw_signature is None or len(raw_signature) != _SIGNATURE_BYTES:
            return False
        public = Ed25519PublicKey.from_public_bytes(decode_public_key(key.public_key))
        public.verify(raw_signature, message)
    except InvalidSignature:
        return False
    except Exception:  # noqa: BLE001 - a validator must never raise, whatever it is handed
        return False
    return True


def fingerprint(public_key: str) -> str:
    """A short, stable identifier of a public key, for display and logs.

    Args:
        public_key: Standard base64 of the 32-byte raw Ed25519 key.

    Returns:
        ``"ed25519:"`` followed by the first 16 hex digits of SHA-256 of the raw key.

    Raises:
        ValueError: If ``public_key`` is not a valid key.
    """
    raw = decode_public_key(public_key)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def check_signed_decision(
    *,
    keys: list[ApproverKey],
    session_id: str,
    phase: int,
    decision: str,
    approver: str,
    comment: str,
    nonce: str | None,
    signature: str | None,
    used_nonces: set[str] | frozenset[str],
    binding: Mapping[str, str] | None = None,
) -> str | None:
    """Check one signed approval decision; never raises. ``binding``: see
    :func:`canonical_message` (sessions that require version 2 pass theirs).

    The approver may have several keys (rotation): a signature by any key named
    ``approver`` is accepted. Checks run in this order, and the first failure is
    reported: signed at all, nonce format, approver known, decision valid,
    signature, nonce unused.

    Args:
        keys: The public keys the session trusts.
        session_id: The session's workflow id.
        phase: The phase being decided.
        decision: ``"approve"`` or ``"reject"``.
        approver: Who the decision claims to be from.
        comment: The decision's comment (bound by the signature).
        nonce: The nonce the approver signed.
        signature: Standard base64 of the Ed25519 signature.
        used_nonces: Nonces this session has already accepted.

    Returns:
        ``None`` when the decision is authentic and fresh, else the reason it is not.
    """
    if not signature:
        return UNSIGNED_REASON
    if not isinstance(nonce, str) or NONCE_PATTERN.fullmatch(nonce) is None:
        return "nonce missing or malformed (expected 16-64 characters of A-Z a-z 0-9 _ -)"
    candidates = [key for key in keys if key.name == approver]
    if not candidates:
        return f"unknown approver key {approver!r}"
    if decision not in DECISIONS:
        return f"decision must be 'approve' or 'reject', got {decision!r}"
    try:
        message = canonical_message(
            session_id=session_id,
            phase=phase,
            decision=decision,
            nonce=nonce,
            approver=approver,
            comment=comment,
            binding=binding,
        )
    except (ValueError, TypeError):
        message = None
    if message is None or not any(
        verify_signature(key=key, message=message, signature=signature) for key in candidates
    ):
        return (
            f"signature does not match approver {approver!r} for session {session_id} phase {phase}"
        )
    if nonce in used_nonces:
        return "nonce already used"
    return None


def unsigned_control_reason(session_id: str, action: str) -> str:
    """Why an unsigned control is refused where controls must be signed, with the fix."""
    return (
        "control is not signed; this session accepts only controls signed by its approvers' "
        f"or the deployment's operators' keys (`phasegate control {session_id or 'SESSION'} "
        f"{action} --as NAME` signs with your key NAME: phasegate keys new NAME)"
    )


def check_signed_control(
    *,
    keys: list[ApproverKey],
    session_id: str,
    action: str,
    actor: str,
    reason: str,
    to_phase: int | None,
    nonce: str | None,
    signature: str | None,
    used_nonces: set[str] | frozenset[str],
) -> str | None:
    """Check one signed control; never raises.

    The same person may have several keys (an approver key and an operator key,
    or rotation): a signature by any key named ``actor`` is accepted. Checks run
    in this order, and the first failure is reported: signed at all, nonce
    format, actor known, action valid, signature, nonce unused.

    Args:
        keys: The public keys that may sign controls of this session.
        session_id: The session's workflow id.
        action: The control's action.
        actor: Who the control claims to be from (the signing key's name).
        reason: The control's reason (bound by the signature).
        to_phase: The rollback target (bound by the signature), ``None`` otherwise.
        nonce: The nonce the actor signed.
        signature: Standard base64 of the Ed25519 signature.
        used_nonces: Nonces this session has already accepted (decisions and controls).

    Returns:
        ``None`` when the control is authentic and fresh, else the reason it is not.
    """
    if not signature:
        return unsigned_control_reason(session_id, action)
    if not isinstance(nonce, str) or NONCE_PATTERN.fullmatch(nonce) is None:
        return "nonce missing or malformed (expected 16-64 characters of A-Z a-z 0-9 _ -)"
    candidates = [key for key in keys if key.name == actor]
    if not candidates:
        known = ", ".join(sorted({key.name for key in keys}))
        return f"{actor!r} holds no key that may control this session (keys: {known})"
    try:
        message = canonical_control_message(
            session_id=session_id,
            action=action,
            nonce=nonce,
            actor=actor,
            reason=reason,
            to_phase=to_phase,
        )
    except (ValueError, TypeError):
        return f"not a control phasegate can check: action {action!r}, to_phase {to_phase!r}"
    if not any(
        verify_signature(key=key, message=message, signature=signature) for key in candidates
    ):
        return (
            f"signature does not match {actor!r}'s key for {action} of session {session_id} "
            "(the signature binds the session, action, reason, rollback target and nonce)"
        )
    if nonce in used_nonces:
        return "nonce already used"
    return None
