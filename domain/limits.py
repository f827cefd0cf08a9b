"""Bounds of every input a client can send (re-exported by ``domain.messages``).

A message that breaks one is refused by the SDK before any handler runs: an
update is rejected and nothing reaches history. Pure values.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

__all__ = [
    "DEFAULT_MAX_EVIDENCE_BYTES",
    "MAX_EVIDENCE_BYTES_LIMIT",
    "MAX_ID_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_LIST_ITEMS",
    "MAX_NAME_CHARS",
    "MAX_OPTIONS_BYTES",
    "MAX_PATH_CHARS",
    "MAX_PHASE",
    "MAX_TEXT_CHARS",
    "RESERVED_PREFIX",
    "Name",
    "json_depth",
    "shallow",
]

DEFAULT_MAX_EVIDENCE_BYTES = 256 * 1024  # Temporal warns on payloads above 256 KB

MAX_NAME_CHARS = 128  # approver, actor and key names (as ApproverKey.name)
MAX_TEXT_CHARS = 2000  # comments, reasons
MAX_ID_CHARS = 128  # submission ids, task ids, workflow types
MAX_PATH_CHARS = 4096
MAX_PHASE = 10_000
MAX_EVIDENCE_BYTES_LIMIT = 512 * 1024  # highest max_evidence_bytes (carry must fit)
MAX_OPTIONS_BYTES = 64 * 1024  # a session's options as JSON, extra keys included
MAX_LIST_ITEMS = 64  # approvers, approver keys
# A prefetch renders the phases ahead while they fit (engine 2): one render serves a walk
# of small phases; Temporal warns on payloads above 256 KB (a phase alone may reach 512 KiB).
AHEAD_BYTES = 128 * 1024
MAX_AHEAD_BYTES = 256 * 1024  # recorded plans and carried state are checked against it
MAX_PHASES_AHEAD = 32  # phases in one window: a render (context included) each

RESERVED_PREFIX = "phasegate:"  # phasegate's own actors (``phasegate:deadline``)


def _printable(name: str) -> str:
    """Names are shown in audits and terminals: no control or invisible format characters."""
    bad = [c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    if bad:
        raise ValueError(f"names may not contain control or invisible characters ({bad[0]!r})")
    return name


Name = Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS), AfterValidator(_printable)]


MAX_JSON_DEPTH = 32
"""Deepest nesting of evidence and other free JSON (deeper data cannot be carried)."""


def json_depth(value: object, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply ``value`` nests (a scalar is 0), counted up to ``limit + 1``."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            todo.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, depth + 1) for v in item)
    return deepest


def shallow(value: dict[str, object]) -> dict[str, object]:
    """A validator: ``value`` unchanged, or refused when nested deeper than allowed."""
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(
            f"nested more than {MAX_JSON_DEPTH} levels deep; flatten it (paths and summaries, "
            "not structures)"
        )
    return value
