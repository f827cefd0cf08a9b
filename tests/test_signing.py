"""Signed approvals: the canonical message and its verification (keys on disk:
test_keys.py).

Unit tests; no Temporal server. Every key directory is the test's ``tmp_path``.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from signing_helpers import (
    COMMENT,
    GOLDEN_FIELDS,
    GOLDEN_FINGERPRINT,
    GOLDEN_MESSAGE,
    GOLDEN_PUBLIC_KEY,
    GOLDEN_SIGNATURE,
    PHASE,
    SESSION,
    _check,
    _mismatch,
    _raw_public,
    _signed,
)

from phasegate.client import keys
from phasegate.domain.signing import (
    UNSIGNED_REASON,
    ApproverKey,
    canonical_message,
    check_signed_decision,
    fingerprint,
    verify_signature,
)


def test_canonical_message_golden_bytes() -> None:
    assert canonical_message(**GOLDEN_FIELDS) == GOLDEN_MESSAGE  # type: ignore[arg-type]


def test_golden_signature_vector() -> None:
    private = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    key = ApproverKey(name="alice", public_key=_raw_public(private))
    assert key.public_key == GOLDEN_PUBLIC_KEY
    assert fingerprint(key.public_key) == GOLDEN_FINGERPRINT
    assert base64.b64encode(private.sign(GOLDEN_MESSAGE)).decode() == GOLDEN_SIGNATURE
    assert verify_signature(key=key, message=GOLDEN_MESSAGE, signature=GOLDEN_SIGNATURE)
    assert (
        check_signed_decision(
            keys=[key],
            signature=GOLDEN_SIGNATURE,
            used_nonces=set(),
            **GOLDEN_FIELDS,  # type: ignore[arg-type]
        )
        is None
    )


@pytest.mark.parametrize(
    ("field", "other"),
    [
        ("session_id", "sess-ü-43"),
        ("phase", 4),
        ("decision", "reject"),
        ("nonce", "n0nce_AAAAAAAAAAAAAAAB"),
        ("approver", "alicf"),
        ("comment", "LGTM ✓ "),
    ],
)
def test_canonical_message_changes_with_every_bound_field(field: str, other: object) -> None:
    changed = {**GOLDEN_FIELDS, field: other}
    assert canonical_message(**changed) != GOLDEN_MESSAGE  # type: ignore[arg-type]


def test_canonical_message_is_unambiguous_across_field_boundaries() -> None:
    # Text moved from one field to its neighbour must not produce the same bytes.
    one = canonical_message(
        session_id='a","phase":1', phase=1, decision="approve", nonce="n" * 16, approver="x"
    )
    two = canonical_message(
        session_id="a", phase=1, decision="approve", nonce="n" * 16, approver='x","phase":1'
    )
    assert one != two
    assert one.startswith(b"phasegate-approval-v1\n")


@pytest.mark.parametrize(
    "bad",
    [
        {"decision": "approved"},
        {"phase": "3"},
        {"phase": True},
        {"comment": "\ud800"},
        {"session_id": None},
    ],
)
def test_canonical_message_refuses_invalid_fields(bad: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        canonical_message(**{**GOLDEN_FIELDS, **bad})  # type: ignore[arg-type]


# -- check_signed_decision --


def test_valid_signed_decision_is_accepted(tmp_path: Path, alice: ApproverKey) -> None:
    assert _check([alice], _signed(tmp_path)) is None


def test_valid_reject_with_empty_comment(tmp_path: Path, alice: ApproverKey) -> None:
    signed = _signed(tmp_path, decision="reject", comment="")
    assert _check([alice], signed, decision="reject", comment="") is None


def test_any_of_an_approvers_keys_is_accepted(tmp_path: Path, alice: ApproverKey) -> None:
    old = ApproverKey(name="alice", public_key=_raw_public(Ed25519PrivateKey.generate()))
    assert _check([old, alice], _signed(tmp_path)) is None


def test_random_signature_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    forged = {**_signed(tmp_path), "signature": base64.b64encode(os.urandom(64)).decode()}
    assert _check([alice], forged) == _mismatch()


def test_signature_by_another_key_is_refused(
    tmp_path: Path, alice: ApproverKey, bob: ApproverKey
) -> None:
    # bob signs a decision in alice's name: the message says "alice", the key is bob's.
    private = keys.load_private_key("bob", directory=tmp_path)
    nonce = keys.new_nonce()
    message = canonical_message(
        session_id=SESSION,
        phase=PHASE,
        decision="approve",
        nonce=nonce,
        approver="alice",
        comment=COMMENT,
    )
    forged = {"nonce": nonce, "signature": base64.b64encode(private.sign(message)).decode()}
    assert _check([alice, bob], forged) == _mismatch()
    # ... and bob's own valid signature cannot be presented as alice's decision.
    assert _check([alice, bob], _signed(tmp_path, "bob")) == _mismatch()
    assert _check([alice, bob], _signed(tmp_path, "bob"), approver="bob") is None


def test_unknown_approver_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    reason = _check([alice], _signed(tmp_path), approver="mallory")
    assert reason == "unknown approver key 'mallory'"


def test_signature_for_another_session_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    signed = _signed(tmp_path, session_id="sess-other")
    assert _check([alice], signed) == _mismatch()


def test_signature_for_another_phase_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    signed = _signed(tmp_path, phase=PHASE + 1)
    assert _check([alice], signed) == _mismatch()


def test_signature_for_the_other_decision_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    signed = _signed(tmp_path, decision="reject")
    assert _check([alice], signed) == _mismatch()


def test_swapped_comment_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    signed = _signed(tmp_path, comment="looks fine")
    assert _check([alice], signed, comment="looks fine; also approve phase 3") == _mismatch()


def test_replayed_nonce_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    signed = _signed(tmp_path)
    assert _check([alice], signed, used_nonces={signed["nonce"]}) == "nonce already used"
    assert _check([alice], signed, used_nonces={"someothernonce123"}) is None


@pytest.mark.parametrize("signature", [None, ""])
def test_unsigned_decision_is_refused(alice: ApproverKey, signature: str | None) -> None:
    assert _check([alice], {"nonce": None, "signature": signature}) == UNSIGNED_REASON
    assert UNSIGNED_REASON.startswith("decision is not signed")
    assert "phasegate keys new NAME" in UNSIGNED_REASON


@pytest.mark.parametrize(
    "signature",
    [
        "not base64!",
        "QUJD",  # valid base64, 3 bytes
        "%%%%",
        "AAAA\nAAAA",
        base64.urlsafe_b64encode(b"\xfb" * 64).decode(),  # URL-safe alphabet
        base64.b64encode(b"\x00" * 64).decode().rstrip("="),  # padding stripped
        "A" * 10_000,
    ],
)
def test_malformed_signature_is_refused(tmp_path: Path, alice: ApproverKey, signature: str) -> None:
    signed = {**_signed(tmp_path), "signature": signature}
    assert _check([alice], signed) == _mismatch()


@pytest.mark.parametrize(
    "nonce", [None, "", "short", "x" * 65, "has space in it!!!", "ünïcødé-nonce-1234"]
)
def test_missing_or_malformed_nonce_is_refused(
    tmp_path: Path, alice: ApproverKey, nonce: str | None
) -> None:
    signed = {**_signed(tmp_path), "nonce": nonce}
    reason = _check([alice], signed)
    assert reason is not None and reason.startswith("nonce missing or malformed")


def test_invalid_decision_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    reason = _check([alice], _signed(tmp_path), decision="approved")
    assert reason is not None and "decision must be 'approve' or 'reject'" in reason


# -- verify_signature and ApproverKey --


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    message=st.one_of(st.binary(max_size=256), st.text(max_size=64), st.none(), st.integers()),
    signature=st.one_of(
        st.text(max_size=200),
        st.binary(min_size=64, max_size=64).map(lambda raw: base64.b64encode(raw).decode()),
        st.none(),
        st.integers(),
        st.binary(max_size=100),
    ),
)
def test_verify_signature_never_raises_on_garbage(message: object, signature: object) -> None:
    key = ApproverKey(name="alice", public_key=GOLDEN_PUBLIC_KEY)
    assert verify_signature(key=key, message=message, signature=signature) is False  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    raw_key=st.binary(min_size=32, max_size=32),
    signature=st.binary(min_size=64, max_size=64),
)
def test_verify_signature_never_raises_on_arbitrary_keys(raw_key: bytes, signature: bytes) -> None:
    # Not every 32-byte string is a point on the curve; that is still just False.
    key = ApproverKey(name="x", public_key=base64.b64encode(raw_key).decode())
    result = verify_signature(
        key=key, message=GOLDEN_MESSAGE, signature=base64.b64encode(signature).decode()
    )
    assert result is False


def test_verify_signature_survives_an_unvalidated_key() -> None:
    key = ApproverKey.model_construct(name="alice", public_key="garbage")
    assert verify_signature(key=key, message=GOLDEN_MESSAGE, signature=GOLDEN_SIGNATURE) is False


@settings(max_examples=200, deadline=None)
@given(
    approver=st.text(max_size=20),
    session_id=st.text(max_size=40),
    phase=st.integers(),
    decision=st.text(max_size=10),
    comment=st.text(max_size=40),
    nonce=st.one_of(st.none(), st.text(max_size=80), st.from_regex(r"\A[A-Za-z0-9_-]{16,64}\Z")),
    signature=st.one_of(st.none(), st.text(max_size=120)),
)
def test_check_signed_decision_never_raises(
    approver: str,
    session_id: str,
    phase: int,
    decision: str,
    comment: str,
    nonce: str | None,
    signature: str | None,
) -> None:
    key = ApproverKey(name="alice", public_key=GOLDEN_PUBLIC_KEY)
    reason = check_signed_decision(
        keys=[key],
        session_id=session_id,
        phase=phase,
        decision=decision,
        approver=approver,
        comment=comment,
        nonce=nonce,
        signature=signature,
        used_nonces=frozenset(),
    )
    assert isinstance(reason, str) and reason


@pytest.mark.parametrize(
    ("public_key", "message"),
    [
        ("", "got 0 bytes"),
        ("not base64", "standard base64"),
        (base64.b64encode(b"\x01" * 31).decode(), "got 31 bytes"),
        (base64.b64encode(b"\x01" * 33).decode(), "got 33 bytes"),
        (GOLDEN_PUBLIC_KEY + "\n", "standard base64"),
        (GOLDEN_PUBLIC_KEY.rstrip("="), "standard base64"),
        (base64.urlsafe_b64encode(b"\xfb" * 32).decode(), "standard base64"),
    ],
)
def test_approver_key_rejects_malformed_public_keys(public_key: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ApproverKey(name="alice", public_key=public_key)


def test_approver_key_is_plain_data() -> None:
    key = ApproverKey(name="alice", public_key=GOLDEN_PUBLIC_KEY)
    assert ApproverKey.model_validate_json(key.model_dump_json()) == key
    with pytest.raises(ValidationError):
        ApproverKey(name="", public_key=GOLDEN_PUBLIC_KEY)


def test_fingerprint_is_short_and_stable(alice: ApproverKey, bob: ApproverKey) -> None:
    assert fingerprint(alice.public_key) == fingerprint(alice.public_key)
    assert fingerprint(alice.public_key) != fingerprint(bob.public_key)
    assert len(fingerprint(alice.public_key)) == len("ed25519:") + 16
    with pytest.raises(ValueError):
        fingerprint("nope")
