"""A gate's evidence contract as JSON Schema (draft 2020-12), for clients in any language.

Each gate field becomes a property with its type, bounds, length limits, pattern,
enum and description; required fields are listed in ``required``. What JSON
Schema cannot say is kept as ``x-phasegate-*`` keywords so nothing is hidden:
the field's lambda validator (``x-phasegate-validator``) and the gate's
cross-field rules (``x-phasegate-rules``). A ``pattern`` is matched like
``re.search`` (unanchored), which is also what JSON Schema's ``pattern`` means.
"""

from __future__ import annotations

from typing import Any

from phasegate.domain.gates import FieldSpec, GateDefinition

__all__ = ["describe_limits", "field_json_schema", "gate_json_schema"]

_JSON_TYPES = {
    "boolean": "boolean",
    "integer": "integer",
    "number": "number",
    "string": "string",
    "list": "array",
    "dict": "object",
}
_LENGTH_KEYWORDS = {
    "string": ("minLength", "maxLength"),
    "list": ("minItems", "maxItems"),
    "dict": ("minProperties", "maxProperties"),
}


def field_json_schema(spec: FieldSpec, validators: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON Schema of one evidence field.

    Args:
        spec: The field as the gate defines it.
        validators: The gate's named lambda validators (to show the field's one).
    """
    schema: dict[str, Any] = {"type": _JSON_TYPES[spec.type]}
    if spec.description:
        schema["description"] = spec.description
    if spec.min is not None:
        schema["minimum"] = _number(spec.min, spec.type)
    if spec.max is not None:
        schema["maximum"] = _number(spec.max, spec.type)
    low, high = _LENGTH_KEYWORDS.get(spec.type, ("", ""))
    if spec.min_length is not None and low:
        schema[low] = spec.min_length
    if spec.max_length is not None and high:
        schema[high] = spec.max_length
    if spec.pattern is not None:
        schema["pattern"] = spec.pattern
    if spec.enum is not None:
        schema["enum"] = list(spec.enum)
    if spec.validator:
        schema["x-phasegate-validator"] = {
            "name": spec.validator,
            "expr": (validators or {}).get(spec.validator, ""),
            **({"params": dict(spec.validator_params)} if spec.validator_params else {}),
        }
    return schema


def gate_json_schema(gate: GateDefinition) -> dict[str, Any]:
    """The JSON Schema of a whole evidence object for ``gate``."""
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            name: field_json_schema(spec, gate.validators) for name, spec in gate.fields.items()
        },
        "required": [name for name, spec in gate.fields.items() if spec.required],
        "additionalProperties": True,
    }
    if gate.rules:
        schema["x-phasegate-rules"] = [
            {"name": r.name, "expr": r.expr, "message": r.message}
            | ({"when": r.when} if r.when else {})
            for r in gate.rules
        ]
    if not gate.strict:
        schema["x-phasegate-strict"] = False  # validator and rule failures only warn
    return schema


def describe_limits(schema: dict[str, Any]) -> str:
    """A field's JSON Schema limits in a few words: ``>= 1``, ``length 3..``, ``one of a, b``."""
    parts = []
    if "minimum" in schema:
        parts.append(f">= {schema['minimum']}")
    if "maximum" in schema:
        parts.append(f"<= {schema['maximum']}")
    for low, high, word in (
        ("minLength", "maxLength", "length"),
        ("minItems", "maxItems", "items"),
        ("minProperties", "maxProperties", "keys"),
    ):
        if low in schema or high in schema:
            parts.append(f"{word} {schema.get(low, 0)}..{schema.get(high, '')}")
    if "pattern" in schema:
        parts.append(f"matches {schema['pattern']}")
    if isinstance(schema.get("enum"), list):
        parts.append("one of " + ", ".join(map(str, schema["enum"])))
    validator = schema.get("x-phasegate-validator")
    if isinstance(validator, dict) and validator.get("expr"):
        parts.append(str(validator["expr"]))
    return "; ".join(parts)


def _number(value: float, kind: str) -> int | float:
    return int(value) if kind == "integer" and float(value).is_integer() else value
