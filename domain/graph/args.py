"""Whether a value fits an :class:`~phasegate.domain.graph.model.Arg` (a run parameter
or a step-state field): its type, range and choices. Pure."""

from __future__ import annotations

from typing import Any

from phasegate.domain.graph.model import Arg

__all__ = ["arg_problem", "type_of"]

_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
}


def type_of(arg: Arg, value: Any) -> bool:
    """Whether ``value`` has the arg's type (a bool is not an int here)."""
    if isinstance(value, bool) and arg.type != "bool":
        return False
    return isinstance(value, _TYPES[arg.type])


def arg_problem(arg: Arg, value: Any) -> str | None:
    """Why ``value`` does not fit ``arg``, or None."""
    if value is None:
        return "a value is required" if arg.required else None
    if not type_of(arg, value):
        return f"expected {arg.type}, got {type(value).__name__} {value!r:.60}"
    if arg.choices is not None and value not in arg.choices:
        return f"{value!r:.60} is not one of {', '.join(map(repr, arg.choices))}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if arg.min is not None and value < arg.min:
            return f"{value} is below the minimum {arg.min:g}"
        if arg.max is not None and value > arg.max:
            return f"{value} is above the maximum {arg.max:g}"
    if isinstance(value, str) and len(value) > 10_000:
        return "a text over 10,000 characters"
    return None
