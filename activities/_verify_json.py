"""JSON lookups and comparisons for the ``json_value`` check (``activities/verify.py``)."""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from typing import Any

from phasegate.activities._verify_run import CheckFailed

__all__ = ["compare", "follow"]


def follow(data: Any, dotted: str, rel: str) -> Any:
    """The value at ``dotted`` (keys, list indexes as digits) in ``data`` read from ``rel``.

    Raises:
        CheckFailed: A key or index is missing, or a step meets a scalar.
    """
    node = data
    for depth, part in enumerate(dotted.split(".")):
        where = ".".join(dotted.split(".")[:depth]) or "the top level"
        if isinstance(node, dict):
            if part not in node:
                keys = ", ".join(map(str, list(node)[:10])) or "none"
                raise CheckFailed(f"{rel}: {where} has no key {part!r} (keys: {keys})")
            node = node[part]
        elif isinstance(node, list) and part.isdigit():
            if int(part) >= len(node):
                raise CheckFailed(f"{rel}: {where} has {len(node)} item(s), no index {part}")
            node = node[int(part)]
        else:
            kind = type(node).__name__
            raise CheckFailed(f"{rel}: cannot look up {part!r} in {where}, which is a {kind}")
    return node


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return float(value)
    return None


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge,
    ">": operator.gt, "<=": operator.le, "<": operator.lt,
}  # fmt: skip


def compare(actual: Any, op: str, expected: Any) -> bool | None:
    """Numbers (and numeric strings) compare numerically; None when it cannot compare."""
    a, b = _number(actual), _number(expected)
    if a is not None and b is not None:
        return _OPS[op](a, b)
    return _OPS[op](actual, expected) if op in ("==", "!=") else None
