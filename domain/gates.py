"""Gate definitions: what evidence a phase needs.

``load_gate`` turns a parsed prAxIs OS ``gate-definition.yaml`` into a
:class:`GateDefinition`, rejecting mistakes at load time with the YAML path of
the offending key. Checking evidence against a gate is
:func:`phasegate.domain.gate_eval.evaluate_gate` (never raises).
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from phasegate.domain.errors import ExpressionError, GateDefinitionError
from phasegate.domain.expressions import CompiledExpression, compile_expression
from phasegate.domain.regex import check_regex
from phasegate.domain.verify import VerifyChecks, VerifySection, parse_checks

__all__ = [
    "NUMERIC_TYPES",
    "SIZED_TYPES",
    "ApprovalSpec",
    "FieldSpec",
    "FieldType",
    "GateDefinition",
    "GateEvaluation",
    "GateRule",
    "Problem",
    "clip_text",
    "compiled_expression",
    "kind_of",
    "load_gate",
    "number_text",
    "short_text",
]

FieldType = Literal["boolean", "integer", "number", "string", "list", "dict"]

_TYPE_ALIASES = {"bool": "boolean", "int": "integer", "float": "number", "str": "string",
                 "array": "list", "object": "dict"}  # fmt: skip
NUMERIC_TYPES = ("integer", "number")
SIZED_TYPES = ("string", "list", "dict")
_RULE_SECTIONS = ("rules", "cross_field", "cross_field_rules")


class FieldSpec(BaseModel):
    """One evidence field: its type and the checks its value must pass."""

    model_config = ConfigDict(extra="forbid")

    type: FieldType = "string"
    required: bool = True
    description: str = ""
    validator: str | None = Field(None, description="Name of an entry in the gate's validators.")
    validator_params: dict[str, Any] = Field(default_factory=dict)
    min: float | None = Field(None, allow_inf_nan=False, description="Smallest (integer/number).")
    max: float | None = Field(None, allow_inf_nan=False, description="Largest (integer/number).")
    min_length: int | None = Field(None, ge=0, description="Shortest (string/list/dict).")
    max_length: int | None = Field(None, ge=0, description="Longest (string/list/dict).")
    pattern: str | None = Field(None, description="Regex a string must contain (re.search).")
    enum: list[Any] | None = Field(None, description="The only allowed values.")

    @field_validator("type", mode="before")
    @classmethod
    def _alias(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip().lower()
            return _TYPE_ALIASES.get(value, value)
        return value

    @field_validator("description", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return "" if value is None else value.strip() if isinstance(value, str) else value

    @field_validator("validator_params", mode="before")
    @classmethod
    def _params(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            check_regex(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> FieldSpec:
        for key, kinds in (
            ("min", NUMERIC_TYPES),
            ("max", NUMERIC_TYPES),
            ("min_length", SIZED_TYPES),
            ("max_length", SIZED_TYPES),
            ("pattern", ("string",)),
        ):
            if getattr(self, key) is not None and self.type not in kinds:
                raise ValueError(f"{key} does not apply to a {self.type} field")
        for low, high in (("min", "max"), ("min_length", "max_length")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(
                    f"{low} ({number_text(lo)}) is greater than {high} ({number_text(hi)})"
                )
        if self.validator_params and not self.validator:
            raise ValueError("validator_params given without a validator")
        return self


class GateRule(BaseModel):
    """A cross-field rule: an expression over evidence field names."""

    model_config = ConfigDict(extra="forbid")

    name: str
    expr: str = Field(description="e.g. 'tests_passed <= tests_run'.")
    message: str = ""
    when: str | None = Field(None, description="Only check the rule when this is true.")


class ApprovalSpec(BaseModel):
    """Whether a person must approve the phase, and who may."""

    model_config = ConfigDict(extra="forbid")

    required: bool = False
    approvers: list[str] = Field(default_factory=list)
    timeout: str | None = Field(
        None, description="How long a decision may take: '90s', '30m', '24h', '2d' (or seconds)."
    )
    on_timeout: Literal["escalate", "reject"] = Field(
        "escalate",
        description="escalate: status approval_overdue (+ notify); reject: the phase reopens.",
    )
    notify_url: str | None = Field(
        None, description="On escalation, POST a JSON payload here (http/https)."
    )

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout_text(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = f"{value}s"
        if value is not None:
            parse_duration(str(value))  # raises ValueError with the accepted forms
        return value

    @field_validator("notify_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s]+$", value):
            raise ValueError("notify_url must be an http:// or https:// URL")
        return value

    def timeout_seconds(self) -> float | None:
        return parse_duration(self.timeout) if self.timeout else None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in ``'90s'``, ``'30m'``, ``'24h'``, ``'2d'`` or a bare number of seconds.

    Raises:
        ValueError: anything else, or a duration of zero.
    """
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"invalid duration {text!r}: use a positive number with s, m, h or d")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]


