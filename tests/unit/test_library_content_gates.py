"""The shipped library's gates are strict: documented evidence passes, sloppy evidence not.

Unit tests, no Temporal server: each gate file is strict and loads; the
approval gates sit where metadata.json says; every phase's documented evidence
example passes its own gate, while missing, mistyped or lazy values, and
inconsistent test counts, do not; the gates the engine builds for a session
(dynamic phases included) accept the documented examples too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from library_helpers import (
    LEGACY,
    LIBRARY,
    SHIPPED,
    engine_phases,
    evidence_example,
    metadata,
    read_gate,
    render,
    static_ctx,
    static_phase_params,
    static_phases,
)

from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import load_gate

# Fields whose empty / zero value is legitimate evidence (pure code has no
# dependencies, a clean run has 0 failures, ...). Every other field must reject
# a sloppy value.
MAY_BE_EMPTY = {
    "external_dependencies",
    "mock_targets",
    "constraints",
    "out_of_scope",
    "issues_fixed",
    "tests_failed",
    "lint_errors",
    "type_errors",
    "security_issues_open",
    "slowest_test_seconds",
}


def all_gate_files() -> list[Path]:
    return sorted(LIBRARY.glob("*/phases/*/gate-definition.yaml"))


def test_gate_files_found() -> None:
    dynamic = sum(bool(metadata(w).get("dynamic_phases")) for w in SHIPPED)  # their base gates
    expected = sum(len(static_phases(w)) for w in SHIPPED) + dynamic
    assert len(all_gate_files()) == expected


@pytest.mark.parametrize("path", all_gate_files(), ids=lambda p: str(p.relative_to(LIBRARY)))
def test_gate_yaml_is_strict_and_loads(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data["checkpoint"]["strict"] is True
    assert data["checkpoint"]["allow_override"] is False
    schema = data["evidence_schema"]
    # A gate on the task board (tasks_complete: the board is the evidence) asks for a summary.
    assert len(schema) >= (1 if data["checkpoint"].get("tasks_complete") else 3)
    for name, spec in schema.items():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        assert spec["type"] in {"boolean", "integer", "number", "string", "list", "dict"}
        assert spec["required"] is True, f"{name}: every shipped field is required"
        assert len(spec.get("description", "")) >= 15, f"{name}: describe what to submit"
        if spec["type"] == "boolean":
            # A boolean that may be false proves nothing.
            assert data["validators"][spec["validator"]] == "lambda x: x == True", name
    gate = load_gate(data, source=str(path))  # validators compile, rules name real fields
    assert gate.strict and list(gate.fields) == list(schema)


def test_dynamic_base_gate_fields() -> None:
    gate = read_gate(LIBRARY / "spec_execution_v1/phases/dynamic/gate-definition.yaml")
    assert list(gate.fields) == ["tasks_completed", "tests_passing", "files_changed", "summary"]
    assert gate.fields["tasks_completed"].type == "list"
    assert gate.fields["tasks_completed"].min_length == 1
    assert "task id" in gate.fields["tasks_completed"].description.lower()
    assert gate.fields["summary"].min_length == 20
    assert not gate.approval.required


@pytest.mark.parametrize(
    ("workflow", "phase"),
    [("spec_execution_v1", 0), ("test_generation_v3", 2), ("production_code_v2", 1)],
)
def test_approval_gates(workflow: str, phase: int) -> None:
    gate = read_gate(LIBRARY / workflow / "phases" / str(phase) / "gate-definition.yaml")
    assert gate.approval.required and gate.approval.approvers == ["lead"]
    meta_phase = next(p for p in static_phases(workflow) if p["phase_number"] == phase)
    assert meta_phase["requires_approval"] is True
    others = [p for p in static_phases(workflow) if p["phase_number"] != phase]
    assert not any(p.get("requires_approval") for p in others)


@pytest.mark.parametrize(("workflow", "phase"), static_phase_params())
def test_evidence_example_passes_its_gate(workflow: str, phase: int) -> None:
    pdir = LIBRARY / workflow / "phases" / str(phase)
    meta_phase = next(p for p in static_phases(workflow) if p["phase_number"] == phase)
    text = render(pdir / "phase.md", static_ctx(workflow, meta_phase))
    example = evidence_example(text, str(pdir / "phase.md"))
    gate = read_gate(pdir / "gate-definition.yaml")
    assert set(example) <= set(gate.fields), f"unknown fields: {set(example) - set(gate.fields)}"
    assert set(example) == set(gate.fields), "the example shows every field of the gate"
    result = evaluate_gate(gate, example)
    assert result.passed, [p.model_dump() for p in result.problems]
    assert not result.warnings
    for name in gate.fields:
        assert f"`{name}`" in text, f"phase.md does not explain field {name!r}"


def sloppy(value: Any) -> Any:
    """The laziest value of the same type: what a careless agent submits."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return 0
    if isinstance(value, str):
        return ""
    if isinstance(value, list):
        return []
    return {}


