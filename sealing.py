"""Sealed prefetch: the next phase stored in history encrypted with a key only workers hold.

A session prefetches its next phase so that an advance needs no activity round trip;
the prefetch's result lands in the workflow's history, which anyone with a Temporal
client (threat level 2) can read. Where the deployment configures a **seal key ring**
(``PHASEGATE_SEAL_KEYS``: the path of a ring file, ``phasegate keys seal-new``), that
result is a :class:`~phasegate.domain.session.sealed.SealedPhase` and this module's
payload converter stores it AES-256-GCM encrypted:

- payload ``encoding`` ``binary/phasegate-sealed``, metadata ``phasegate-seal-kid`` (the
  key's id, derived from the key), data = 12-byte nonce + ciphertext + tag; the
  plaintext names the session (namespace, workflow id) and the phase index, which the
  workflow checks before it takes the phase (a payload replayed from another session
  or phase is refused);
- the first key of the ring seals, every key opens: rotate by putting a new key first
  and keeping the old ones until no open session's run began before the rotation;
- every other payload is the pydantic converter's JSON, unchanged, so a client without
  the key (an agent's) works as before and reads no future phase; a stock converter
  cannot decode a sealed payload at all.

Why a payload converter and not a codec: only the one type is sealed, the decision
whether a prefetch was opened is a value the workflow branches on (a payload that does
not authenticate is a cache miss, the phase is rendered at the advance) rather than a
codec error that fails the workflow task, and no codec runs over every other payload.
Determinism: whether a sealed payload opens depends only on the payload and the key
its id names (ids are derived from the key), so every worker holding that key decides
alike on replay. A worker without the key cannot replay such a session at all: it
fails the workflow task with :class:`SealKeyMissing` (what to do in its hint) and the
session resumes by itself once a worker with the key runs it.

Operators read sealed payloads with the key: ``phasegate history`` in a shell that has
``PHASEGATE_SEAL_KEYS``, or the Web UI and ``temporal workflow show`` through
``phasegate codec-server`` (:func:`reveal` is what its ``/decode`` returns).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
)

from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import PhaseDefinition
from phasegate.domain.session.sealed import SealedPhase

__all__ = [
    "RING_FORMAT",
    "SEALED_ENCODING",
    "KeyRing",
    "SealKey",
    "SealKeyMissing",
    "SealingPayloadConverter",
    "data_converter",
    "is_sealed",
    "load_ring",
    "new_seal_key",
    "open_sealed",
    "parse_ring",
    "reveal",
    "ring_of",
    "seal",
    "sealing_client",
    "with_ring",
]

SEALED_ENCODING = "binary/phasegate-sealed"
RING_FORMAT = "phasegate-seal-ring/1"
_ENCODING = SEALED_ENCODING.encode()
_META_KID = "phasegate-seal-kid"
_AAD = b"phasegate-seal/1\x00"
_NONCE = 12
_TAG = 16
_ENV = "PHASEGATE_SEAL_KEYS"


class SealKeyMissing(PhasegateError):
    """A sealed payload names a key this process does not hold."""

    code = "seal_key_missing"


class SealKey(BaseModel):
    """One AES-256 key of a ring: ``key`` is 32 bytes, standard base64."""

    kid: str
    key: str
    created: str = ""

    @property
    def raw(self) -> bytes:
        return base64.b64decode(self.key, validate=True)


class _Plain(BaseModel):
    """What a sealed payload encrypts."""

    namespace: str
    workflow_id: str
    index: int
    phase: PhaseDefinition | None = None
    ahead: list[PhaseDefinition] = Field(default_factory=list)
    problem: str = ""


def kid_for(raw: bytes) -> str:
    """A key's id: derived from the key, so one id always names the same key."""
    return "k" + hashlib.sha256(b"phasegate-seal-kid\x00" + raw).hexdigest()[:15]


def new_seal_key(now: datetime | None = None) -> SealKey:
    """A fresh random AES-256 key."""
    raw = os.urandom(32)
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return SealKey(kid=kid_for(raw), key=base64.b64encode(raw).decode(), created=when)


class KeyRing:
    """Seal keys, the first one sealing, every one opening.

    Args:
        keys: At least one; ids must match their keys.
        source: Where the ring came from (named in errors).
    """

    def __init__(self, keys: Sequence[SealKey], source: str = _ENV) -> None:
        if not keys:
            raise ValueError("a seal key ring needs at least one key")
        self.keys = list(keys)
        self.source = source
        self._ciphers = {k.kid: AESGCM(k.raw) for k in self.keys}

    @property
    def sealing(self) -> SealKey:
        return self.keys[0]

    @property
    def kids(self) -> list[str]:
        return [k.kid for k in self.keys]

    def cipher(self, kid: str) -> AESGCM | None:
        return self._ciphers.get(kid)

    def to_json(self) -> str:
        keys = [k.model_dump() for k in self.keys]
        return json.dumps({"format": RING_FORMAT, "keys": keys}, indent=2) + "\n"


