"""Approver keys on disk (``phasegate keys``) and the signing module's determinism.

Unit tests; no Temporal server. Every key directory is the test's ``tmp_path``.
(Split from test_signing.py, which covers the canonical message and verification.)
"""

from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from signing_helpers import (
    GOLDEN_PUBLIC_KEY,
    PHASE,
    POSIX_ONLY,
    SESSION,
    _check,
    _mismatch,
    _signed,
)

import phasegate.domain.signing as signing_module
from phasegate.client import keys
from phasegate.domain.errors import PhasegateError
from phasegate.domain.signing import ApproverKey

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
