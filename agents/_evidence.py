"""Evidence a phase accepts: its documented example, completed from its gate's schema.

Production code (the scripted coding agent, :mod:`phasegate.agents.scripted`, builds
its evidence with it); ``phasegate.testing`` re-exports both functions.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from phasegate.activities.definitions import example_evidence as documented_example
from phasegate.domain.errors import ExpressionError
from phasegate.domain.expressions import CompiledExpression, compile_expression
from phasegate.domain.session.messages import GateField, PhaseView

__all__ = ["complete_evidence", "example_evidence"]


def example_evidence(view: PhaseView) -> dict[str, Any]:
    """The evidence example the phase documents (``view.example_evidence``, else the one
    its content shows under an Evidence/Example heading), or ``{}``."""
    if view.example_evidence is not None:
        return dict(view.example_evidence)
    text = documented_example(view.content)
    data = json.loads(text) if text else {}
    return data if isinstance(data, dict) else {}


def complete_evidence(evidence: Mapping[str, Any], view: PhaseView) -> dict[str, Any]:
    """``evidence`` plus a valid value for every required gate field it lacks, built from
    the field's JSON Schema (type, bounds, lengths, enum); ``tasks_completed`` lists the
    phase's task ids, as an honest agent that did every task would."""
    out = dict(evidence)
    for name, field in view.gate.fields.items():
        if name not in out and field.required:
            out[name] = _value_for(name, _schema(field))
    if "tasks_completed" in view.gate.fields and view.tasks:
        out["tasks_completed"] = [t.id for t in view.tasks]
    return out


def _schema(field: GateField) -> dict[str, Any]:
    schema = getattr(field, "json_schema", None)
    if isinstance(schema, dict) and schema:
        return schema
    kinds = {"list": "array", "dict": "object"}
    return {"type": kinds.get(field.type, field.type)}


def _value_for(name: str, schema: Mapping[str, Any]) -> Any:
    value = _plain_value_for(name, schema)
    validator = schema.get("x-phasegate-validator")
    if isinstance(validator, Mapping) and validator.get("expr"):
        return _satisfying(str(validator["expr"]), dict(validator.get("params") or {}), value)
    return value


@functools.lru_cache(maxsize=256)
def _parsed(expr: str) -> tuple[CompiledExpression, tuple[Any, ...]] | None:
    """The validator compiled, and its literals; None if it does not compile. Kept: an
    agent meets the same validators again and again (200 scripted agents parsing them
    anew for every submission spent 17% of their process's time building evidence,
    bench/concurrent_agents.py)."""
    try:
        check = compile_expression(expr)
        literals = tuple(
            node.value
            for node in ast.walk(ast.parse(expr, mode="eval"))
            if isinstance(node, ast.Constant) and node.value is not None
        )
    except (ExpressionError, SyntaxError):
        return None
    return check, literals


def _satisfying(expr: str, params: dict[str, Any], default: Any) -> Any:
    """A value the field's lambda validator accepts: the default, else a literal of the
    expression or a number next to one (``x == 'high'``, ``x >= 5``, ``x < 0.3``)."""
    parsed = _parsed(expr)
    if parsed is None:
        return default
    check, literals = parsed
    numbers = [v for v in params.values() if isinstance(v, (int, float))]
    candidates = [default, *literals, *numbers]
    if isinstance(default, list):  # len(x) >= N: as many items as the literals ask for
        candidates += [
            [*default, *(f"item-{i}" for i in range(int(n)))]
            for n in literals
            if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 1000
        ]
    for lit in [*literals, *numbers]:
        if isinstance(lit, (int, float)) and not isinstance(lit, bool):
            candidates += [lit + 1, lit / 2, lit - 1, lit * 2]
    return next((c for c in candidates if _accepts(check, c, params)), default)


def _accepts(check: Callable[..., Any], candidate: Any, params: dict[str, Any]) -> bool:
    try:
        return bool(check(candidate, **params))
    except ExpressionError:  # e.g. a candidate of the wrong type for the expression
        return False


def _plain_value_for(name: str, schema: Mapping[str, Any]) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if kind == "boolean":
        return True
    if kind in ("integer", "number"):
        low = schema.get("minimum", 1)
        high = schema.get("maximum")
        value = max(low, 1) if high is None or high >= 1 else low
        return int(value) if kind == "integer" else float(value)
    if kind == "array":
        return [f"{name}-{i}" for i in range(1, max(schema.get("minItems", 1), 1) + 1)]
    if kind == "object":
        return {"status": "ok"}
    text = f"{name.replace('_', ' ')}: done and checked against the phase's tasks"
    return text.ljust(schema.get("minLength", 0), ".")