@pytest.mark.parametrize(("workflow", "phase"), static_phase_params())
def test_gates_reject_missing_and_sloppy_evidence(workflow: str, phase: int) -> None:
    pdir = LIBRARY / workflow / "phases" / str(phase)
    meta_phase = next(p for p in static_phases(workflow) if p["phase_number"] == phase)
    example = evidence_example(render(pdir / "phase.md", static_ctx(workflow, meta_phase)), "")
    gate = read_gate(pdir / "gate-definition.yaml")
    for name in gate.fields:
        missing = {k: v for k, v in example.items() if k != name}
        assert not evaluate_gate(gate, missing).passed, f"{name}: missing field not caught"
        wrong_type = {**example, name: "yes" if not isinstance(example[name], str) else 1}
        assert not evaluate_gate(gate, wrong_type).passed, f"{name}: wrong type not caught"
        if name in MAY_BE_EMPTY:
            continue
        lazy = {**example, name: sloppy(example[name])}
        result = evaluate_gate(gate, lazy)
        assert not result.passed, f"{name}={lazy[name]!r} should not pass"


def test_test_run_rules_catch_inconsistent_counts() -> None:
    for workflow, phase in (("test_generation_v3", 4), ("production_code_v2", 3)):
        pdir = LIBRARY / workflow / "phases" / str(phase)
        meta_phase = next(p for p in static_phases(workflow) if p["phase_number"] == phase)
        good = evidence_example(render(pdir / "phase.md", static_ctx(workflow, meta_phase)), "")
        gate = read_gate(pdir / "gate-definition.yaml")
        assert {r.name for r in gate.rules} >= {"passed_le_run", "coverage_target_met"}
        too_many = {**good, "tests_passed": good["tests_run"] + 1}
        problems = evaluate_gate(gate, too_many).problems
        assert any("passed_le_run" in p.rule or p.field == "tests_passed" for p in problems)
        some_failed = {**good, "tests_passed": good["tests_run"] - 1, "tests_failed": 1}
        assert not evaluate_gate(gate, some_failed).passed
        low = {**good, "coverage_percent": 79.9}
        assert not evaluate_gate(gate, low).passed
        assert evaluate_gate(gate, {**good, "coverage_percent": 80}).passed


def test_spec_analysis_gate_checks_path_and_counts() -> None:
    pdir = LIBRARY / "spec_execution_v1/phases/0"
    meta_phase = static_phases("spec_execution_v1")[0]
    good = evidence_example(
        render(pdir / "phase.md", static_ctx("spec_execution_v1", meta_phase)), ""
    )
    gate = read_gate(pdir / "gate-definition.yaml")
    for path in ("specs/todo-api/tasks.md", "/repo/specs/todo-api", "./todo-api", "tasks.md"):
        assert evaluate_gate(gate, {**good, "spec_path": path}).passed, path
    for prose in ("the todo spec", "see above", ""):
        assert not evaluate_gate(gate, {**good, "spec_path": prose}).passed, prose
    assert not evaluate_gate(gate, {**good, "tasks_found": 2, "phases_found": 3}).passed
    assert not evaluate_gate(gate, {**good, "execution_plan": "do it"}).passed


# --------------------------------------------------------------------------- through the engine


@pytest.mark.parametrize(
    ("workflow", "spec", "labels"),
    [
        ("spec_execution_v1", "examples/specs/todo-api", ["0", "1", "2", "3"]),
        ("spec_execution_v1", "examples/specs/speckit-sample", ["0", "1", "2", "3"]),
        ("test_generation_v3", None, ["0", "1", "2", "3", "4", "5"]),
        ("production_code_v2", None, ["0", "1", "2", "3", "4", "5"]),
    ],
)
def test_documented_evidence_passes_the_engines_gates(
    tmp_path: Path, workflow: str, spec: str | None, labels: list[str]
) -> None:
    """Render each session phase with the real renderer and gate builder; the Evidence
    example (plus `true` for each validation-gate item of a dynamic phase) passes."""
    phases = engine_phases(tmp_path, workflow, spec)
    assert [p.label for p in phases] == labels
    approvals = [p.index for p in phases if p.requires_approval or p.gate.approval.required]
    assert len(approvals) == 1 and phases[approvals[0]].gate.approval.approvers == ["lead"]
    for phase in phases:
        where = f"{workflow} phase {phase.index}"
        assert phase.content.startswith(f"# Phase {phase.index}: {phase.name}"), where
        assert not LEGACY.search(phase.content), where
        assert len(phase.tasks) >= 1 and all(t.content.strip() for t in phase.tasks), where
        assert len(phase.gate.fields) >= 3 and phase.gate.strict, where
        example = evidence_example(phase.content, where)
        assert set(example) <= set(phase.gate.fields), where
        extra = set(phase.gate.fields) - set(example)
        assert all(phase.gate.fields[f].type == "boolean" for f in extra), (where, extra)
        if extra:  # the per-item booleans the engine adds to a dynamic phase
            assert spec and phase.index > 0, where
        result = evaluate_gate(phase.gate, {**example, **{f: True for f in extra}})
        assert result.passed, (where, [p.model_dump() for p in result.problems])
        if "tests_passing" in phase.gate.fields:
            assert not evaluate_gate(phase.gate, {**example, "tests_passing": False}).passed


def test_dynamic_gate_requires_every_non_optional_task(tmp_path: Path) -> None:
    phases = engine_phases(tmp_path, "spec_execution_v1", "examples/specs/speckit-sample")
    last = phases[-1]
    assert [t.id for t in last.tasks] == ["T009", "T010", "T011"]
    example = evidence_example(last.content, "speckit phase 3")
    assert example["tasks_completed"] == ["T009", "T010"]  # T011 is optional (trailing *)
    items = {f: True for f in set(last.gate.fields) - set(example)}
    assert evaluate_gate(last.gate, {**example, **items}).passed
    partial = {**example, **items, "tasks_completed": ["T009"]}
    assert not evaluate_gate(last.gate, partial).passed