def parse_ring(text: str, where: str) -> KeyRing:
    """A ring from its file's text.

    Raises:
        PhasegateError: not a ring, a key that is not 32 bytes, an id that does not match.
    """
    hint = "create a ring with `phasegate keys seal-new FILE` and point PHASEGATE_SEAL_KEYS at it"
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != RING_FORMAT:
            raise ValueError(f'not a seal key ring (no "format": "{RING_FORMAT}")')
        keys = [SealKey.model_validate(item) for item in data.get("keys") or []]
        if not keys:
            raise ValueError("the ring holds no key")
        for key in keys:
            raw = key.raw
            if len(raw) != 32:
                raise ValueError(f"key {key.kid} is {len(raw)} bytes; AES-256 needs 32")
            if kid_for(raw) != key.kid:
                raise ValueError(f"key {key.kid}: the id does not match the key (edited?)")
        if len({k.kid for k in keys}) != len(keys):
            raise ValueError("a key appears twice")
    except (ValueError, TypeError) as exc:  # JSON, base64 and pydantic errors included
        raise PhasegateError(
            f"cannot load the seal key ring: {str(exc).splitlines()[0]}", where=where, hint=hint
        ) from None
    return KeyRing(keys, where)


def load_ring(path: str | Path, where: str | None = None) -> KeyRing:
    """Read a ring file; a file others may read is refused (it holds secret keys).
    ``where`` names it in errors (default ``PHASEGATE_SEAL_KEYS=path``).

    Raises:
        PhasegateError: unreadable, readable by every user, or not a ring.
    """
    where = where or f"{_ENV}={path}"
    try:
        info = os.stat(path)
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PhasegateError(
            f"cannot read the seal key ring: {getattr(exc, 'strerror', None) or exc}",
            where=where,
            hint="point PHASEGATE_SEAL_KEYS at the ring file (`phasegate keys seal-new FILE` "
            "makes one), readable by the worker's user",
        ) from None
    if os.name == "posix" and info.st_mode & stat.S_IROTH:
        raise PhasegateError(
            "the seal key ring is readable by every user (an agent running as another user "
            "could read the keys)",
            where=where,
            hint=f"chmod 600 {path} (or 640 with a group only the workers share)",
        )
    return parse_ring(text, where)


# ---------------------------------------------------------------- seal and open


def is_sealed(payload: Payload) -> bool:
    return payload.metadata.get("encoding") == _ENCODING


def sealed_kid(payload: Payload) -> str:
    """The key id a sealed payload names ("" if none)."""
    return payload.metadata.get(_META_KID, b"").decode("utf-8", "replace")


def seal(ring: KeyRing, value: SealedPhase) -> Payload:
    """``value`` encrypted with the ring's sealing key."""
    key = ring.sealing
    cipher = ring.cipher(key.kid)
    assert cipher is not None
    plain = _Plain(
        namespace=value.namespace,
        workflow_id=value.workflow_id,
        index=value.index,
        phase=value.phase,
        ahead=value.ahead,
        problem=value.problem,
    )
    nonce = os.urandom(_NONCE)
    data = cipher.encrypt(nonce, plain.model_dump_json().encode(), _AAD + key.kid.encode())
    return Payload(metadata={"encoding": _ENCODING, _META_KID: key.kid.encode()}, data=nonce + data)


def _missing(ring: KeyRing | None, kid: str) -> SealKeyMissing:
    held = (
        f"this process's ring ({ring.source}) holds {', '.join(ring.kids)}"
        if ring is not None
        else f"this process has no seal key ring ({_ENV} is unset)"
    )
    return SealKeyMissing(
        f"a payload is sealed with seal key {kid or '(none named)'!r}; {held}",
        where=_ENV,
        hint="give this process the ring that holds that key (keep retired keys in the ring: "
        "they only open; `phasegate keys seal-list FILE` lists them); a session waiting on it "
        "resumes by itself once a worker holding the key runs it, nothing is lost",
    )


