"""Evidence for ``phasegate submit`` from ``--file`` and ``--set``, checked before sending.

Everything a person can get wrong here (a binary file, invalid JSON, a list instead
of an object, evidence larger than any session accepts) is refused on this machine
with the flag and what to send instead, never a traceback and never a round trip.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from phasegate.domain.errors import PhasegateError
from phasegate.domain.limits import MAX_EVIDENCE_BYTES_LIMIT

__all__ = ["key_value", "read_evidence"]


def _json_or_text(value: str) -> Any:
    """``3`` -> 3, ``true`` -> True, ``["a"]`` -> ["a"]; anything else stays a string."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def key_value(item: str, flag: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise PhasegateError(f"expected key=value, got {item!r}", where=flag)
    return key.strip(), _json_or_text(value)


_EVIDENCE_FILE_LIMIT = 4 * MAX_EVIDENCE_BYTES_LIMIT  # read bound: indentation is not evidence


def _evidence_hint(session_id: str) -> str:
    return (
        'the evidence is one JSON object of the gate\'s fields, e.g. {"tests_run": 12}; '
        f"`phasegate phase {session_id}` lists the fields"
    )


def _evidence_bytes(file: str, hint: str) -> bytes:
    """The raw bytes of ``--file`` (``-``: stdin), bounded, without a traceback."""
    from phasegate.activities import _safe_read as safe_read

    if file == "-":
        return sys.stdin.buffer.read(_EVIDENCE_FILE_LIMIT + 1)
    try:
        return safe_read.read_bytes(
            Path(file).expanduser(),
            limit=_EVIDENCE_FILE_LIMIT,
            what="evidence file",
            hint=hint,
            size_hint=f"no session accepts evidence over {MAX_EVIDENCE_BYTES_LIMIT // 1024} KiB "
            "(as compact JSON): submit paths or summaries instead of whole files",
        )
    except FileNotFoundError:
        raise PhasegateError("no such file", where=f"--file {file}", hint=hint) from None
    except PhasegateError as exc:
        raise PhasegateError(exc.message, where=f"--file {file}", hint=exc.hint or hint) from None


def read_evidence(file: str | None, sets: list[str], session_id: str = "ID") -> dict[str, Any]:
    """Evidence from ``--file`` then ``--set``: refused here, before connecting, when it
    is not a JSON object or is larger than any session accepts.

    Raises:
        PhasegateError: Naming ``--file PATH`` (line and column for bad JSON) and what
            to send instead.
    """
    from phasegate.domain.session.state import evidence_size

    hint = _evidence_hint(session_id)
    evidence: dict[str, Any] = {}
    if file:
        where = "--file -" if file == "-" else f"--file {file}"
        data = _evidence_bytes(file, hint)
        if len(data) > _EVIDENCE_FILE_LIMIT:
            raise PhasegateError(
                f"more than {_EVIDENCE_FILE_LIMIT // 1024} KiB on stdin", where=where, hint=hint
            )
        if b"\x00" in data:
            raise PhasegateError(
                f"binary data, not JSON (a NUL byte at offset {data.index(0)})",
                where=where,
                hint=hint,
            )
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PhasegateError(
                f"binary data, not JSON text (byte {data[exc.start]:#04x} at offset {exc.start} "
                "is not UTF-8)",
                where=where,
                hint=hint,
            ) from None
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PhasegateError(
                f"invalid JSON: {exc.msg} (column {exc.colno})",
                where=f"{where}:{exc.lineno}",
                hint=hint,
            ) from None
        except RecursionError:
            raise PhasegateError("JSON nested too deeply", where=where, hint=hint) from None
        if not isinstance(parsed, dict):
            kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
            what = kind.get(type(parsed), "a number")
            raise PhasegateError(
                f"the evidence must be a JSON object, not {what}", where=where, hint=hint
            )
        evidence.update(parsed)
    evidence.update(key_value(item, "--set") for item in sets)
    size = evidence_size(evidence)
    if size > MAX_EVIDENCE_BYTES_LIMIT:
        raise PhasegateError(
            f"the evidence is {size // 1024} KiB as compact JSON; no session accepts more "
            f"than {MAX_EVIDENCE_BYTES_LIMIT // 1024} KiB",
            where=f"--file {file}" if file else "--set",
            hint="submit paths or summaries instead of whole files",
        )
    return evidence
