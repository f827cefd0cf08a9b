"""The seal (phasegate.sealing) without a server: what each converter makes of a sealed
prefetch, tampering, keys and rings."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

from phasegate.client import keys
from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import PhaseDefinition
from phasegate.domain.session.sealed import SealedPhase
from phasegate.sealing import (
    SEALED_ENCODING,
    KeyRing,
    SealKeyMissing,
    data_converter,
    load_ring,
    new_seal_key,
    open_sealed,
    parse_ring,
    reveal,
    seal,
)
from phasegate.temporal import DATA_CONVERTER

SECRET = "FUTURE-PHASE-TEXT-7731"
PHASE = PhaseDefinition(index=2, label="2", name="Build", content=f"{SECRET}: build it")


def _sealed(**kw: object) -> SealedPhase:
    fields: dict[str, object] = {"namespace": "default", "workflow_id": "s1", "index": 2}
    return SealedPhase(**{**fields, "phase": PHASE, **kw})  # type: ignore[arg-type]


def _to(converter: DataConverter, value: object) -> Payload:
    return converter.payload_converter.to_payloads([value])[0]


def _from(converter: DataConverter, payload: Payload) -> SealedPhase:
    [value] = converter.payload_converter.from_payloads([payload], [SealedPhase])
    assert isinstance(value, SealedPhase)
    return value


def test_sealed_round_trip_opens_for_its_session_and_phase_only():
    ring = KeyRing([new_seal_key()])
    payload = _to(data_converter(ring), _sealed())
    assert payload.metadata["encoding"] == SEALED_ENCODING.encode()
    assert SECRET.encode() not in payload.data and b"Build" not in payload.data
    opened = _from(data_converter(ring), payload)
    assert opened.opened_with == ring.sealing.kid
    assert opened.opened_for("s1", 2) == PHASE
    assert opened.opened_for("another-session", 2) is None
    assert opened.opened_for("s1", 3) is None


def test_stock_converters_cannot_read_a_sealed_phase():
    payload = _to(data_converter(KeyRing([new_seal_key()])), _sealed())
    for converter in (DataConverter.default, pydantic_data_converter):
        with pytest.raises(KeyError, match="Unknown payload encoding"):
            converter.payload_converter.from_payloads([payload])


def test_no_converter_writes_the_phase_in_clear():
    for converter in (DATA_CONVERTER, pydantic_data_converter, DataConverter.default):
        payload = _to(converter, _sealed())
        assert SECRET not in payload.data.decode(), converter
    assert SECRET not in _sealed().model_dump_json()
    note = json.loads(_to(DATA_CONVERTER, _sealed()).data)
    assert "no seal key ring" in note["problem"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda p: p.data[:20] + bytes([p.data[20] ^ 1]) + p.data[21:],  # ciphertext
        lambda p: p.data[:-1] + bytes([p.data[-1] ^ 1]),  # tag
        lambda p: bytes([p.data[0] ^ 1]) + p.data[1:],  # nonce
        lambda p: p.data[:10],  # truncated
    ],
)
def test_a_tampered_payload_is_not_opened(tamper):
    ring = KeyRing([new_seal_key()])
    payload = _to(data_converter(ring), _sealed())
    payload.data = tamper(payload)
    found = _from(data_converter(ring), payload)
    assert found.opened_with is None and found.opened_for("s1", 2) is None
    assert "refused" in found.problem


def test_the_key_id_is_bound_to_the_ciphertext():
    """Relabelled with another key of the ring (wrong associated data): not opened."""
    first, second = new_seal_key(), new_seal_key()
    payload = _to(data_converter(KeyRing([first, second])), _sealed())
    payload.metadata["phasegate-seal-kid"] = second.kid.encode()
    found = _from(data_converter(KeyRing([first, second])), payload)
    assert found.opened_with is None and "does not authenticate" in found.problem


def test_an_unknown_key_raises_what_to_do():
    payload = _to(data_converter(KeyRing([new_seal_key()])), _sealed())
    other = KeyRing([new_seal_key()], "PHASEGATE_SEAL_KEYS=/etc/ring.json")
    with pytest.raises(SealKeyMissing) as err:
        _from(data_converter(other), payload)
    assert "/etc/ring.json" in str(err.value) and err.value.hint
    with pytest.raises(SealKeyMissing, match="no seal key ring"):
        _from(DATA_CONVERTER, payload)


def test_an_unsealed_phase_is_never_opened():
    ring = KeyRing([new_seal_key()])
    forged = {"namespace": "default", "workflow_id": "s1", "index": 2, "phase": PHASE.model_dump()}
    for payload in (
        Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(forged).encode()),
        Payload(metadata={"encoding": b"json/plain"}, data=b"[not json"),
        Payload(metadata={"encoding": b"json/plain"}, data=b"42"),
        Payload(metadata={"encoding": b"binary/null"}),
    ):
        for converter in (data_converter(ring), DATA_CONVERTER):
            found = _from(converter, payload)  # never raises: a miss, not a failed task
            assert found.opened_with is None and found.opened_for("s1", 2) is None


def test_other_payloads_pass_unchanged():
    ring = KeyRing([new_seal_key()])
    values = [{"a": 1}, "text", None, PHASE]
    sealing = data_converter(ring).payload_converter.to_payloads(values)
    plain = pydantic_data_converter.payload_converter.to_payloads(values)
    assert sealing == plain
    assert data_converter(ring).payload_converter.from_payloads(plain) == [
        {"a": 1},
        "text",
        None,
        PHASE.model_dump(mode="json"),
    ]


def test_rotation_opens_old_payloads_and_seals_with_the_new_key():
    old = KeyRing([new_seal_key()])
    payload = _to(data_converter(old), _sealed())
    rotated = KeyRing([new_seal_key(), *old.keys])
    assert _from(data_converter(rotated), payload).opened_for("s1", 2) == PHASE
    fresh = _to(data_converter(rotated), _sealed())
    assert fresh.metadata["phasegate-seal-kid"].decode() == rotated.sealing.kid


def test_reveal_shows_operators_the_plaintext_or_why_not():
    ring = KeyRing([new_seal_key()])
    sealed = seal(ring, _sealed())
    shown = json.loads(reveal(ring, sealed).data)
    assert shown["sealed_with"] == ring.sealing.kid and SECRET in shown["phase"]["content"]
    hidden = json.loads(reveal(None, sealed).data)
    assert SECRET not in json.dumps(hidden) and "no seal key ring" in hidden["not_shown"]
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b"1")
    assert reveal(ring, plain) is plain
    assert open_sealed(ring, sealed).opened_with == ring.sealing.kid


def test_ring_files(tmp_path):
    path = tmp_path / "ring.json"
    ring = keys.new_seal_ring(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_ring(path).kids == ring.kids
    with pytest.raises(PhasegateError, match="already exists"):
        keys.new_seal_ring(path)
    rotated = keys.rotate_seal_ring(path)
    assert rotated.kids[1:] == ring.kids and load_ring(path).kids == rotated.kids
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    with pytest.raises(PhasegateError, match="readable by every user") as err:
        load_ring(path)
    assert "chmod 600" in (err.value.hint or "")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "cannot load the seal key ring"),
        ('{"keys": []}', "not a seal key ring"),
        ('{"format": "phasegate-seal-ring/1", "keys": []}', "holds no key"),
    ],
)
def test_broken_rings_say_what_is_wrong(text, problem):
    with pytest.raises(PhasegateError, match=problem) as err:
        parse_ring(text, "PHASEGATE_SEAL_KEYS=x")
    assert "phasegate keys seal-new" in (err.value.hint or "")


def test_a_key_whose_id_does_not_match_is_refused():
    key = new_seal_key()
    short = base64.b64encode(os.urandom(16)).decode()
    for entry, problem in (
        ({**key.model_dump(), "kid": "k000"}, "does not match"),
        ({**key.model_dump(), "key": short}, "16 bytes"),
    ):
        text = json.dumps({"format": "phasegate-seal-ring/1", "keys": [entry]})
        with pytest.raises(PhasegateError, match=problem):
            parse_ring(text, "x")