def _plain_of(ring: KeyRing | None, payload: Payload) -> tuple[_Plain | None, str, str]:
    """Decrypt: (plaintext or None, key id, why not).

    Raises:
        SealKeyMissing: the payload names a key the ring does not hold.
    """
    kid = sealed_kid(payload)
    cipher = ring.cipher(kid) if ring is not None else None
    if cipher is None:
        raise _missing(ring, kid)
    data = payload.data
    if len(data) < _NONCE + _TAG:
        return None, kid, "a sealed payload too short to hold anything: refused"
    try:
        # In a workflow's sandbox, a failed tag makes cryptography import its exception
        # module: it must be the real one (a sandbox re-import aborts the process).
        with workflow.unsafe.imports_passed_through():
            text = cipher.decrypt(data[:_NONCE], data[_NONCE:], _AAD + kid.encode())
        return _Plain.model_validate_json(text), kid, ""
    except InvalidTag:
        return None, kid, f"a sealed payload that does not authenticate under key {kid}: refused"
    except ValidationError:  # authentic but not a phase: only a bug on the sealing side
        return None, kid, f"a payload sealed under key {kid} holds no phase: refused"


def open_sealed(ring: KeyRing | None, payload: Payload) -> SealedPhase:
    """The ``SealedPhase`` a sealed payload holds, opened, or with the reason it was not.

    Raises:
        SealKeyMissing: the payload names a key the ring does not hold (only a key holder
            may decide whether it opens: see the module docstring).
    """
    plain, kid, why = _plain_of(ring, payload)
    if plain is None:
        return SealedPhase(problem=why)
    opened = SealedPhase(
        namespace=plain.namespace,
        workflow_id=plain.workflow_id,
        index=plain.index,
        phase=plain.phase,
        ahead=plain.ahead,
        problem=plain.problem,
    )
    return opened.mark_opened(kid)


def reveal(ring: KeyRing | None, payload: Payload) -> Payload:
    """What an operator sees of a payload (the codec server's ``/decode``): a sealed one
    as ``json/plain`` (its plaintext and the key that sealed it, or a note saying why it
    cannot be shown); any other payload unchanged."""
    if not is_sealed(payload):
        return payload
    kid = sealed_kid(payload)
    try:
        plain, kid, why = _plain_of(ring, payload)
    except SealKeyMissing as exc:
        plain, why = None, f"{exc} ({exc.hint})"
    shown: dict[str, Any] = {"sealed_with": kid}
    shown.update(plain.model_dump(mode="json") if plain is not None else {"not_shown": why})
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(shown).encode())


# ---------------------------------------------------------------- the data converter


@functools.lru_cache(maxsize=1024)
def _adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


class _SharedAdaptersJSON(PydanticJSONPlainPayloadConverter):
    """pydantic's JSON converter with one ``TypeAdapter`` cache for the process.

    The SDK builds a payload converter per workflow instance, each with its own cache, so
    every orchestration rebuilt pydantic-ai's ``ModelResponse`` adapter on its first
    model answer (40-55 ms holding the GIL, and again on every replay)."""

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        hint: Any = type_hint if type_hint is not None else Any
        try:
            adapter = _adapter(hint)
        except TypeError:
            try:
                hash(hint)
            except TypeError:  # an unhashable hint: no cache
                adapter = TypeAdapter(hint)
            else:
                raise
        return adapter.validate_json(payload.data)


def _agents_json() -> EncodingPayloadConverter:
    """pydantic-ai's JSON converter: it decodes the agents' journal with the validation
    context pydantic-ai expects, and memoizes adapters. Imported here, not at the top: a
    CLI must not pay pydantic-ai's import."""
    with workflow.unsafe.imports_passed_through():
        from pydantic_ai.durable_exec.temporal import PydanticAIPayloadConverter
    json_converter: EncodingPayloadConverter = PydanticAIPayloadConverter().converters[
        b"json/plain"
    ]
    return json_converter


@functools.cache
def _encoding_converters(agents: bool) -> tuple[EncodingPayloadConverter, ...]:
    """The encoding converters every :class:`SealingPayloadConverter` of a process uses
    (they hold no state but their adapter caches, which gain from being shared).

    The SDK builds a payload converter at least three times per workflow activation (for
    its serialization contexts): building pydantic-ai's JSON converter each time took
    38 us on a quiet machine, and py-spy put 11% of the worker's GIL-held samples there
    at 200 concurrent agents (2026-11); with these shared, a converter is built in 2 us."""
    shared = _agents_json() if agents else _SharedAdaptersJSON()
    return tuple(
        shared if isinstance(c, JSONPlainPayloadConverter) else c
        for c in DefaultPayloadConverter.default_encoding_payload_converters
    )


