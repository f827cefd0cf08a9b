"""``verify`` check templates: the ``{{ ... }}`` slots a gate writes, and their filling.

``{{ evidence.<field> }}``, ``{{ session.id }}`` and ``{{ session.target }}`` are
the only references allowed, optionally typed (``| path``, ``| name``, ``| int``);
:func:`typed_refs` checks a string's references when the gate loads, :func:`render`
fills them when a check runs, each value checked against its slot first
(``domain/verify_contain.py``). Re-exported by ``domain.verify``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from phasegate.domain.verify_contain import ARG_TYPES, Slot, typed_value

__all__ = ["TEMPLATE_HINT", "render", "template_refs", "typed_refs"]

_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_REFERENCE = re.compile(
    r"^\s*(evidence\.[A-Za-z][A-Za-z0-9_]*|session\.(?:id|target))\s*(?:\|\s*(\S*)\s*)?$"
)
TEMPLATE_HINT = (
    "use {{ evidence.<field> }}, {{ session.id }} or {{ session.target }}, optionally typed: "
    "{{ evidence.<field> | path }} (or | name, | int)"
)


def template_refs(text: str) -> list[str]:
    """The references in ``text``, e.g. ``["evidence.coverage"]`` (types left off).

    Args:
        text: A string from a check.

    Returns:
        The references in order of appearance.

    Raises:
        ValueError: A ``{{ ... }}`` holds anything but an allowed reference (with
            an optional ``| path``/``| name``/``| int``), or the text has
            ``{%``/``{#`` blocks or an unclosed ``{{``.
    """
    return [ref for ref, _ in typed_refs(text)]


def typed_refs(text: str) -> list[tuple[str, str | None]]:
    """Like :func:`template_refs`, with each reference's declared type (or None)."""
    refs = []
    for match in _TEMPLATE.finditer(text):
        ref = _REFERENCE.match(match.group(1))
        if ref is None:
            raise ValueError(f"unsupported template reference {match.group(0)!r}")
        if ref.group(2) is not None and ref.group(2) not in ARG_TYPES:
            raise ValueError(
                f"unsupported template reference {match.group(0)!r}: unknown type "
                f"{ref.group(2)!r} (types: {', '.join(ARG_TYPES)})"
            )
        refs.append((ref.group(1), ref.group(2)))
    rest = _TEMPLATE.sub("", text)
    for token in ("{{", "}}", "{%", "{#"):
        if token in rest:
            raise ValueError(f"unsupported template syntax {token!r} (only {{{{ ... }}}})")
    return refs


def render(
    text: str,
    evidence: Mapping[str, Any],
    session: Mapping[str, str],
    *,
    quote: Callable[[str], str] | None = None,
    slot: Slot = "text",
    resolve_path: Callable[[str], str] | None = None,
) -> tuple[str, list[str]]:
    """Fill the references in ``text`` (already checked by :func:`parse_checks`).

    Args:
        text: A templated string from a check.
        evidence: The submitted evidence.
        session: ``{"id": ..., "target": ...}``.
        quote: Applied to each substituted value (``re.escape`` for a regex).
        slot: Where the text lands (``"argv"``, ``"path"`` or ``"text"``): decides
            the rule an untyped value must meet (``verify_contain.typed_value``).
        resolve_path: Resolves a ``| path`` value inside the workspace.

    Returns:
        The text, and the references that had no value (missing, null or
        empty); when that list is not empty the text must not be used.

    Raises:
        EvidenceRefused: A value breaks its slot's rule or declared type.
    """
    missing: list[str] = []

    def fill(match: re.Match[str]) -> str:
        ref = _REFERENCE.match(match.group(1))
        if ref is None:  # not validated: leave it, report it
            missing.append(match.group(0))
            return match.group(0)
        scope, _, name = ref.group(1).partition(".")
        value = (evidence if scope == "evidence" else session).get(name)
        if value is None or value == "":
            missing.append(ref.group(1))
            return ""
        text_value = typed_value(ref.group(1), value, ref.group(2), slot, resolve_path)
        return quote(text_value) if quote else text_value

    return _TEMPLATE.sub(fill, text), missing
