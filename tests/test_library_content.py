"""The shipped workflow library (library/) is complete, loadable and strict.

Unit tests: no Temporal server. They read the files the way a session does
(metadata.json, gate-definition.yaml, Jinja2 sandbox templates) and check that
every phase's documented evidence example passes its own gate, while sloppy
evidence does not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from phasegate.domain.gate_fallback import gate_from_checklist
from phasegate.domain.gates import GateDefinition, evaluate_gate, load_gate
from phasegate.domain.library import WorkflowMetadata

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "library"
SHIPPED = ("spec_execution_v1", "test_generation_v3", "production_code_v2")

# Legacy names as the engine rewrites them: [PHASE_NAME] -> {{ legacy.PHASE_NAME }}.
LEGACY = re.compile(
    r"\[(PHASE_NUMBER|PHASE_NAME|PHASE_DESCRIPTION|ESTIMATED_DURATION|TASK_COUNT|"
    r"NEXT_PHASE_NUMBER|VALIDATION_GATE|TASK_ID|TASK_NAME|TASK_DESCRIPTION|ESTIMATED_TIME|"
    r"DEPENDENCIES|ACCEPTANCE_CRITERIA|NEXT_TASK_NUMBER)\]"
)

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

ENV = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True, undefined=StrictUndefined)


# --------------------------------------------------------------------------- helpers


def metadata(workflow: str) -> dict[str, Any]:
    return json.loads((LIBRARY / workflow / "metadata.json").read_text(encoding="utf-8"))


def static_phases(workflow: str) -> list[dict[str, Any]]:
    return [p for p in metadata(workflow)["phases"] if isinstance(p["phase_number"], int)]


def static_phase_params() -> list[Any]:
    return [
        pytest.param(w, p["phase_number"], id=f"{w}/phase-{p['phase_number']}")
        for w in SHIPPED
        for p in static_phases(w)
    ]


def read_gate(path: Path) -> GateDefinition:
    return load_gate(yaml.safe_load(path.read_text(encoding="utf-8")), source=str(path))


def render(path: Path, context: dict[str, Any]) -> str:
    source = LEGACY.sub(lambda m: "{{ legacy." + m.group(1) + " }}", path.read_text("utf-8"))
    return ENV.from_string(source).render(**context)


def evidence_example(markdown: str, where: str) -> dict[str, Any]:
    """The first ```json block under the '## Evidence' heading."""
    head = re.search(r"^## Evidence\s*$", markdown, re.MULTILINE)
    assert head, f"{where}: no '## Evidence' heading"
    block = re.search(r"^```json\s*\n(.*?)^```", markdown[head.end() :], re.MULTILINE | re.DOTALL)
    assert block, f"{where}: no ```json example under '## Evidence'"
    data = json.loads(block.group(1))
    assert isinstance(data, dict), f"{where}: the evidence example must be a JSON object"
    return data


def session_ctx(workflow: str, total: int) -> dict[str, Any]:
    return {"workflow_type": workflow, "target": "src/todo_api", "total_phases": total}


def static_ctx(workflow: str, phase: dict[str, Any]) -> dict[str, Any]:
    """What the engine passes to a static phase.md / task file."""
    phases = metadata(workflow)["phases"]
    number = phase["phase_number"]
    tasks = [
        {**t, "id": str(t["task_number"]), "number": k} for k, t in enumerate(phase["tasks"], 1)
    ]
    phase_ctx = {
        "number": number,
        "label": str(number),
        "name": phase["phase_name"],
        "description": phase["purpose"],
        "estimated_duration": phase["estimated_effort"],
        "tasks": tasks,
        "validation_gate": phase["validation_criteria"],
    }
    return _with_legacy(
        {
            "session": session_ctx(workflow, len(phases)),
            "phase": phase_ctx,
            "spec": {"title": "", "source": ""},
            "task_count": len(tasks),
            "next_phase_number": number + 1 if number + 1 < len(phases) else None,
        }
    )


def _with_legacy(ctx: dict[str, Any]) -> dict[str, Any]:
    phase = ctx["phase"]
    ctx["legacy"] = {
        "PHASE_NUMBER": phase["number"],
        "PHASE_NAME": phase["name"],
        "PHASE_DESCRIPTION": phase["description"],
        "ESTIMATED_DURATION": phase["estimated_duration"] or "not estimated",
        "TASK_COUNT": len(phase["tasks"]),
        "NEXT_PHASE_NUMBER": ctx["next_phase_number"] or "none (last phase)",
        "VALIDATION_GATE": "\n".join(f"- [ ] {i}" for i in phase["validation_gate"]) or "- none",
    }
    return ctx


