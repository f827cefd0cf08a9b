"""Gate loading (prAxIs gate-definition.yaml) and evaluation."""

from __future__ import annotations

from typing import Any

import pytest
from gate_helpers import PRAXIS_GATE, SOURCE, gate, one_field, rules_of

from phasegate.domain.errors import GateDefinitionError
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import (
    FieldSpec,
    GateDefinition,
    GateEvaluation,
    GateRule,
    load_gate,
)

GOOD_EVIDENCE = {
    "files_created": ["src/a.py"],
    "tests_passing": 12,
    "test_coverage": 91,
    "commit_hash": "0123456789abcdef0123456789abcdef01234567",
    "linting_passed": True,
}


# --------------------------------------------------------------------------- loading


def test_praxis_gate_loads() -> None:
    loaded = gate(PRAXIS_GATE)
    assert loaded.strict is True and loaded.allow_override is True
    assert list(loaded.fields) == [
        "files_created", "tests_passing", "test_coverage", "commit_hash", "linting_passed",
        "metadata",
    ]  # fmt: skip
    assert loaded.fields["test_coverage"].validator_params == {"min_val": 80, "max_val": 100}
    assert loaded.fields["metadata"].required is False
    assert loaded.source == SOURCE
    assert loaded.public_fields()["tests_passing"] == {
        "type": "integer",
        "required": True,
        "description": "Number of passing tests (must be > 0)",
    }


def test_praxis_gate_passes_good_evidence_and_blocks_bad() -> None:
    loaded = gate(PRAXIS_GATE)
    assert evaluate_gate(loaded, GOOD_EVIDENCE) == GateEvaluation(passed=True)
    bad = {**GOOD_EVIDENCE, "tests_passing": 0, "test_coverage": 79, "linting_passed": False}
    result = evaluate_gate(loaded, bad)
    assert not result.passed
    assert rules_of(result) == ["validator:positive", "validator:in_range", "validator:is_true"]


@pytest.mark.parametrize("data", [None, {}, {"checkpoint": None, "evidence_schema": None}])
def test_empty_gate(data: Any) -> None:
    loaded = load_gate(data, source=SOURCE)
    assert loaded.fields == {} and loaded.strict is True and loaded.allow_override is False
    assert evaluate_gate(loaded, {}).passed


def test_unknown_top_level_keys_are_ignored() -> None:
    loaded = load_gate({"future_feature": {"x": 1}, "evidence_schema": {"a": {}}}, source=SOURCE)
    assert list(loaded.fields) == ["a"]


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("bool", "boolean"), ("int", "integer"), ("float", "number"), ("str", "string"),
        ("array", "list"), ("object", "dict"), ("Boolean", "boolean"), ("number", "number"),
    ],
)  # fmt: skip
def test_type_aliases(alias: str, canonical: str) -> None:
    assert one_field({"type": alias}).fields["f"].type == canonical


def test_field_shorthand_and_defaults() -> None:
    loaded = load_gate({"evidence_schema": {"a": "integer", "b": None}}, source=SOURCE)
    assert loaded.fields["a"].type == "integer"
    assert loaded.fields["b"] == FieldSpec()


def test_inline_lambda_validator() -> None:
    loaded = one_field({"type": "integer", "validator": "lambda x: x > 0"})
    assert loaded.fields["f"].validator == "f:inline"
    assert loaded.validators["f:inline"] == "lambda x: x > 0"
    assert not evaluate_gate(loaded, {"f": 0}).passed


def test_rules_sections_approval_and_verify() -> None:
    loaded = load_gate(
        {
            "evidence_schema": {"a": "integer", "b": "integer"},
            "rules": [{"name": "a_le_b", "expr": "a <= b", "message": "a must not exceed b"}],
            "cross_field_rules": [{"expr": "b < 100", "when": "a > 0"}],
            "approval": {"required": True, "approvers": ["alice"]},
            "verify": [{"kind": "file_exists", "path": "x"}],
        },
        source=SOURCE,
    )
    assert [r.name for r in loaded.rules] == ["a_le_b", "rule_2"]
    assert loaded.rules[1] == GateRule(name="rule_2", expr="b < 100", when="a > 0")
    assert loaded.approval.required and loaded.approval.approvers == ["alice"]
    assert [(c.kind, c.path) for c in loaded.verify] == [("file_exists", "x")]  # typed checks
    assert load_gate({"approval": True}, source=SOURCE).approval.required


