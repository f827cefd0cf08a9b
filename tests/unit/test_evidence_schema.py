"""The evidence contract as JSON Schema agrees with the gate that enforces it: every
shipped gate's documented example validates against its schema, and values the schema
refuses are refused by the gate too (so a client can build evidence from the schema).

Every example a session shows passes its own gate: each phase of each shipped workflow
is rendered as the worker renders it (static phases; spec_execution_v1's dynamic phases
over every real tasks.md in tests/fixtures/tasks/real and examples/specs), and its
``example_evidence`` passes ``evaluate_gate`` and validates against the gate's schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from library_helpers import read_gate, render, static_ctx, static_phases

from phasegate import SHIPPED_LIBRARY
from phasegate.activities.definitions import DefinitionActivities
from phasegate.activities.definitions import example_evidence as documented_example
from phasegate.activities.library import find_workflow, list_workflows, load_gate_file
from phasegate.domain.evidence_schema import field_json_schema, gate_json_schema
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import FieldSpec, load_gate
from phasegate.domain.session.messages import PhaseDefinition, SessionOptions
from phasegate.domain.session.plan import LoadSessionRequest

REPO = Path(__file__).resolve().parents[2]
SPECS = [
    *sorted(p for p in (REPO / "tests/fixtures/tasks/real").glob("*.md") if p.name != "SOURCES.md"),
    *sorted((REPO / "examples/specs").glob("*/tasks.md")),
]


def _static_gates() -> list[tuple[str, Path]]:
    out = []
    for wf in list_workflows([SHIPPED_LIBRARY]):
        for gate in sorted(Path(wf.path).glob("phases/[0-9]*/gate-definition.yaml")):
            out.append((wf.metadata.workflow_type, gate))
    return out


GATES = _static_gates()


def test_field_schema_carries_every_declared_check() -> None:
    spec = FieldSpec(type="integer", required=True, description="how many", min=1, max=9,
                     validator="positive")  # fmt: skip
    schema = field_json_schema(spec, {"positive": "lambda x: x > 0"})
    assert schema == {
        "type": "integer",
        "description": "how many",
        "minimum": 1,
        "maximum": 9,
        "x-phasegate-validator": {"name": "positive", "expr": "lambda x: x > 0"},
    }
    text = field_json_schema(FieldSpec(type="string", min_length=3, max_length=5, pattern="^a"))
    assert (text["minLength"], text["maxLength"], text["pattern"]) == (3, 5, "^a")
    items = field_json_schema(FieldSpec(type="list", min_length=1))
    assert items == {"type": "array", "minItems": 1}
    assert field_json_schema(FieldSpec(type="string", enum=["a", "b"]))["enum"] == ["a", "b"]


def test_gate_schema_lists_required_fields_and_rules() -> None:
    gate = load_gate(
        {
            "checkpoint": {"strict": False},
            "evidence_schema": {
                "run": {"type": "integer", "required": True},
                "passed": {"type": "integer", "required": True},
                "note": {"type": "string", "required": False},
            },
            "rules": [{"name": "le", "expr": "passed <= run", "message": "too many"}],
        },
        source="test",
    )
    schema = gate_json_schema(gate)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["run", "passed"]
    assert schema["x-phasegate-rules"] == [
        {"name": "le", "expr": "passed <= run", "message": "too many"}
    ]
    assert schema["x-phasegate-strict"] is False


@pytest.mark.parametrize(
    "workflow, gate_file", GATES, ids=[f"{w}-{g.parent.name}" for w, g in GATES]
)
def test_documented_example_validates_against_the_schema(workflow: str, gate_file: Path) -> None:
    gate = read_gate(gate_file)
    schema = gate_json_schema(gate)
    jsonschema.Draft202012Validator.check_schema(schema)
    example = _example(gate_file.parent / "phase.md")
    assert example, f"{gate_file.parent}/phase.md documents no evidence example"
    jsonschema.validate(example, schema)
    assert evaluate_gate(gate, example).passed


@pytest.mark.parametrize(
    "workflow, gate_file", GATES, ids=[f"{w}-{g.parent.name}" for w, g in GATES]
)
def test_what_the_schema_refuses_the_gate_refuses(workflow: str, gate_file: Path) -> None:
    gate = load_gate_file(gate_file)
    schema = gate_json_schema(gate)
    example = _example(gate_file.parent / "phase.md")
    validator = jsonschema.Draft202012Validator(schema)
    for name, prop in schema["properties"].items():
        for bad in _violations(prop):
            evidence = {**example, name: bad}
            assert not validator.is_valid(evidence), (name, bad)
            assert not evaluate_gate(gate, evidence).passed, (name, bad)


def _violations(prop: dict[str, Any]) -> list[Any]:
    out: list[Any] = [None] if prop["type"] != "boolean" else ["yes"]
    if "minimum" in prop:
        out.append(prop["minimum"] - 1)
    if "maximum" in prop:
        out.append(prop["maximum"] + 1)
    if "minLength" in prop and prop["minLength"] > 0:
        out.append("x" * (prop["minLength"] - 1))
    if "minItems" in prop and prop["minItems"] > 0:
        out.append([])
    if "enum" in prop:
        out.append("not-one-of-them")
    return out


def _example(phase_md: Path) -> dict[str, Any]:
    """The example phase.md documents, rendered as the engine renders it (phase 0 of
    spec_execution_v1 lists the session's commands in it)."""
    workflow, number = phase_md.parent.parent.parent.name, int(phase_md.parent.name)
    meta = next(p for p in static_phases(workflow) if p["phase_number"] == number)
    text = documented_example(render(phase_md, static_ctx(workflow, meta)))
    return json.loads(text) if text else {}


def test_dynamic_base_gate_schema_is_valid() -> None:
    wf = find_workflow("spec_execution_v1", [SHIPPED_LIBRARY])
    gate = load_gate_file(Path(wf.path) / "phases" / "dynamic" / "gate-definition.yaml")
    jsonschema.Draft202012Validator.check_schema(gate_json_schema(gate))


# --------------------------------------------------------------------------- as sessions show them


def _session_phases(home: Path, workflow: str, spec: Path | None = None) -> list[PhaseDefinition]:
    """Every phase of a session of ``workflow`` as the worker's activities render it."""
    acts = DefinitionActivities(
        [SHIPPED_LIBRARY],
        str(home),
        spec_roots=[str(spec.parent)] if spec else [],
        allow_unsigned_approvals=True,
    )
    options = SessionOptions(spec_path=str(spec)) if spec else SessionOptions()
    plan = acts.plan(LoadSessionRequest(workflow_type=workflow, target="", options=options))
    wf = find_workflow(workflow, [SHIPPED_LIBRARY])
    return [acts.build_phase(wf, plan.ref, i) for i in range(plan.ref.total_phases)]


def _example_problems(phase: PhaseDefinition, where: str) -> list[str]:
    """Why the example ``phase`` shows does not pass its gate (empty when it does)."""
    if not phase.example_evidence:
        return [f"{where}: shows no evidence example"]
    example = json.loads(phase.example_evidence)
    result = evaluate_gate(phase.gate, example)
    out = [f"{where}: {p.field}: {p.message}" for p in result.problems]
    schema_errors = jsonschema.Draft202012Validator(gate_json_schema(phase.gate)).iter_errors(
        example
    )
    return out + [f"{where}: schema: {e.message}" for e in schema_errors]


@pytest.mark.parametrize(
    "workflow", ["spec_execution_v1", "test_generation_v3", "production_code_v2"]
)
def test_every_static_phase_shows_an_example_that_passes(tmp_path: Path, workflow: str) -> None:
    spec = REPO / "examples/specs/todo-api/tasks.md" if workflow == "spec_execution_v1" else None
    wf = find_workflow(workflow, [SHIPPED_LIBRARY])
    phases = _session_phases(tmp_path, workflow, spec)[: len(wf.metadata.static_phases)]
    assert phases
    problems = [q for p in phases for q in _example_problems(p, f"{workflow} phase {p.label}")]
    assert problems == []


def test_every_dynamic_phase_shows_an_example_that_passes(tmp_path: Path) -> None:
    """Over every real spec: the example confirms each Validation Gate item by the field
    name the gate uses, lists every required task, and passes a phase without tasks."""
    problems = []
    for n, spec in enumerate(SPECS):
        for phase in _session_phases(tmp_path / str(n), "spec_execution_v1", spec)[1:]:
            problems += _example_problems(phase, f"{spec.name} phase {phase.label}")
    assert problems == []
