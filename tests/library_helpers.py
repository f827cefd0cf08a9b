"""Helpers shared by the shipped-library tests (test_library_content_*.py).

They read library/ the way a session does: metadata.json, gate-definition.yaml,
and the phase and task templates rendered in a Jinja2 sandbox with the context
(and the legacy ``[PHASE_NAME]``-style names) the engine passes.
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

from phasegate.activities._phase_render import session_context
from phasegate.activities._session_commands import SAMPLE_COMMANDS
from phasegate.activities._spec_phases import validation_items
from phasegate.activities.definitions import DefinitionActivities
from phasegate.activities.library import find_workflow
from phasegate.domain.commands import bind_gate
from phasegate.domain.gates import GateDefinition, load_gate
from phasegate.domain.session.messages import DefinitionRef, SessionOptions
from phasegate.domain.session.plan import LoadSessionRequest
from phasegate.domain.spec import SpecPhase

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "library"
SHIPPED = ("spec_execution_v1", "test_generation_v3", "production_code_v2", "workflow_tasks_v1")
RUNS_COMMANDS = ("spec_execution_v1", "workflow_tasks_v1")  # sessions that list their commands

# Legacy names as the engine rewrites them: [PHASE_NAME] -> {{ legacy.PHASE_NAME }}.
LEGACY = re.compile(
    r"\[(PHASE_NUMBER|PHASE_NAME|PHASE_DESCRIPTION|ESTIMATED_DURATION|TASK_COUNT|"
    r"NEXT_PHASE_NUMBER|VALIDATION_GATE|TASK_ID|TASK_NAME|TASK_DESCRIPTION|ESTIMATED_TIME|"
    r"DEPENDENCIES|ACCEPTANCE_CRITERIA|NEXT_TASK_NUMBER)\]"
)

ENV = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True, undefined=StrictUndefined)


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
    """A gate file as a session serves it (with the sample commands, in the workflows whose
    sessions run commands)."""
    gate = load_gate(yaml.safe_load(path.read_text(encoding="utf-8")), source=str(path))
    return bind_gate(gate, SAMPLE_COMMANDS, None) if set(RUNS_COMMANDS) & set(path.parts) else gate


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


def session_ctx(workflow: str, total: int, index: int = 0) -> dict[str, Any]:
    """``session`` as the engine passes it: spec_execution_v1 and workflow_tasks_v1
    sessions run commands."""
    ref = DefinitionRef(
        workflow_type=workflow,
        target="src/todo_api",
        total_phases=total,
        static_phase_count=1,
        commands=SAMPLE_COMMANDS if workflow in RUNS_COMMANDS else None,
    )
    return session_context(ref, index)


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
            "session": session_ctx(workflow, len(phases), number),
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
    items = validation_items(
        read_gate(LIBRARY / "spec_execution_v1" / "phases" / "dynamic" / "gate-definition.yaml"),
        SpecPhase(number=1, name="Domain Model and Storage", line=9, validation_gate=gate),
    )
    phase = {
        "number": 3 if last else 1,
        "label": "1",
        "name": "Domain Model and Storage",
        "description": "" if bare else "A validated model and an in-memory repository.",
        "estimated_duration": "" if bare else "1.5 hours",
        "tasks": tasks,
        "validation_gate": gate,
        "validation_items": items,
        "commands": [
            {"name": "tests_pass", "command": "python3 -m pytest -q", "source": "pyproject.toml"}
        ],
    }
    return _with_legacy(
        {
            "session": session_ctx("spec_execution_v1", 4, 3 if last else 1),
            "phase": phase,
            "spec": {
                "title": "" if bare else "Implementation Tasks: Todo API",
                "source": "tasks.md",
            },
            "task_count": len(tasks),
            "next_phase_number": None if last else 2,
        }
    )


def engine_phases(tmp_path: Path, workflow: str, spec: str | None = None) -> list[Any]:
    """Every phase of a session as the worker's activities build it (no server)."""
    # The target is a name only (no folder): the spec is allowed through spec_roots.
    acts = DefinitionActivities(
        [str(LIBRARY)],
        str(tmp_path / "home"),
        spec_roots=[str(ROOT / "examples")],
        allow_unsigned_approvals=True,  # the approval gates are checked, not signed, here
    )
    options = SessionOptions(spec_path=str(ROOT / spec)) if spec else SessionOptions()
    plan = acts.plan(
        LoadSessionRequest(workflow_type=workflow, target="src/todo_api", options=options)
    )
    wf = find_workflow(workflow, [str(LIBRARY)])
    return [acts.build_phase(wf, plan.ref, i) for i in range(plan.ref.total_phases)]
