"""Signed approvals and controls: the canonical messages and their verification (keys
on disk: test_keys.py; controls on a real session: test_signed_controls.py).

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
    canonical_control_message,
    canonical_message,
    check_signed_control,
    check_signed_decision,
    fingerprint,
    unsigned_control_reason,
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


# -- signed controls --

GOLDEN_CONTROL = {
    "session_id": "sess-ü-42",
    "action": "rollback",
    "nonce": "n0nce_BBBBBBBBBBBBBBBB",
    "actor": "lead",
    "reason": "wrong plan ✗",
    "to_phase": 1,
}
GOLDEN_CONTROL_MESSAGE = (
    b"phasegate-control-v1\n"
    b'{"action":"rollback","actor":"lead","nonce":"n0nce_BBBBBBBBBBBBBBBB",'
    b'"reason_sha256":"e774e57d491b696f324272f547bcccb4f21d4cf32d6862c9d128a0eba39df050",'
    b'"session_id":"sess-\xc3\xbc-42","to_phase":1}'
)
GOLDEN_CONTROL_SIGNATURE = (
    "SAsxnGBsmAASUlT1Gv4q7njK6xws4xjHkK4/CtUaPpjxamBow8DB1JGcxzdl1bPm8CWKIa76JdsUCbbsWqE+CQ=="
)


def _check_control(trusted: list[ApproverKey], nonce: str, signature: str, **overrides: object):
    arguments: dict[str, object] = {
        "keys": trusted,
        "session_id": SESSION,
        "action": "pause",
        "actor": "alice",
        "reason": "review",
        "to_phase": None,
        "nonce": nonce,
        "signature": signature,
        "used_nonces": frozenset(),
    }
    arguments.update(overrides)
    return check_signed_control(**arguments)  # type: ignore[arg-type]


def test_control_message_golden_bytes_and_signature() -> None:
    assert canonical_control_message(**GOLDEN_CONTROL) == GOLDEN_CONTROL_MESSAGE  # type: ignore[arg-type]
    private = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    signature = base64.b64encode(private.sign(GOLDEN_CONTROL_MESSAGE)).decode()
    assert signature == GOLDEN_CONTROL_SIGNATURE
    key = ApproverKey(name="lead", public_key=GOLDEN_PUBLIC_KEY)
    fields = {k: v for k, v in GOLDEN_CONTROL.items() if k != "session_id"}
    assert (
        check_signed_control(
            keys=[key],
            session_id=GOLDEN_CONTROL["session_id"],  # type: ignore[arg-type]
            signature=signature,
            used_nonces=set(),
            **fields,  # type: ignore[arg-type]
        )
        is None
    )


def test_control_message_without_rollback_target_has_null() -> None:
    message = canonical_control_message(
        session_id="s", action="pause", nonce="n" * 16, actor="lead"
    )
    assert message.endswith(b',"session_id":"s","to_phase":null}')


@pytest.mark.parametrize(
    ("field", "other"),
    [
        ("session_id", "sess-other"),
        ("action", "abandon"),
        ("nonce", "n0nce_CCCCCCCCCCCCCCCC"),
        ("actor", "lead2"),
        ("reason", "wrong plan"),
        ("to_phase", 0),
        ("to_phase", None),
    ],
)
def test_control_message_changes_with_every_bound_field(field: str, other: object) -> None:
    changed = {**GOLDEN_CONTROL, field: other}
    assert canonical_control_message(**changed) != GOLDEN_CONTROL_MESSAGE  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [{"action": "advance"}, {"to_phase": "1"}, {"to_phase": True}, {"reason": "\ud800"}],
)
def test_control_message_refuses_invalid_fields(bad: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        canonical_control_message(**{**GOLDEN_CONTROL, **bad})  # type: ignore[arg-type]


def test_signed_control_binds_every_field(tmp_path: Path, alice: ApproverKey) -> None:
    nonce, sig = keys.sign_control(
        "alice", session_id=SESSION, action="pause", reason="review", directory=tmp_path
    )
    assert _check_control([alice], nonce, sig) is None
    for override in (
        {"session_id": "sess-other"},
        {"action": "abandon"},
        {"action": "resume"},
        {"reason": "something else"},
        {"to_phase": 0},
    ):
        assert "signature does not match" in _check_control([alice], nonce, sig, **override)
    assert _check_control([alice], nonce, sig, used_nonces={nonce}) == "nonce already used"
    assert _check_control([alice], nonce, None) == unsigned_control_reason(SESSION, "pause")  # type: ignore[arg-type]


def test_signed_control_actor_must_hold_the_key(
    tmp_path: Path, alice: ApproverKey, bob: ApproverKey
) -> None:
    """bob signs with his own key but claims to be alice: refused; as himself, accepted."""
    nonce, sig = keys.sign_control(
        "bob", session_id=SESSION, action="pause", reason="review", directory=tmp_path
    )
    assert "does not match 'alice'" in _check_control([alice, bob], nonce, sig)
    assert "holds no key" in _check_control([alice], nonce, sig, actor="bob")
    assert _check_control([alice, bob], nonce, sig, actor="bob") is None


def test_approval_and_control_signatures_do_not_cross(tmp_path: Path, alice: ApproverKey) -> None:
    """The prefixes differ: a signed decision can never pass as a control (or back)."""
    signed = _signed(tmp_path)
    assert "does not match" in _check_control([alice], signed["nonce"], signed["signature"])
    nonce, sig = keys.sign_control(
        "alice", session_id=SESSION, action="pause", reason=COMMENT, directory=tmp_path
    )
    assert "does not match" in _check([alice], {"nonce": nonce, "signature": sig})


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    action=st.one_of(st.sampled_from(["pause", "rollback"]), st.text(max_size=12)),
    actor=st.text(max_size=12),
    to_phase=st.one_of(st.none(), st.integers(), st.booleans(), st.text(max_size=3)),
    nonce=st.one_of(st.none(), st.text(max_size=70)),
    signature=st.one_of(st.none(), st.text(max_size=130)),
)
def test_check_signed_control_never_raises(
    action: str, actor: str, to_phase: object, nonce: str | None, signature: str | None
) -> None:
    key = ApproverKey(name="alice", public_key=GOLDEN_PUBLIC_KEY)
    reason = check_signed_control(
        keys=[key],
        session_id=SESSION,
        action=action,
        actor=actor,
        reason="r",
        to_phase=to_phase,  # type: ignore[arg-type]
        nonce=nonce,
        signature=signature,
        used_nonces=frozenset(),
    )
    assert isinstance(reason, str)
