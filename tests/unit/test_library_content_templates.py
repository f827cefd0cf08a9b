"""The shipped library's templates render in the Jinja2 sandbox, as a session serves them.

Unit tests, no Temporal server: every static phase.md and task file renders
with no placeholders left; spec_execution_v1's dynamic phase and task templates
render a todo-api phase (also the last and a bare one) with both Jinja2 and the
legacy ``[NAME]`` placeholders, and their evidence example passes the gate the
engine builds (the base gate plus one field per Validation Gate item).
"""

from __future__ import annotations

import pytest
from library_helpers import (
    LEGACY,
    LIBRARY,
    dynamic_ctx,
    evidence_example,
    read_gate,
    render,
    static_ctx,
    static_phase_params,
    static_phases,
    task_ctx,
)

from phasegate.activities._spec_phases import dynamic_gate
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.spec import SpecPhase, SpecTask

# --------------------------------------------------------------------------- templates


@pytest.mark.parametrize(("workflow", "phase"), static_phase_params())
def test_static_content_renders_in_the_sandbox(workflow: str, phase: int) -> None:
    pdir = LIBRARY / workflow / "phases" / str(phase)
    meta_phase = next(p for p in static_phases(workflow) if p["phase_number"] == phase)
    ctx = static_ctx(workflow, meta_phase)
    text = render(pdir / "phase.md", ctx)
    assert text.startswith(f"# Phase {phase}: {meta_phase['phase_name']}")
    assert "{{" not in text and "{%" not in text
    for task in ctx["phase"]["tasks"]:
        body = render(pdir / task["file"], task_ctx(ctx, task))
        assert body.startswith(f"# Task {task['task_number']}: {task['name']}"), task["file"]
        assert "## Steps" in body or "## Checklist" in body or "## Decide" in body, task["file"]
        assert "Done when" in body, task["file"]
        assert "{{" not in body and "{%" not in body


def test_dynamic_phase_template_renders() -> None:
    wdir = LIBRARY / "spec_execution_v1"
    raw = (wdir / "phases/dynamic/phase-template.md").read_text("utf-8")
    assert "{% for" in raw and "[PHASE_NAME]" in raw, "exercise both Jinja2 and legacy names"
    ctx = dynamic_ctx()
    text = render(wdir / "phases/dynamic/phase-template.md", ctx)
    assert text.startswith("# Phase 1: Domain Model and Storage")
    assert "(Domain Model and Storage)" in text  # the legacy [PHASE_NAME]
    assert not LEGACY.search(text)
    for task in ctx["phase"]["tasks"]:
        assert f"`{task['id']}`" in text and task["name"] in text
    assert "| done |" in text and "| 1.1 |" in text  # status and dependencies columns
    assert "- [ ] Ids unique under concurrent add" in text  # acceptance criteria
    for item in ctx["phase"]["validation_items"]:  # each item with the field that checks it
        assert f"- [ ] {item['text']} → `{item['field']}`" in text
    assert "`repository_is_injected_not_a_global`" in text
    assert "--phase 1 --file evidence.json" in text and "phase 2 unlocks" in text
    assert "`submit_checkpoint` tool (`phase`: 1" in text  # MCP's words, not Temporal's
    assert "`python3 -m pytest -q`" in text  # the commands the engine runs here
    assert "*(optional)*" in text

    example = evidence_example(text, "phase-template.md")
    assert example["tasks_completed"] == ["1.1", "1.2"], "every non-optional id, none optional"
    base = read_gate(wdir / "phases/dynamic/gate-definition.yaml")
    assert evaluate_gate(base, example).passed

    # The engine adds one boolean per validation-gate item: the example confirms each.
    sp = SpecPhase(number=1, name="x", line=9, validation_gate=ctx["phase"]["validation_gate"],
                   tasks=[SpecTask(id=t["id"], name=t["name"], line=t["line"],
                                   optional=t["optional"]) for t in ctx["phase"]["tasks"]])  # fmt: skip
    full = dynamic_gate(base, sp, source="tasks.md:9")
    assert set(full.fields) - set(base.fields) == {
        "all_model_and_repository_tests_pass",
        "repository_is_injected_not_a_global",
    }
    assert set(example) == set(full.fields)
    result = evaluate_gate(full, example)
    assert result.passed, [p.model_dump() for p in result.problems]
    assert not evaluate_gate(full, {**example, "repository_is_injected_not_a_global": False}).passed


def test_dynamic_phase_template_renders_last_and_bare_phases() -> None:
    path = LIBRARY / "spec_execution_v1/phases/dynamic/phase-template.md"
    last = render(path, dynamic_ctx(last=True))
    assert "# Phase 3:" in last and "the session is complete" in last
    bare = render(path, dynamic_ctx(bare=True))
    assert "No Validation Gate item" in bare and "`T001`" in bare
    assert evidence_example(bare, "bare")["tasks_completed"] == ["T001"]


def test_dynamic_task_template_renders() -> None:
    path = LIBRARY / "spec_execution_v1/phases/dynamic/task-template.md"
    raw = path.read_text("utf-8")
    assert "{% for" in raw and "[TASK_ID]" in raw, "exercise both Jinja2 and legacy names"
    ctx = dynamic_ctx()
    first, second, third = (task_ctx(ctx, t) for t in ctx["phase"]["tasks"])

    text = render(path, first)
    assert text.startswith("# Task 1.1: Create the Todo model")
    assert "**Status:** done" in text and "30 minutes" in text
    assert "- [ ] Titles are stripped" in text
    assert "None — you can start right away." in text
    assert "`phasegate task SESSION 1 2`" in text  # fetch the next task
    assert '`task` tool (`action`: "show", `phase`: 1, `task_id`: 2)' in text
    assert "Note `1.1` for" in text and not LEGACY.search(text)  # the legacy [TASK_ID]

    text = render(path, second)
    assert "`1.1` must be complete" in text and "[P]" in text and "US1" in text
    assert "Dict plus a lock-guarded counter." in text

    text = render(path, third)
    assert "optional" in text and "None written" in text
    assert "last task of phase 1" in text and "submit evidence for phase 1" in text

    bare = dynamic_ctx(bare=True)
    render(path, task_ctx(bare, bare["phase"]["tasks"][0]))
