"""The gate of a dynamic phase: base gate + checklist items + every required task id."""

from __future__ import annotations

from phasegate.activities._spec_phases import dynamic_gate as _dynamic_gate
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import FieldSpec, GateDefinition
from phasegate.domain.spec import SpecPhase, SpecTask


def _phase(n: int, *, optional_last: bool = False) -> SpecPhase:
    tasks = [
        SpecTask(id=f"T{i:04d}", name="t", line=i + 2, optional=optional_last and i == n - 1)
        for i in range(n)
    ]
    return SpecPhase(number=1, name="Big", tasks=tasks, validation_gate=["CI is green"], line=1)


def test_a_thousand_required_tasks_are_all_checked() -> None:
    phase = _phase(1000)
    gate = _dynamic_gate(
        GateDefinition(fields={"tasks_completed": FieldSpec(type="list")}),
        phase,
        source="tasks.md:1",
    )
    everything = {"tasks_completed": [t.id for t in phase.tasks], "ci_is_green": True}
    assert evaluate_gate(gate, everything).passed
    missing_last = {**everything, "tasks_completed": everything["tasks_completed"][:-1]}
    result = evaluate_gate(gate, missing_last)
    assert not result.passed and "T0999" in result.problems[0].message


def test_optional_tasks_and_checklist_items() -> None:
    phase = _phase(3, optional_last=True)
    gate = _dynamic_gate(
        GateDefinition(fields={"tasks_completed": FieldSpec(type="list")}),
        phase,
        source="tasks.md:1",
    )
    assert "ci_is_green" in gate.fields
    ok = evaluate_gate(gate, {"tasks_completed": ["T0000", "T0001"], "ci_is_green": True})
    assert ok.passed  # the optional T0002 may be left out
    no_ci = evaluate_gate(gate, {"tasks_completed": ["T0000", "T0001"], "ci_is_green": False})
    assert not no_ci.passed
