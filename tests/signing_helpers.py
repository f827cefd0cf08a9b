"""Constants, fixtures and helpers shared by test_signing.py and test_keys.py."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from phasegate.client import keys
from phasegate.domain.signing import ApproverKey, check_signed_decision

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


def _mismatch(approver: str = "alice", session_id: str = SESSION, phase: int = PHASE) -> str:
    return f"signature does not match approver '{approver}' for session {session_id} phase {phase}"
