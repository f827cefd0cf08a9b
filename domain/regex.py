"""Regular expressions from workflow definitions: compiled and screened at load time."""

from __future__ import annotations

import re

__all__ = ["check_regex"]

# A group that repeats and is itself repeated, e.g. (a+)+ or (\w*)*: catastrophic
# backtracking on agent-supplied text would stall the workflow thread (and the GIL).
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}]\)[+*{]")


def check_regex(pattern: str) -> None:
    """Refuse a pattern that does not compile or nests quantifiers (ReDoS).

    Raises:
        ValueError: with what is wrong and what to write instead.
    """
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    if _NESTED_QUANTIFIER.search(pattern):
        raise ValueError(
            f"pattern {pattern!r} repeats a repeated group (like (a+)+), which can take "
            "exponential time on some inputs; use a single quantifier, e.g. (ab)+ or a+"
        )