class GateDefinition(BaseModel):
    """Everything a phase's gate checks. Pure data; safe to pass through Temporal."""

    strict: bool = True
    allow_override: bool = False
    tasks_complete: bool = Field(
        False,
        description="The phase passes only once every leaf task of it is complete "
        "(task state: `phasegate task done`); optional tasks are not waited for.",
    )
    fields: dict[str, FieldSpec] = Field(default_factory=dict)
    validators: dict[str, str] = Field(default_factory=dict, description="name -> 'lambda x: ...'")
    rules: list[GateRule] = Field(default_factory=list)
    approval: ApprovalSpec = Field(default_factory=ApprovalSpec)
    verify: VerifyChecks = Field(
        default_factory=list,
        description="Checks an activity runs against the workspace (domain.verify), typed "
        "by kind; a failed check blocks even when strict is false.",
    )
    source: str = Field("", description="Where the gate came from, for messages.")

    def public_fields(self) -> dict[str, dict[str, Any]]:
        """The fields as an agent should see them.

        Returns:
            ``{name: {"type", "required", "description"}}`` in schema order.
        """
        return {
            name: {"type": s.type, "required": s.required, "description": s.description}
            for name, s in self.fields.items()
        }


class Problem(BaseModel):
    """One reason evidence did not pass (or, as a warning, a concern)."""

    field: str
    message: str
    expected: str = ""
    got: str = ""
    rule: str = Field("", description="'required', 'type', 'min', 'validator:<name>', ...")


class GateEvaluation(BaseModel):
    """The outcome of checking evidence against a gate."""

    passed: bool
    problems: list[Problem] = Field(default_factory=list)
    warnings: list[Problem] = Field(default_factory=list)


# --------------------------------------------------------------------------- loading


def load_gate(data: Any, *, source: str) -> GateDefinition:
    """Build a gate from a parsed ``gate-definition.yaml``.

    Args:
        data: The result of ``yaml.safe_load`` (``None`` for an empty file).
        source: The file the data came from, used in errors and kept on the gate.

    Returns:
        The gate definition. Unknown top-level keys are ignored.

    Raises:
        GateDefinitionError: A key has the wrong type or an unknown name, a
            validator is referenced but not defined or does not compile, a
            pattern is not a valid regex, or bounds contradict each other. Its
            ``where`` is ``"<source>: <yaml.path>"``.
    """
    if data is None:
        return GateDefinition(source=source)
    if not isinstance(data, dict):
        hint = "a gate file has checkpoint:, evidence_schema: and validators: keys"
        raise _error(source, "", f"expected a mapping, got {kind_of(data)}", hint)
    checkpoint = _mapping(data.get("checkpoint"), source, "checkpoint")
    validators: dict[str, str] = {}
    for name, text in _mapping(data.get("validators"), source, "validators").items():
        validators[str(name)] = _validator_text(text, source, f"validators.{name}")
    fields = {
        str(name): _load_field(str(name), raw, validators, source)
        for name, raw in _mapping(data.get("evidence_schema"), source, "evidence_schema").items()
    }
    rules: list[GateRule] = []
    for section in _RULE_SECTIONS:
        rules += _load_rules(data.get(section), section, fields, source, len(rules))
    raw_approval = data.get("approval")
    if isinstance(raw_approval, bool):
        raw_approval = {"required": raw_approval}
    approval = _validated(
        ApprovalSpec, _mapping(raw_approval, source, "approval"), source, "approval"
    )
    raw_verify = _validated(VerifySection, {"verify": data.get("verify") or []}, source, "")
    # Typed now (kinds, fields, template references to declared evidence fields); the
    # workflow hands the typed checks to the verify activity.
    verify = parse_checks(raw_verify.verify, source=source, known_fields=fields)
    flags = {
        k: checkpoint[k] for k in ("strict", "allow_override", "tasks_complete") if k in checkpoint
    }
    gate = _validated(GateDefinition, flags, source, "checkpoint")
    parts = {"fields": fields, "validators": validators, "rules": rules, "approval": approval}
    return gate.model_copy(update={**parts, "verify": verify, "source": source})


def _error(source: str, path: str, message: str, hint: str | None = None) -> GateDefinitionError:
    return GateDefinitionError(message, where=f"{source}: {path}" if path else source, hint=hint)


