"""Signed approvals: canonical message, verification, and approver keys on disk.

Unit tests; no Temporal server. Every key directory is the test's ``tmp_path``.
"""

from __future__ import annotations

import ast
import base64
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import phasegate.domain.signing as signing_module
from phasegate.client import keys
from phasegate.domain.errors import PhasegateError
from phasegate.domain.signing import (
    UNSIGNED_REASON,
    ApproverKey,
    canonical_message,
    check_signed_decision,
    fingerprint,
    verify_signature,
)

POSIX_ONLY = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")

SESSION = "sess-7f3a"
PHASE = 2
COMMENT = "tests pass, reviewed the diff"

# Regression vectors: the bytes every client must sign, and a deterministic
# Ed25519 signature of them by the key with seed 00 01 .. 1f.
GOLDEN_FIELDS = {
    "session_id": "sess-ü-42",
    "phase": 3,
    "decision": "approve",
    "nonce": "n0nce_AAAAAAAAAAAAAAAA",
    "approver": "alice",
    "comment": "LGTM ✓",
}
GOLDEN_MESSAGE = (
    b"phasegate-approval-v1\n"
    b'{"approver":"alice",'
    b'"comment_sha256":"f2844e863ef2c5131e7db7d96f606821853fe3ee331123f3350af149d34dfe79",'
    b'"decision":"approve","nonce":"n0nce_AAAAAAAAAAAAAAAA","phase":3,'
    b'"session_id":"sess-\xc3\xbc-42"}'
)
GOLDEN_PUBLIC_KEY = "A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="
GOLDEN_FINGERPRINT = "ed25519:56475aa75463474c"
GOLDEN_SIGNATURE = (
    "0TZEOTp768ymiL4dMcKMoQ5ZwX5NuVbXf3ZiJzDCTNNQWOxTrwzkOxz9ujFEsztXVoq04mpjrvaoUSc10r4oAw=="
)


def _raw_public(private: Ed25519PrivateKey) -> str:
    raw = private.public_key().public_bytes(
        encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
    )
    return base64.b64encode(raw).decode("ascii")


@pytest.fixture
def alice(tmp_path: Path) -> ApproverKey:
    return keys.new_key("alice", directory=tmp_path)


@pytest.fixture
def bob(tmp_path: Path) -> ApproverKey:
    return keys.new_key("bob", directory=tmp_path)


def _signed(
    tmp_path: Path,
    name: str = "alice",
    *,
    session_id: str = SESSION,
    phase: int = PHASE,
    decision: str = "approve",
    comment: str = COMMENT,
) -> dict[str, str]:
    nonce, signature = keys.sign_decision(
        name,
        session_id=session_id,
        phase=phase,
        decision=decision,
        comment=comment,
        directory=tmp_path,
    )
    return {"nonce": nonce, "signature": signature}


def _check(trusted: list[ApproverKey], signed: dict[str, str | None], **overrides: object):
    arguments: dict[str, object] = {
        "keys": trusted,
        "session_id": SESSION,
        "phase": PHASE,
        "decision": "approve",
        "approver": "alice",
        "comment": COMMENT,
        "nonce": signed["nonce"],
        "signature": signed["signature"],
        "used_nonces": frozenset(),
    }
    arguments.update(overrides)
    return check_signed_decision(**arguments)  # type: ignore[arg-type]


# -- canonical message --


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


def _mismatch(approver: str = "alice", session_id: str = SESSION, phase: int = PHASE) -> str:
    return f"signature does not match approver '{approver}' for session {session_id} phase {phase}"


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


# -- keys on disk --


@POSIX_ONLY
def test_key_files_and_directory_permissions(tmp_path: Path, alice: ApproverKey) -> None:
    folder = tmp_path / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "alice.key").stat().st_mode) == 0o600
    assert (folder / "alice.pub").read_text() == alice.public_key + "\n"
    assert b"BEGIN PRIVATE KEY" in (folder / "alice.key").read_bytes()


@POSIX_ONLY
def test_key_mode_is_exact_under_a_permissive_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        keys.new_key("carol", directory=tmp_path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "keys" / "carol.key").stat().st_mode) == 0o600


def test_overwrite_is_refused_unless_asked(tmp_path: Path, alice: ApproverKey) -> None:
    with pytest.raises(PhasegateError, match="already exists") as caught:
        keys.new_key("alice", directory=tmp_path)
    assert caught.value.where == str(tmp_path / "keys" / "alice.key")
    assert caught.value.hint
    assert keys.public_key("alice", directory=tmp_path) == alice  # untouched
    signed_with_old = _signed(tmp_path)

    replaced = keys.new_key("alice", directory=tmp_path, overwrite=True)
    assert replaced != alice
    assert keys.public_key("alice", directory=tmp_path) == replaced
    if os.name == "posix":
        assert stat.S_IMODE((tmp_path / "keys" / "alice.key").stat().st_mode) == 0o600
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["alice.key", "alice.pub"]
    # A signature by the replaced key no longer verifies; one by the new key does.
    assert _check([replaced], signed_with_old) == _mismatch()
    assert _check([replaced], _signed(tmp_path)) is None


