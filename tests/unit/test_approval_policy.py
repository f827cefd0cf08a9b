"""domain.approvals: one policy for session approvals, controls, orchestration gates and
replans (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasegate.client.keys import new_key, sign_decision
from phasegate.domain.approvals import Deciders, Decision, refusal


def _decision(approver: str, **kw: object) -> Decision:
    return Decision(scope_id="s-1", gate=1, approver=approver, decision="approve", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["approval", "control"])
def test_names_reserved_names_and_allowlists_hold_for_every_kind(kind: str) -> None:
    deciders = Deciders(names=["lead"], kind=kind)  # type: ignore[arg-type]
    assert refusal(deciders, _decision("lead"), used_nonces=()) is None
    for who, why in ((" ", "must name"), ("phasegate", "reserved"), ("mallory", "may not")):
        refused = refusal(deciders, _decision(who), used_nonces=())
        assert refused is not None and why in refused.message
        assert refused.code == "approval_refused"


def test_without_keys_only_a_deployment_that_allows_it_takes_names() -> None:
    closed = refusal(Deciders(unsigned_ok=False), _decision("lead"), used_nonces=())
    assert closed is not None and "PHASEGATE_ALLOW_UNSIGNED_APPROVALS" in (closed.hint or "")
    control = refusal(Deciders(unsigned_ok=False, kind="control"), _decision("ops"), used_nonces=())
    assert control is not None and "PHASEGATE_OPERATOR_KEYS" in (control.hint or "")


def test_with_keys_a_signature_by_the_named_key_is_needed_once(tmp_path: Path) -> None:
    lead = new_key("lead", directory=tmp_path)
    deciders = Deciders(keys=[lead], scope="orchestration", gate_noun="gate", how="sign it")
    nonce, sig = sign_decision(
        "lead", session_id="s-1", phase=1, decision="approve", directory=tmp_path
    )
    signed = _decision("lead", nonce=nonce, signature=sig)
    assert refusal(deciders, signed, used_nonces=()) is None
    unsigned = refusal(deciders, _decision("lead"), used_nonces=())
    assert unsigned is not None and unsigned.where == "signature"
    replayed = refusal(deciders, signed, used_nonces={nonce})
    assert replayed is not None and "nonce already used" in replayed.message
    other_gate = refusal(deciders, Decision(**{**signed.__dict__, "gate": 2}), used_nonces=())
    assert other_gate is not None and "does not match" in other_gate.message
    assert "orchestration s-1" in other_gate.message