def _mapping(value: Any, source: str, path: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _error(source, path, f"expected a mapping, got {kind_of(value)} {short_text(value)}")
    return value


def _validated(model: type[Any], raw: Any, source: str, path: str) -> Any:
    """``model.model_validate(raw, strict=True)`` with errors that name the YAML key."""
    try:
        return model.model_validate(raw, strict=True)
    except ValidationError as exc:
        # An unknown key first: a misspelt key also shows up as a missing one.
        err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        key = ".".join(str(p) for p in err["loc"])
        where = ".".join(p for p in (path, key) if p)
        message = err["msg"].removeprefix("Value error, ")
        hint = None
        if err["type"] == "missing":
            message = f"missing required key {err['loc'][-1]!r}"
        elif err["type"] == "extra_forbidden":
            known = list(model.model_fields)
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            message = f"unknown key {err['loc'][-1]!r}"
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
        elif key == "type":
            hint = "use one of boolean, integer, number, string, list, dict"
        elif not key:
            hint = "fix one of the values, or remove it"
        else:
            message += f" (got {short_text(err['input'])})"
        raise _error(source, where, message, hint) from None


def _compile(text: Any, source: str, path: str) -> CompiledExpression:
    if not isinstance(text, str):
        raise _error(source, path, f"expected an expression in quotes, got {kind_of(text)}")
    try:
        return compiled_expression(text.strip(), where=f"{source}: {path}")
    except ExpressionError as exc:
        raise GateDefinitionError(exc.message, where=exc.where, hint=exc.hint) from None


def _validator_text(text: Any, source: str, path: str) -> str:
    compiled = _compile(text, source, path)
    if not compiled.params:
        raise _error(source, path, "a validator must be a lambda", "e.g. 'lambda x: x > 0'")
    if compiled.names:
        unknown = ", ".join(sorted(compiled.names))
        hint = "make them lambda parameters and set them in validator_params"
        raise _error(source, path, f"validator uses undefined name(s) {unknown}", hint)
    return compiled.source


def _load_field(name: str, raw: Any, validators: dict[str, str], source: str) -> FieldSpec:
    base = f"evidence_schema.{name}"
    raw = dict(_mapping({"type": raw} if isinstance(raw, str) else raw, source, base))
    ref = raw.get("validator")
    if isinstance(ref, str) and ref.strip().startswith("lambda"):  # inline, as some gates do
        validators[f"{name}:inline"] = _validator_text(ref, source, f"{base}.validator")
        raw["validator"] = ref = f"{name}:inline"
    spec: FieldSpec = _validated(FieldSpec, raw, source, base)
    if ref is not None and ref not in validators:
        hint = f"add it under validators: (defined: {', '.join(sorted(validators)) or 'none'})"
        raise _error(source, f"{base}.validator", f"validator {ref!r} is not defined", hint)
    if spec.validator:
        wanted = compiled_expression(validators[spec.validator]).params[1:]
        missing = [p for p in wanted if p not in spec.validator_params and p != "params"]
        if missing:
            needs = ", ".join(missing)
            hint = "set validator_params: {" + ", ".join(f"{m}: ..." for m in missing) + "}"
            raise _error(source, f"{base}.validator_params", f"validator needs {needs}", hint)
    return spec


def _load_rules(
    raw: Any, section: str, fields: dict[str, FieldSpec], source: str, start: int
) -> list[GateRule]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        hint = "each rule is {name, expr, message, when}"
        raise _error(source, section, f"expected a list of rules, got {kind_of(raw)}", hint)
    rules = []
    for i, item in enumerate(raw):
        path = f"{section}[{i}]"
        item = {"name": f"rule_{start + i + 1}", **_mapping(item, source, path)}
        rule: GateRule = _validated(GateRule, item, source, path)
        for key in ("expr", "when"):
            text = getattr(rule, key)
            if text is None:
                continue
            where = f"{path}.{key}"
            compiled = _compile(text, source, where)
            if compiled.params:
                hint = "e.g. 'tests_passed <= tests_run'"
                raise _error(source, where, "a rule is an expression over field names", hint)
            unknown = ", ".join(sorted(compiled.names - set(fields)))
            if unknown:
                hint = f"declare them under evidence_schema (have: {', '.join(fields)})"
                raise _error(source, where, f"unknown field(s) {unknown}", hint)
        rules.append(rule.model_copy(update={"expr": rule.expr.strip()}))
    return rules


# --------------------------------------------------------------------------- evaluation

_GOT_LIMIT = 80
_CACHE: dict[str, CompiledExpression] = {}


def number_text(value: float) -> str:
    """``3.0`` -> ``"3"``, ``2.5`` -> ``"2.5"`` (for messages)."""
    return str(int(value)) if float(value).is_integer() else str(value)


def compiled_expression(text: str, *, where: str | None = None) -> CompiledExpression:
    """Compile with a small cache; results do not depend on whether it hit."""
    hit = _CACHE.get(text)
    if hit is None:
        hit = compile_expression(text, where=where)
        if len(_CACHE) >= 1024:
            _CACHE.clear()
        _CACHE[text] = hit
    return hit


def kind_of(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
             dict: "dict", type(None): "null"}  # fmt: skip
    return names.get(type(value), type(value).__name__)


def short_text(value: Any) -> str:
    """A value as the user sent it (JSON: ``false``, ``null``, ``"text"``), clipped."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):  # huge ints, deep nesting
        text = f"<{type(value).__name__}>"
    return clip_text(text)


def clip_text(text: str) -> str:
    return text if len(text) <= _GOT_LIMIT else text[: _GOT_LIMIT - 1] + "…"