class SealingPayloadConverter(PydanticPayloadConverter):
    """The pydantic converter, sealing :class:`SealedPhase` values with :attr:`ring`.

    Without a ring a ``SealedPhase`` is written without its phase (never in clear) and a
    sealed payload cannot be read (:class:`SealKeyMissing`). A ``SealedPhase`` read from
    anything but a sealed payload is not opened, whatever its JSON says.
    """

    ring: ClassVar[KeyRing | None] = None
    agents: ClassVar[bool] = False
    """Decode JSON with pydantic-ai's converter (a worker that runs agents, and its
    replayers), else with :class:`_SharedAdaptersJSON`. A class attribute, fixed when the
    data converter is made: the SDK builds the converter again inside workflow code."""

    def __init__(self) -> None:
        CompositePayloadConverter.__init__(self, *_encoding_converters(self.agents))

    def to_payloads(self, values: Sequence[Any]) -> list[Payload]:
        if not any(isinstance(v, SealedPhase) for v in values):
            return super().to_payloads(values)
        return [self._to_payload(v) for v in values]

    def _to_payload(self, value: Any) -> Payload:
        if not isinstance(value, SealedPhase):
            return super().to_payloads([value])[0]
        if self.ring is not None:
            return seal(self.ring, value)
        if value.phase is not None:  # the phase is never serialized; say why it is missing
            value = value.model_copy(
                update={"problem": f"not sealed: this worker holds no seal key ring ({_ENV})"}
            )
        return super().to_payloads([value])[0]

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        hints = list(type_hints or [])
        if SealedPhase not in hints and not any(is_sealed(p) for p in payloads):
            return super().from_payloads(payloads, type_hints)
        hints += [None] * (len(payloads) - len(hints))  # type: ignore[list-item]
        return [self._from_payload(p, hint) for p, hint in zip(payloads, hints, strict=False)]

    def _from_payload(self, payload: Payload, hint: type | None) -> Any:
        if is_sealed(payload):
            return open_sealed(self.ring, payload)
        if hint is not SealedPhase:
            return super().from_payloads([payload], [hint] if hint else None)[0]
        # Not sealed: never opened, and never an error that would fail the session (a
        # rogue answer to the prefetch activity is only a cache miss).
        try:
            found = super().from_payloads([payload], [SealedPhase])[0]
        except Exception as exc:  # noqa: BLE001 - anything unreadable is only "not opened"
            found = SealedPhase(problem=f"not a sealed phase ({type(exc).__name__})")
        if not isinstance(found, SealedPhase):  # e.g. a null payload
            found = SealedPhase(problem="not a sealed phase")
        if self.ring is not None and not found.problem:
            found.problem = "an unsealed prefetch where the worker holds a seal key: refused"
        return found


def data_converter(ring: KeyRing | None, *, agents: bool = False) -> DataConverter:
    """phasegate's data converter: pydantic JSON, and :class:`SealedPhase` sealed with
    ``ring`` (None: no key in this process; nothing is sealed or opened); ``agents``: the
    JSON of pydantic-ai's agents decoded as pydantic-ai does (workers and replayers)."""
    if ring is None and not agents:
        return DataConverter(payload_converter_class=SealingPayloadConverter)
    bound = type(
        "BoundSealingPayloadConverter",
        (SealingPayloadConverter,),
        {"ring": ring, "agents": agents},
    )
    return DataConverter(payload_converter_class=bound)


def ring_of(converter: DataConverter) -> KeyRing | None:
    """The seal key ring a data converter holds (None: none, or not phasegate's)."""
    cls = converter.payload_converter_class
    return cls.ring if isinstance(cls, type) and issubclass(cls, SealingPayloadConverter) else None


def with_ring(client: Client, ring: KeyRing | None, *, agents: bool = False) -> Client:
    """``client`` (same connection) whose converter holds ``ring`` (and decodes agents'
    JSON as pydantic-ai does with ``agents``); itself if it already does."""
    ring = ring or ring_of(client.data_converter)
    cls = client.data_converter.payload_converter_class
    runs_agents = isinstance(cls, type) and issubclass(cls, SealingPayloadConverter) and cls.agents
    if ring_of(client.data_converter) is ring and (runs_agents or not agents):
        return client
    bound = data_converter(ring, agents=agents or bool(runs_agents)).payload_converter_class
    config = client.config()  # the client's codec and failure converter are kept
    config["data_converter"] = dataclasses.replace(
        client.data_converter, payload_converter_class=bound
    )
    return Client(**config)


def sealing_client(client: Client, seal_keys_file: str | None) -> Client:
    """The client a session worker runs on: ``client``, holding the ring of
    ``seal_keys_file`` when it names one (else whatever ring the client holds), its
    converter decoding the agents' JSON as pydantic-ai does.

    Raises:
        PhasegateError: the ring file cannot be read or is not a ring.
    """
    ring = load_ring(seal_keys_file) if seal_keys_file else None
    return with_ring(client, ring, agents=True)