def test_gate_round_trips_through_json() -> None:
    loaded = gate(PRAXIS_GATE)
    assert GateDefinition.model_validate_json(loaded.model_dump_json()) == loaded


@pytest.mark.parametrize(
    ("data", "where", "fragment"),
    [
        ([1, 2], "", "expected a mapping"),
        ({"checkpoint": {"strict": "no"}}, "checkpoint.strict", "boolean"),
        ({"checkpoint": {"allow_override": 1}}, "checkpoint.allow_override", "boolean"),
        ({"checkpoint": "strict"}, "checkpoint", "expected a mapping"),
        ({"evidence_schema": ["a"]}, "evidence_schema", "expected a mapping"),
        ({"evidence_schema": {"f": 3}}, "evidence_schema.f", "expected a mapping"),
        ({"evidence_schema": {"f": {"typ": "int"}}}, "evidence_schema.f.typ", "unknown key"),
        ({"evidence_schema": {"f": {"type": "integr"}}}, "evidence_schema.f.type", "Input"),
        ({"evidence_schema": {"f": {"required": "yes"}}}, "evidence_schema.f.required", "bool"),
        ({"evidence_schema": {"f": {"description": 3}}}, "evidence_schema.f.description", "str"),
        ({"evidence_schema": {"f": {"type": "int", "min": "1"}}}, "evidence_schema.f.min", ""),
        ({"evidence_schema": {"f": {"type": "int", "min": 5, "max": 1}}}, "evidence_schema.f",
         "min (5) is greater than max (1)"),
        ({"evidence_schema": {"f": {"min_length": 5, "max_length": 1}}}, "evidence_schema.f",
         "min_length (5) is greater than max_length (1)"),
        ({"evidence_schema": {"f": {"min_length": -1}}}, "evidence_schema.f.min_length", ""),
        ({"evidence_schema": {"f": {"type": "string", "min": 1}}}, "evidence_schema.f",
         "min does not apply to a string field"),
        ({"evidence_schema": {"f": {"type": "integer", "min_length": 1}}}, "evidence_schema.f",
         "min_length does not apply"),
        ({"evidence_schema": {"f": {"type": "integer", "pattern": "x"}}}, "evidence_schema.f",
         "pattern does not apply"),
        ({"evidence_schema": {"f": {"pattern": "([a-z"}}}, "evidence_schema.f.pattern",
         "invalid regular expression"),
        ({"evidence_schema": {"f": {"enum": "a"}}}, "evidence_schema.f.enum", "list"),
        ({"evidence_schema": {"f": {"validator": "nope"}}}, "evidence_schema.f.validator",
         "validator 'nope' is not defined"),
        ({"evidence_schema": {"f": {"validator": "lambda x: x.strip()"}}},
         "evidence_schema.f.validator", "attribute access"),
        ({"evidence_schema": {"f": {"validator_params": {"a": 1}}}}, "evidence_schema.f",
         "validator_params given without a validator"),
        ({"evidence_schema": {"f": {"validator": "r"}}, "validators": {"r": "lambda x, lo: x > lo"}},
         "evidence_schema.f.validator_params", "needs lo"),
        ({"validators": {"v": "lambda x: open(x)"}}, "validators.v", "calling 'open'"),
        ({"validators": {"v": "lambda x: 10**10**10"}}, "validators.v", "too large"),
        ({"validators": {"v": "x > 0"}}, "validators.v", "must be a lambda"),
        ({"validators": {"v": "lambda x: x > limit"}}, "validators.v", "undefined name(s) limit"),
        ({"validators": {"v": 5}}, "validators.v", "expression in quotes"),
        ({"validators": {"v": "lambda x: x >"}}, "validators.v", "not a valid expression"),
        ({"rules": {"a": 1}}, "rules", "expected a list"),
        ({"rules": [{"expr": "a > 1"}]}, "rules[0].expr", "unknown field(s) a"),
        ({"evidence_schema": {"a": {}}, "rules": [{"expr": "lambda a: a"}]}, "rules[0].expr",
         "expression over field names"),
        ({"evidence_schema": {"a": {}}, "rules": [{"exp": "a"}]}, "rules[0].exp", "unknown key"),
        ({"evidence_schema": {"a": {}}, "rules": [{"name": "r"}]}, "rules[0].expr",
         "missing required key 'expr'"),
        ({"evidence_schema": {"a": {}}, "cross_field": [{"expr": "a", "when": "b"}]},
         "cross_field[0].when", "unknown field(s) b"),
        ({"approval": {"required": "yes"}}, "approval.required", "bool"),
        ({"approval": {"who": ["a"]}}, "approval.who", "unknown key"),
        ({"approval": {"approvers": "alice"}}, "approval.approvers", "list"),
        ({"verify": "check"}, "verify", "list"),
        ({"verify": ["check"]}, "verify.0", "dict"),
    ],
)  # fmt: skip
def test_load_errors_name_the_key(data: Any, where: str, fragment: str) -> None:
    with pytest.raises(GateDefinitionError) as info:
        load_gate(data, source=SOURCE)
    expected_where = f"{SOURCE}: {where}" if where else SOURCE
    assert info.value.where == expected_where
    assert fragment.lower() in info.value.message.lower()
    assert info.value.code == "gate_definition_invalid"