def task_ctx(ctx: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    count = ctx["task_count"]
    nxt = task["number"] + 1 if task["number"] < count else None
    legacy = {
        **ctx["legacy"],
        "TASK_ID": task["id"],
        "TASK_NAME": task["name"],
        "TASK_DESCRIPTION": task.get("description") or task.get("purpose", ""),
        "ESTIMATED_TIME": task.get("estimated_time") or "not estimated",
        "DEPENDENCIES": ", ".join(task.get("dependencies") or []) or "None",
        "ACCEPTANCE_CRITERIA": "\n".join(f"- {c}" for c in task.get("acceptance_criteria") or [])
        or "- none stated",
        "NEXT_TASK_NUMBER": nxt or "none (last task of the phase)",
    }
    return {**ctx, "task": task, "next_task_number": nxt, "legacy": legacy}


def spec_task(tid: str, name: str, number: int, **extra: Any) -> dict[str, Any]:
    base = {
        "id": tid,
        "number": number,
        "name": name,
        "description": "",
        "status": "todo",
        "optional": False,
        "parallel": False,
        "stories": [],
        "estimated_time": "",
        "dependencies": [],
        "acceptance_criteria": [],
        "requirements": [],
        "line": 10 + number,
    }
    return {**base, **extra}


def dynamic_ctx(*, last: bool = False, bare: bool = False) -> dict[str, Any]:
    """A dynamic phase as the engine renders it: phase 1 of the todo-api spec.

    ``bare`` drops every optional piece (no gate items, no criteria, no
    estimates) to prove the template copes with a minimal tasks.md.
    """
    tasks = [
        spec_task(
            "1.1",
            "Create the Todo model",
            1,
            status="done",
            estimated_time="30 minutes",
            acceptance_criteria=["Titles are stripped", "TodoUpdate rejects an empty body"],
            requirements=["1.1"],
        ),
        spec_task(
            "1.2",
            "Implement the in-memory repository",
            2,
            parallel=True,
            stories=["US1"],
            dependencies=["1.1"],
            acceptance_criteria=["Ids unique under concurrent add"],
            description="Dict plus a lock-guarded counter.",
        ),
        spec_task("1.3", "Benchmark the repository", 3, optional=True, dependencies=["1.1", "1.2"]),
    ]
    gate = ["All model and repository tests pass", "Repository is injected, not a global"]
    if bare:
        tasks = [spec_task("T001", "Create project structure", 1)]
        gate = []
    phase = {
        "number": 3 if last else 1,
        "label": "1",
        "name": "Domain Model and Storage",
        "description": "" if bare else "A validated model and an in-memory repository.",
        "estimated_duration": "" if bare else "1.5 hours",
        "tasks": tasks,
        "validation_gate": gate,
    }
    return _with_legacy(
        {
            "session": session_ctx("spec_execution_v1", 4),
            "phase": phase,
            "spec": {
                "title": "" if bare else "Implementation Tasks: Todo API",
                "source": "tasks.md",
            },
            "task_count": len(tasks),
            "next_phase_number": None if last else 2,
        }
    )


# --------------------------------------------------------------------------- structure


@pytest.mark.parametrize("workflow", SHIPPED)
def test_metadata_parses_and_names_its_directory(workflow: str) -> None:
    data = metadata(workflow)
    meta = WorkflowMetadata.model_validate(data)
    assert meta.workflow_type == workflow
    assert meta.name and meta.description and meta.version
    numbers = [p.phase_number for p in meta.static_phases]
    assert numbers == list(range(len(numbers))), "static phases are numbered 0..N-1"
    for phase in data["phases"]:
        for key in ("phase_name", "purpose", "estimated_effort"):
            assert phase.get(key), f"{workflow} phase {phase['phase_number']}: {key} is empty"
        assert phase["key_deliverables"] and phase["validation_criteria"]
        if isinstance(phase["phase_number"], int):
            assert len(phase["tasks"]) >= 2, "a static phase has task files"
            assert [t["task_number"] for t in phase["tasks"]] == list(
                range(1, len(phase["tasks"]) + 1)
            )


@pytest.mark.parametrize("workflow", SHIPPED)
def test_every_phase_has_content_gate_and_task_files(workflow: str) -> None:
    wdir = LIBRARY / workflow
    for phase in static_phases(workflow):
        pdir = wdir / "phases" / str(phase["phase_number"])
        assert (pdir / "phase.md").is_file(), pdir
        assert (pdir / "gate-definition.yaml").is_file(), pdir
        for task in phase["tasks"]:
            assert re.fullmatch(r"task-\d+-[a-z0-9-]+\.md", task["file"]), task["file"]
            assert task["file"].startswith(f"task-{task['task_number']}-")
            assert (pdir / task["file"]).is_file(), pdir / task["file"]
            assert task["name"] and task["purpose"]
        listed = {t["file"] for t in phase["tasks"]}
        on_disk = {f.name for f in pdir.glob("task-*.md")}
        assert on_disk == listed, f"{pdir}: task files not listed in metadata.json"


def test_spec_execution_is_dynamic_with_templates_and_base_gate() -> None:
    data = metadata("spec_execution_v1")
    assert data["dynamic_phases"] is True
    assert [p["phase_number"] for p in data["phases"]] == [0, "1-N"]
    cfg = data["dynamic_config"]
    assert cfg["source_type"] == "spec_tasks_md"
    assert cfg["source_path_key"] == "spec_path"
    assert cfg["parser"] == "spec_tasks_parser"
    wdir = LIBRARY / "spec_execution_v1"
    for key in ("phase", "task"):
        assert (wdir / cfg["templates"][key]).is_file()
    assert (wdir / "phases" / "dynamic" / "gate-definition.yaml").is_file()
    for doc in ("task-parser.md", "validation-gates.md", "dependency-resolver.md"):
        assert (wdir / "core" / doc).stat().st_size > 500, doc


@pytest.mark.parametrize("workflow", SHIPPED)
def test_core_docs_exist(workflow: str) -> None:
    docs = list((LIBRARY / workflow / "core").glob("*.md"))
    assert docs, f"{workflow}/core has no helper docs"


# --------------------------------------------------------------------------- gates


def all_gate_files() -> list[Path]:
    return sorted(LIBRARY.glob("*/phases/*/gate-definition.yaml"))


def test_gate_files_found() -> None:
    expected = sum(len(static_phases(w)) for w in SHIPPED) + 1  # + the dynamic base gate
    assert len(all_gate_files()) == expected


@pytest.mark.parametrize("path", all_gate_files(), ids=lambda p: str(p.relative_to(LIBRARY)))
def test_gate_yaml_is_strict_and_loads(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data["checkpoint"]["strict"] is True
    assert data["checkpoint"]["allow_override"] is False
    schema = data["evidence_schema"]
    assert len(schema) >= 3
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
    for item in ctx["phase"]["validation_gate"]:
        assert f"- [ ] {item}" in text
    assert '"phase": 1' in text and "phase 2 unlocks" in text
    assert "*(optional)*" in text

    example = evidence_example(text, "phase-template.md")
    assert example["tasks_completed"] == ["1.1", "1.2"], "every non-optional id, none optional"
    base = read_gate(wdir / "phases/dynamic/gate-definition.yaml")
    assert set(example) == set(base.fields)
    result = evaluate_gate(base, example)
    assert result.passed, [p.model_dump() for p in result.problems]

    # The engine adds one boolean per validation-gate item; confirmed, they pass too.
    items = gate_from_checklist(ctx["phase"]["validation_gate"], source="tasks.md:12")
    assert len(items.fields) == 2
    full = base.model_copy(
        update={
            "fields": {**base.fields, **items.fields},
            "validators": {**items.validators, **base.validators},
        }
    )
    assert not evaluate_gate(full, example).passed
    assert evaluate_gate(full, {**example, **{k: True for k in items.fields}}).passed


def test_dynamic_phase_template_renders_last_and_bare_phases() -> None:
    path = LIBRARY / "spec_execution_v1/phases/dynamic/phase-template.md"
    last = render(path, dynamic_ctx(last=True))
    assert "# Phase 3:" in last and "the session is complete" in last
    bare = render(path, dynamic_ctx(bare=True))
    assert "no Validation Gate items" in bare and "`T001`" in bare
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
    assert '{"phase": 1, "task": 2}' in text  # fetch the next task
    assert "Note `1.1` for" in text and not LEGACY.search(text)  # the legacy [TASK_ID]

    text = render(path, second)
    assert "`1.1` must be complete" in text and "[P]" in text and "US1" in text
    assert "Dict plus a lock-guarded counter." in text

    text = render(path, third)
    assert "optional" in text and "None written" in text
    assert "last task of phase 1" in text and "submit evidence for phase 1" in text

    bare = dynamic_ctx(bare=True)
    render(path, task_ctx(bare, bare["phase"]["tasks"][0]))


# --------------------------------------------------------------------------- through the engine


def engine_phases(tmp_path: Path, workflow: str, spec: str | None = None) -> list[Any]:
    """Every phase of a session as the worker's activities build it (no server)."""
    from phasegate.activities.definitions import DefinitionActivities
    from phasegate.activities.library import find_workflow
    from phasegate.domain.messages import LoadSessionRequest, SessionOptions

    acts = DefinitionActivities([str(LIBRARY)], str(tmp_path / "home"))
    options = SessionOptions(spec_path=str(ROOT / spec)) if spec else SessionOptions()
    plan = acts.plan(
        LoadSessionRequest(workflow_type=workflow, target="src/todo_api", options=options)
    )
    wf = find_workflow(workflow, [str(LIBRARY)])
    return [acts.build_phase(wf, plan.ref, i) for i in range(plan.ref.total_phases)]


def test_library_check_is_clean() -> None:
    from phasegate.activities.library_check import check_library

    report = check_library(str(LIBRARY))
    assert report.errors == [] and report.warnings == []
    assert sorted(report.workflows) == sorted(SHIPPED)


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