@POSIX_ONLY
def test_group_readable_private_key_is_refused(tmp_path: Path, alice: ApproverKey) -> None:
    path = tmp_path / "keys" / "alice.key"
    path.chmod(0o644)
    with pytest.raises(PhasegateError, match="group or others") as caught:
        keys.load_private_key("alice", directory=tmp_path)
    assert caught.value.where == str(path)
    assert "chmod 600" in (caught.value.hint or "")
    with pytest.raises(PhasegateError):
        keys.sign_decision(
            "alice", session_id=SESSION, phase=PHASE, decision="approve", directory=tmp_path
        )
    path.chmod(0o600)
    assert isinstance(keys.load_private_key("alice", directory=tmp_path), Ed25519PrivateKey)


def test_missing_key_has_a_hint(tmp_path: Path) -> None:
    with pytest.raises(PhasegateError, match="no private key named 'dave'") as caught:
        keys.load_private_key("dave", directory=tmp_path)
    assert "phasegate keys new dave" in (caught.value.hint or "")


@pytest.mark.parametrize("name", ["", "../evil", "a/b", "with space", "x" * 65, "ünï"])
def test_invalid_key_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(PhasegateError, match="invalid key name"):
        keys.new_key(name, directory=tmp_path)
    assert not (tmp_path / "evil.key").exists()


def test_malformed_key_files_are_reported(tmp_path: Path, alice: ApproverKey) -> None:
    (tmp_path / "keys" / "alice.pub").write_text("garbage\n")
    with pytest.raises(PhasegateError, match="public key file") as caught:
        keys.public_key("alice", directory=tmp_path)
    assert caught.value.where == str(tmp_path / "keys" / "alice.pub")

    path = tmp_path / "keys" / "alice.key"
    path.write_bytes(b"not a pem")
    with pytest.raises(PhasegateError, match="not an unencrypted PEM"):
        keys.load_private_key("alice", directory=tmp_path)


def test_public_key_is_derived_when_pub_file_is_missing(tmp_path: Path, alice: ApproverKey) -> None:
    (tmp_path / "keys" / "alice.pub").unlink()
    assert keys.public_key("alice", directory=tmp_path) == alice


def test_list_keys(tmp_path: Path) -> None:
    assert keys.list_keys(directory=tmp_path) == []
    bob = keys.new_key("bob", directory=tmp_path)
    alice = keys.new_key("alice", directory=tmp_path)
    (tmp_path / "keys" / "notes.txt").write_text("ignored")
    assert keys.list_keys(directory=tmp_path) == [alice, bob]


def test_new_nonce_is_fresh_and_well_formed() -> None:
    nonces = {keys.new_nonce() for _ in range(100)}
    assert len(nonces) == 100
    assert all(signing_module.NONCE_PATTERN.fullmatch(nonce) for nonce in nonces)


def test_sign_decision_refuses_an_invalid_decision(tmp_path: Path, alice: ApproverKey) -> None:
    with pytest.raises(PhasegateError, match="decision must be"):
        keys.sign_decision(
            "alice", session_id=SESSION, phase=PHASE, decision="yes", directory=tmp_path
        )


def test_config_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PHASEGATE_CONFIG_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert keys.config_dir() == tmp_path / "explicit"
    monkeypatch.delenv("PHASEGATE_CONFIG_DIR")
    assert keys.config_dir() == tmp_path / "xdg" / "phasegate"
    monkeypatch.setenv("XDG_CONFIG_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert keys.config_dir() == tmp_path / "home" / ".config" / "phasegate"


def test_default_directory_comes_from_config_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PHASEGATE_CONFIG_DIR", str(tmp_path / "cfg"))
    key = keys.new_key("erin")
    assert (tmp_path / "cfg" / "keys" / "erin.key").exists()
    assert keys.list_keys() == [key]


# -- workflow safety --

FORBIDDEN_IMPORTS = {"os", "pathlib", "time", "random", "secrets", "datetime", "uuid"}


def test_domain_signing_imports_nothing_nondeterministic() -> None:
    tree = ast.parse(Path(signing_module.__file__).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported, "the import scan found nothing; the test is broken"
    assert not imported & FORBIDDEN_IMPORTS
    # Nor through an attribute of the module namespace.
    assert not FORBIDDEN_IMPORTS & set(vars(signing_module))


# The workflow sandbox refuses imports made after the workflow module loaded. If
# cryptography's Rust code first looked up InvalidSignature then, it would panic
# and abort the worker process (seen on a real dev server before the fix).
# Simulated here in a fresh interpreter: imports of cryptography are refused
# after domain.signing has loaded, then a forged signature is verified.
SANDBOX_SIMULATION = textwrap.dedent(
    f"""
    import base64, builtins
    from phasegate.domain.signing import ApproverKey, check_signed_decision, verify_signature

    real_import = builtins.__import__

    def refuse_late_imports(name, *args, **kwargs):
        if name.startswith("cryptography"):
            raise ImportError("refused like the workflow sandbox: " + name)
        return real_import(name, *args, **kwargs)

    builtins.__import__ = refuse_late_imports
    key = ApproverKey(name="alice", public_key="{GOLDEN_PUBLIC_KEY}")
    forged = base64.b64encode(bytes(range(64))).decode()
    assert verify_signature(key=key, message=b"x", signature=forged) is False
    assert check_signed_decision(
        keys=[key], session_id="s", phase=1, decision="approve", approver="alice",
        comment="", nonce="n" * 16, signature=forged, used_nonces=set(),
    ).startswith("signature does not match")
    print("survived")
    """
)


def test_failed_verification_needs_no_late_import() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SANDBOX_SIMULATION],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "survived"
