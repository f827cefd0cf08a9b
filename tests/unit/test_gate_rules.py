"""Gate evaluation: validators, cross-field rules, and properties that hold for any
evidence (split from test_gates.py, which covers loading, types and checks)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from gate_helpers import PRAXIS_GATE, SOURCE, gate, one_field, rules_of
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegate.domain.errors import GateDefinitionError
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import (
    FieldSpec,
    GateDefinition,
    GateEvaluation,
    load_gate,
)

# --------------------------------------------------------------------------- validators


def test_validator_pass_fail_and_raise() -> None:
    loaded = one_field({"type": "list", "validator": "v"}, validators={"v": "lambda x: x[0] > 0"})
    assert evaluate_gate(loaded, {"f": [1]}).passed
    (failed,) = evaluate_gate(loaded, {"f": [0]}).problems
    assert failed.rule == "validator:v" and failed.expected == "lambda x: x[0] > 0"
    assert failed.got == "[0]" and "failed validator 'v'" in failed.message
    (raised,) = evaluate_gate(loaded, {"f": []}).problems
    assert raised.rule == "validator:v" and "could not be checked" in raised.message


def test_validator_failures_are_warnings_when_lenient() -> None:
    loaded = one_field(
        {"type": "integer", "validator": "v"}, strict=False, validators={"v": "lambda x: x > 0"}
    )
    result = evaluate_gate(loaded, {"f": 0})
    assert result.passed and [w.rule for w in result.warnings] == ["validator:v"]
    raising = one_field(
        {"type": "list", "validator": "v"}, strict=False, validators={"v": "lambda x: x[5]"}
    )
    result = evaluate_gate(raising, {"f": []})
    assert result.passed and "could not be checked" in result.warnings[0].message


def test_parameterized_validators() -> None:
    loaded = one_field(
        {"type": "integer", "validator": "in_range",
         "validator_params": {"min_val": 80, "max_val": 100, "unused": 1}},
        validators={"in_range": "lambda x, min_val, max_val: min_val <= x <= max_val"},
    )  # fmt: skip
    assert evaluate_gate(loaded, {"f": 90}).passed
    assert not evaluate_gate(loaded, {"f": 70}).passed
    as_dict = one_field(
        {"type": "integer", "validator": "v", "validator_params": {"min": 3}},
        validators={"v": "lambda x, params: x >= params['min']"},
    )
    assert evaluate_gate(as_dict, {"f": 3}).passed
    assert not evaluate_gate(as_dict, {"f": 2}).passed


def test_truthy_non_bool_validator_result_passes() -> None:
    loaded = one_field({"type": "list", "validator": "v"}, validators={"v": "lambda x: len(x)"})
    assert evaluate_gate(loaded, {"f": [1]}).passed
    assert not evaluate_gate(loaded, {"f": []}).passed


# --------------------------------------------------------------------------- rules

RULED = {
    "evidence_schema": {
        "tests_run": {"type": "integer"},
        "tests_passed": {"type": "integer"},
        "coverage": {"type": "number", "required": False},
    },
    "rules": [
        {"name": "passed_le_run", "expr": "tests_passed <= tests_run",
         "message": "tests_passed cannot exceed tests_run"},
        {"name": "coverage_when_tests", "expr": "coverage >= 80", "when": "tests_run > 0"},
    ],
}  # fmt: skip


def test_rules_pass_and_fail() -> None:
    loaded = load_gate(RULED, source=SOURCE)
    assert evaluate_gate(loaded, {"tests_run": 3, "tests_passed": 3, "coverage": 90}).passed
    (problem,) = evaluate_gate(loaded, {"tests_run": 3, "tests_passed": 4}).problems
    assert problem.rule == "rule:passed_le_run"
    assert problem.field == "tests_passed, tests_run"
    assert problem.expected == "tests_passed <= tests_run"
    assert problem.got == "tests_passed=4, tests_run=3"
    assert problem.message == "tests_passed cannot exceed tests_run"


def test_rule_when_condition() -> None:
    loaded = load_gate(RULED, source=SOURCE)
    assert evaluate_gate(loaded, {"tests_run": 0, "tests_passed": 0, "coverage": 10}).passed
    result = evaluate_gate(loaded, {"tests_run": 2, "tests_passed": 2, "coverage": 10})
    assert rules_of(result) == ["rule:coverage_when_tests"]
    assert "coverage >= 80" in result.problems[0].message


def test_rules_skip_when_a_field_is_missing_or_bad() -> None:
    loaded = load_gate(RULED, source=SOURCE)
    # coverage is optional and absent: its rule does not apply.
    assert evaluate_gate(loaded, {"tests_run": 2, "tests_passed": 2}).passed
    # tests_passed has the wrong type: only the type problem, no rule noise.
    result = evaluate_gate(loaded, {"tests_run": 2, "tests_passed": "2", "coverage": 90})
    assert rules_of(result) == ["type"]
    assert rules_of(evaluate_gate(loaded, {"tests_run": 2})) == ["required"]


def test_rules_warn_when_lenient_and_report_errors() -> None:
    data = {
        "checkpoint": {"strict": False},
        "evidence_schema": {"a": {"type": "list"}, "b": {"type": "integer"}},
        "rules": [{"name": "first", "expr": "a[b] > 0"}],
    }
    loaded = load_gate(data, source=SOURCE)
    assert evaluate_gate(loaded, {"a": [1], "b": 0}) == GateEvaluation(passed=True)
    result = evaluate_gate(loaded, {"a": [1], "b": 5})
    assert result.passed and result.problems == []
    assert "could not be checked" in result.warnings[0].message


def test_problem_order_is_schema_order_then_rules() -> None:
    loaded = load_gate(RULED, source=SOURCE)
    result = evaluate_gate(loaded, {"tests_passed": 9, "tests_run": 1, "coverage": "x"})
    assert rules_of(result) == ["type", "rule:passed_le_run"]
    assert [p.field for p in result.problems] == ["coverage", "tests_passed, tests_run"]


def test_got_is_truncated() -> None:
    (problem,) = evaluate_gate(one_field({"type": "integer"}), {"f": "x" * 500}).problems
    assert len(problem.got) <= 80 and problem.got.endswith("…")


def test_evaluation_is_deterministic() -> None:
    loaded = gate(PRAXIS_GATE)
    bad = {"files_created": [], "tests_passing": -1, "commit_hash": "zz", "linting_passed": 1}
    assert evaluate_gate(loaded, bad) == evaluate_gate(loaded, bad)


def test_gate_built_in_code_with_a_missing_validator_does_not_raise() -> None:
    loaded = GateDefinition(fields={"f": FieldSpec(type="integer", validator="ghost")})
    (problem,) = evaluate_gate(loaded, {"f": 1}).problems
    assert problem.rule == "validator:ghost"


# --------------------------------------------------------------------------- property

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
FIELD_NAMES = ["tests_run", "tests_passed", "files", "name", "meta", "flag", "ratio"]
PROPERTY_GATE = {
    "evidence_schema": {
        "tests_run": {"type": "integer", "min": 0, "validator": "positive"},
        "tests_passed": {"type": "integer", "enum": [0, 1, 2, 3], "required": False},
        "files": {"type": "list", "min_length": 1, "validator": "names"},
        "name": {"type": "string", "pattern": "^[a-z]+$", "max_length": 10, "required": False},
        "meta": {"type": "dict", "required": False, "validator": "has_key"},
        "flag": {"type": "boolean", "validator": "is_true", "required": False},
        "ratio": {"type": "number", "max": 1, "required": False, "validator": "params_style",
                  "validator_params": {"limit": 0.5}},
    },
    "validators": {
        "positive": "lambda x: x > 0",
        "names": "lambda x: all(len(i) > 0 for i in x)",
        "has_key": "lambda x: x['k'] == 1 or len(x) > 2",
        "is_true": "lambda x: x == True",
        "params_style": "lambda x, limit: x * 2 ** 3 >= limit",
    },
    "rules": [
        {"name": "le", "expr": "tests_passed <= tests_run"},
        {"name": "items", "expr": "len(files) >= tests_run", "when": "tests_run < 100"},
    ],
}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    evidence=st.dictionaries(
        st.sampled_from(FIELD_NAMES) | st.text(max_size=6), json_values, max_size=8
    ),
    strict=st.booleans(),
)
def test_evaluate_gate_never_raises(evidence: dict[str, Any], strict: bool) -> None:
    data = {**PROPERTY_GATE, "checkpoint": {"strict": strict}}
    result = evaluate_gate(load_gate(data, source=SOURCE), evidence)
    assert isinstance(result, GateEvaluation)
    assert result.passed is (not result.problems)
    if not strict:
        assert all(p.rule in ("required", "type") for p in result.problems)
    for problem in result.problems + result.warnings:
        assert problem.message and len(problem.got) <= 80


@settings(max_examples=100, deadline=None)
@given(evidence=json_values)
def test_evaluate_gate_never_raises_on_any_payload(evidence: Any) -> None:
    result = evaluate_gate(load_gate(PROPERTY_GATE, source=SOURCE), evidence)
    assert isinstance(result, GateEvaluation)


@pytest.mark.parametrize("pattern", [r"^(a+)+$", r"(\w*)*", r"(x{2,})+y"])
def test_nested_quantifiers_are_refused_at_load(pattern: str) -> None:
    with pytest.raises(GateDefinitionError) as err:
        load_gate(
            {"evidence_schema": {"f": {"type": "string", "pattern": pattern}}}, source="g.yaml"
        )
    assert "exponential" in str(err.value)


def test_evaluation_of_large_evidence_stays_fast() -> None:

    rules = [{"name": f"r{i}", "expr": f"all(len(f) > {i} - 10 for f in files)"} for i in range(8)]
    gate = load_gate(
        {"evidence_schema": {"files": {"type": "list"}}, "rules": rules}, source="g.yaml"
    )
    start = time.monotonic()
    evaluate_gate(gate, {"files": ["a"] * 60_000})  # ~ the 256 KiB evidence cap
    assert time.monotonic() - start < 1.5  # the workflow's deadlock detector fires at 2 s