def test_unknown_field_key_suggests_the_right_one() -> None:
    with pytest.raises(GateDefinitionError) as info:
        one_field({"type": "string", "requird": True})
    assert info.value.hint == "did you mean 'required'?"
    assert "evidence_schema.f.requird" in str(info.value)


def test_unknown_validator_lists_defined_ones() -> None:
    with pytest.raises(GateDefinitionError) as info:
        one_field({"validator": "postive"}, validators={"positive": "lambda x: x > 0"})
    assert "positive" in (info.value.hint or "")


# --------------------------------------------------------------------------- types

TYPE_MATRIX: list[tuple[str, Any, bool]] = [
    ("boolean", True, True), ("boolean", False, True), ("boolean", 1, False),
    ("boolean", "true", False), ("boolean", 0, False),
    ("integer", 3, True), ("integer", -7, True), ("integer", 0, True), ("integer", True, False),
    ("integer", 3.0, False), ("integer", "3", False), ("integer", [3], False),
    ("number", 3, True), ("number", 2.5, True), ("number", False, False),
    ("number", "2.5", False), ("number", float("nan"), False), ("number", float("inf"), False),
    ("string", "", True), ("string", "abc", True), ("string", 5, False), ("string", ["a"], False),
    ("list", [], True), ("list", [1, "a"], True), ("list", (1,), False), ("list", "abc", False),
    ("list", {"a": 1}, False),
    ("dict", {}, True), ("dict", {"a": [1]}, True), ("dict", [], False), ("dict", "{}", False),
]  # fmt: skip


@pytest.mark.parametrize(("ftype", "value", "ok"), TYPE_MATRIX)
@pytest.mark.parametrize("strict", [True, False])
def test_type_matrix(ftype: str, value: Any, ok: bool, strict: bool) -> None:
    result = evaluate_gate(one_field({"type": ftype}, strict=strict), {"f": value})
    assert result.passed is ok
    if not ok:  # a wrong type blocks even when the gate is lenient
        (problem,) = result.problems
        assert problem.rule == "type" and problem.field == "f"
        assert problem.expected == ftype
        assert problem.got and problem.message.startswith("'f' must be a")


def test_type_problem_reports_what_was_sent() -> None:
    (problem,) = evaluate_gate(one_field({"type": "integer"}), {"f": "12"}).problems
    assert problem.got == 'string "12"'  # as JSON: what the agent sent
    assert "whole number" in problem.message


# --------------------------------------------------------------------------- required


