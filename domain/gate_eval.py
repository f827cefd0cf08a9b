"""Checking evidence against a gate (``evaluate_gate``): pure, deterministic, never raises.

Evaluation order: schema fields in file order (required, type, enum, min, max,
min_length, max_length, pattern, validator), then rules in file order. A missing
(or null) required field and a wrong type always block; the other checks block
when ``strict`` and are warnings otherwise. ``pattern`` uses :func:`re.search`, on at
most :data:`MAX_PATTERN_TEXT` characters (longer values fail the rule).
The gate models and their loading are in :mod:`phasegate.domain.gates`.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

from phasegate.domain.errors import ExpressionError
from phasegate.domain.gates import (
    NUMERIC_TYPES,
    SIZED_TYPES,
    FieldSpec,
    GateDefinition,
    GateEvaluation,
    GateRule,
    Problem,
    clip_text,
    compiled_expression,
    kind_of,
    number_text,
    short_text,
)

__all__ = ["evaluate_gate"]

MAX_PATTERN_TEXT = 4096
"""Characters a ``pattern`` is matched against (``re.search`` can be quadratic)."""

_TYPE_WORDS = {"boolean": "boolean (true/false)", "integer": "whole number",
               "number": "finite number", "string": "string", "list": "list",
               "dict": "mapping (object)"}  # fmt: skip


def evaluate_gate(gate: GateDefinition, evidence: dict[str, Any]) -> GateEvaluation:
    """Check evidence against a gate. Pure, deterministic, never raises.

    Args:
        gate: The gate to check.
        evidence: Field name to submitted value (JSON-like). Extra fields do not block;
            each gets a warning naming the closest declared field.

    Returns:
        ``passed`` is true when there are no problems. ``problems`` block;
        ``warnings`` (check failures of a ``strict: false`` gate) do not.
    """
    if not isinstance(evidence, dict):
        message = "Evidence must be an object mapping field names to values."
        problem = _problem("", "type", "an object of field: value", _got(evidence), message)
        return GateEvaluation(passed=False, problems=[problem])
    problems: list[Problem] = []
    warnings: list[Problem] = []
    soft = problems if gate.strict else warnings
    unusable: set[str] = set()
    for name, spec in gate.fields.items():
        try:
            hard, checks = _check_field(gate, name, spec, evidence)
        except Exception as exc:  # noqa: BLE001 - a gate must answer, never crash a workflow
            hard, checks = [_crashed(name, "internal", "", exc, f"Field '{name}'")], []
        problems += hard
        soft += checks
        if hard or evidence.get(name) is None:
            unusable.add(name)
    for rule in gate.rules:
        try:
            failure = _check_rule(rule, evidence, unusable)
        except Exception as exc:  # noqa: BLE001
            failure = _crashed("", f"rule:{rule.name}", rule.expr, exc, f"Rule '{rule.name}'")
        if failure:
            soft.append(failure)
    warnings += _unknown_fields(gate, evidence)
    return GateEvaluation(passed=not problems, problems=problems, warnings=warnings)


MAX_UNKNOWN_WARNINGS = 10
"""Unknown evidence fields named one by one; the rest are counted."""


def _unknown_fields(gate: GateDefinition, evidence: dict[str, Any]) -> list[Problem]:
    """A warning per evidence field the gate does not declare, naming the closest
    declared one (a typo would otherwise be ignored without a word). None when the
    gate declares no field (any evidence is its own)."""
    if not gate.fields:
        return []
    unknown = [name for name in evidence if name not in gate.fields]
    out = []
    for name in unknown[:MAX_UNKNOWN_WARNINGS]:
        shown = str(name) if len(str(name)) <= 80 else str(name)[:79] + "…"
        close = difflib.get_close_matches(str(name)[:80], list(gate.fields), n=1, cutoff=0.6)
        hint = (
            f"did you mean '{close[0]}'?"
            if close
            else f"the gate's fields are: {clip_text(', '.join(gate.fields))}"
        )
        message = f"'{shown}' is not a field of this gate and was not checked; {hint}"
        out.append(_problem(shown, "unknown_field", close[0] if close else "", "", message))
    if len(unknown) > MAX_UNKNOWN_WARNINGS:
        more = len(unknown) - MAX_UNKNOWN_WARNINGS
        message = f"{more} more field(s) the gate does not declare were not checked"
        out.append(_problem("", "unknown_field", "", str(more), message))
    return out


def _check_field(
    gate: GateDefinition, name: str, spec: FieldSpec, evidence: dict[str, Any]
) -> tuple[list[Problem], list[Problem]]:
    """Returns (problems that always block, failures that block only when strict)."""
    value = evidence.get(name)
    about = f" ({spec.description})" if spec.description else ""
    field_is = f" The field is: {spec.description}" if spec.description else ""
    if value is None:
        got = "missing" if name not in evidence else "null"
        message = f"Required field '{name}' is {got}; provide a {_TYPE_WORDS[spec.type]}{about}."
        return ([_problem(name, "required", spec.type, got, message)] if spec.required else []), []
    if not _type_ok(spec.type, value):
        message = f"'{name}' must be a {_TYPE_WORDS[spec.type]}{about}; got {kind_of(value)}."
        return [_problem(name, "type", spec.type, _got(value), message)], []
    failures: list[Problem] = []

    def fail(rule: str, expected: str, message: str) -> None:
        failures.append(
            _problem(name, rule, expected, short_text(value), f"'{name}' {message}.{field_is}")
        )

    size = len(value) if spec.type in SIZED_TYPES else 0
    unit = "character(s)" if spec.type == "string" else "item(s)"
    if spec.enum is not None and not any(_same(value, option) for option in spec.enum):
        fail("enum", f"one of {short_text(spec.enum)}", f"must be one of {short_text(spec.enum)}")
    if spec.min is not None and value < spec.min:
        fail("min", f">= {number_text(spec.min)}", f"must be at least {number_text(spec.min)}")
    if spec.max is not None and value > spec.max:
        fail("max", f"<= {number_text(spec.max)}", f"must be at most {number_text(spec.max)}")
    if spec.min_length is not None and size < spec.min_length:
        n = spec.min_length
        fail("min_length", f"length >= {n}", f"must have at least {n} {unit} (has {size})")
    if spec.max_length is not None and size > spec.max_length:
        n = spec.max_length
        fail("max_length", f"length <= {n}", f"must have at most {n} {unit} (has {size})")
    if spec.pattern is not None and len(value) > MAX_PATTERN_TEXT:
        # re.search is quadratic in the text for patterns like \d+ x: bounded, so a gate
        # check stays far under the workflow task's 2 s deadline whatever is sent.
        fail(
            "pattern",
            f"matches /{spec.pattern}/",
            f"is {len(value):,} characters; a pattern is matched against at most "
            f"{MAX_PATTERN_TEXT:,}: submit the line that matters (e.g. the test summary)",
        )
    elif spec.pattern is not None and not re.search(spec.pattern, value):
        fail("pattern", f"matches /{spec.pattern}/", f"must match the pattern /{spec.pattern}/")
    if spec.validator:
        vname = spec.validator
        text = gate.validators.get(vname, "")
        try:
            compiled = compiled_expression(text)
            extra = compiled.params[1:]
            kwargs = {k: v for k, v in spec.validator_params.items() if k in extra}
            if "params" in extra and "params" not in kwargs:
                kwargs["params"] = dict(spec.validator_params)
            ok = bool(compiled(value, **kwargs))
        except ExpressionError as exc:
            fail(f"validator:{vname}", text, f"could not be checked by '{vname}': {exc.message}")
        else:
            if not ok:
                fail(f"validator:{vname}", text, f"failed validator '{vname}' ({text})")
    return [], failures


def _check_rule(rule: GateRule, evidence: dict[str, Any], unusable: set[str]) -> Problem | None:
    """None when the rule holds or does not apply (a field it reads is missing or bad)."""
    expr = compiled_expression(rule.expr)
    when = compiled_expression(rule.when) if rule.when else None
    names = sorted(expr.names | (when.names if when else frozenset()))
    if any(n in unusable or n not in evidence for n in names):
        return None
    env = {n: evidence[n] for n in names}
    got = clip_text(", ".join(f"{n}={short_text(evidence[n])}" for n in names))
    try:
        if (when and not when(**env)) or expr(**env):
            return None
        message = rule.message or f"Rule '{rule.name}' failed: {rule.expr}."
    except ExpressionError as exc:
        message = f"Rule '{rule.name}' could not be checked: {exc.message}"
    return _problem(", ".join(names), f"rule:{rule.name}", rule.expr, got, message)


def _problem(name: str, rule: str, expected: str, got: str, message: str) -> Problem:
    return Problem(field=name, rule=rule, expected=expected, got=got, message=message)


def _crashed(name: str, rule: str, expected: str, exc: Exception, what: str) -> Problem:
    message = f"{what} could not be checked: {type(exc).__name__}: {clip_text(str(exc))}"
    return _problem(name, rule, expected, type(exc).__name__, message)


def _type_ok(ftype: str, value: Any) -> bool:
    if isinstance(value, bool):
        return ftype == "boolean"
    if ftype in NUMERIC_TYPES:
        return isinstance(value, int) or (
            ftype == "number" and isinstance(value, float) and math.isfinite(value)
        )
    return isinstance(value, {"boolean": bool, "string": str, "list": list, "dict": dict}[ftype])


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps ``True`` distinct from ``1`` (an enum of [1, 2] rejects true)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _got(value: Any) -> str:
    return clip_text(f"{kind_of(value)} {short_text(value)}")