@pytest.mark.parametrize("strict", [True, False])
def test_missing_required_field_always_blocks(strict: bool) -> None:
    loaded = one_field({"type": "integer", "description": "How many tests ran"}, strict=strict)
    for evidence, got in (({}, "missing"), ({"f": None}, "null")):
        (problem,) = evaluate_gate(loaded, evidence).problems
        assert problem.rule == "required" and problem.got == got
        assert problem.expected == "integer"
        assert "How many tests ran" in problem.message


def test_missing_optional_field_is_fine_but_checked_when_present() -> None:
    loaded = one_field({"type": "integer", "required": False, "min": 1})
    assert evaluate_gate(loaded, {}).passed
    assert evaluate_gate(loaded, {"f": None}).passed
    assert rules_of(evaluate_gate(loaded, {"f": 0})) == ["min"]
    assert rules_of(evaluate_gate(loaded, {"f": "x"})) == ["type"]


def test_extra_fields_are_fine() -> None:
    assert evaluate_gate(one_field({"type": "string"}), {"f": "x", "other": [1, 2]}).passed


def test_non_mapping_evidence_is_a_problem() -> None:
    result = evaluate_gate(one_field({}), ["not", "a", "dict"])  # type: ignore[arg-type]
    assert not result.passed and result.problems[0].rule == "type"


# --------------------------------------------------------------------------- declarative checks

CHECKS: list[tuple[dict[str, Any], Any, Any, str]] = [
    ({"type": "integer", "min": 1}, 1, 0, "min"),
    ({"type": "number", "min": 0.5}, 0.5, 0.4, "min"),
    ({"type": "integer", "max": 10}, 10, 11, "max"),
    ({"type": "number", "max": 1}, 1.0, 1.01, "max"),
    ({"type": "string", "min_length": 3}, "abc", "ab", "min_length"),
    ({"type": "string", "max_length": 3}, "abc", "abcd", "max_length"),
    ({"type": "list", "min_length": 1}, [0], [], "min_length"),
    ({"type": "list", "max_length": 1}, [0], [0, 1], "max_length"),
    ({"type": "dict", "min_length": 1}, {"a": 1}, {}, "min_length"),
    ({"type": "string", "pattern": "^[0-9a-f]{7,40}$"}, "abc1234", "xyz", "pattern"),
    ({"type": "string", "pattern": "PASS"}, "3 tests PASS ok", "FAIL", "pattern"),
    ({"type": "string", "enum": ["low", "high"]}, "low", "mid", "enum"),
    ({"type": "integer", "enum": [1, 2]}, 2, 3, "enum"),
    ({"type": "boolean", "enum": [True]}, True, False, "enum"),
]


@pytest.mark.parametrize(("spec", "good", "bad", "rule"), CHECKS)
def test_declarative_checks_block_when_strict(spec: dict, good: Any, bad: Any, rule: str) -> None:
    loaded = one_field({**spec, "description": "the thing"})
    assert evaluate_gate(loaded, {"f": good}).passed
    result = evaluate_gate(loaded, {"f": bad})
    assert not result.passed and result.warnings == []
    (problem,) = result.problems
    assert problem.rule == rule and problem.field == "f"
    assert problem.expected and problem.got
    assert "the thing" in problem.message


@pytest.mark.parametrize(("spec", "good", "bad", "rule"), CHECKS)
def test_declarative_checks_warn_when_lenient(spec: dict, good: Any, bad: Any, rule: str) -> None:
    result = evaluate_gate(one_field(spec, strict=False), {"f": bad})
    assert result.passed and result.problems == []
    assert [w.rule for w in result.warnings] == [rule]


def test_enum_keeps_true_distinct_from_one() -> None:
    loaded = one_field({"type": "number", "enum": [1, 2]})
    assert evaluate_gate(loaded, {"f": 1.0}).passed
    assert not evaluate_gate(one_field({"type": "boolean", "enum": [1]}), {"f": True}).passed


def test_every_failing_check_is_reported_in_order() -> None:
    loaded = one_field(
        {"type": "string", "min_length": 5, "pattern": "^a", "enum": ["abcdef"], "validator": "v"},
        validators={"v": "lambda x: len(x) > 10"},
    )
    assert rules_of(evaluate_gate(loaded, {"f": "zz"})) == [
        "enum", "min_length", "pattern", "validator:v",
    ]  # fmt: skip
