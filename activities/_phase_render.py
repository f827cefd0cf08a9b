"""Rendering context for phase and task templates, and static phases as prAxIs serves
them (tasks from ``task-N-*.md`` files, files that are not Jinja2 templates verbatim).

Used by ``DefinitionActivities`` and by ``phasegate library check``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from phasegate.activities.library import (
    WorkflowDir,
    example_evidence,
    first_heading,
    load_gate_file,
    present,
    read_text,
    served_tasks,
    static_phase_dir,
)
from phasegate.activities.templates import LEGACY_PLACEHOLDERS, Renderer
from phasegate.domain.errors import DefinitionError, TemplateNotFound
from phasegate.domain.library import LibraryIssue, phase_overview
from phasegate.domain.session.messages import DefinitionRef, PhaseDefinition, RenderedTask

__all__ = [
    "interface_words",
    "phase_context",
    "render_static_phase",
    "session_context",
    "task_context",
]


def render_static_phase(
    renderer: Renderer, wf: WorkflowDir, session: dict[str, Any], index: int
) -> tuple[PhaseDefinition, list[LibraryIssue]]:
    """Static phase ``index`` as prAxIs serves it: tasks from its ``task-N-*.md`` files,
    an overview when ``phase.md`` is absent, and files that are not Jinja2 templates
    served verbatim. Also returns a warning for each of those substitutions.

    Raises:
        DefinitionError: the phase has neither ``phase.md`` nor task files, or its gate
            file is invalid.
    """
    meta_phase = wf.metadata.static_phases[index]
    pdir = static_phase_dir(wf.path, meta_phase)
    phase_md = pdir / "phase.md"
    served = served_tasks(wf.path, meta_phase)[0] if pdir.is_dir() else []
    issues: list[LibraryIssue] = []  # disagreements with metadata.json: workflow_issues()
    if not present(phase_md) and not served:
        raise DefinitionError(
            "the phase cannot be served: no phase.md and no task-N-*.md files",
            where=str(phase_md),
            hint="add phase.md or task files to the folder, or fix phase_number in metadata.json",
        )
    label = str(meta_phase.phase_number)
    phase_ctx = {
        "number": index,
        "label": label,
        "name": meta_phase.phase_name,
        "description": meta_phase.purpose,
        "estimated_duration": meta_phase.estimated_effort,
        "tasks": [{**s.meta.model_dump(), "id": s.id} for s in served],
        "validation_gate": list(getattr(meta_phase, "validation_criteria", None) or []),
    }
    ctx = phase_context(session, phase_ctx, index)
    text = ""
    if present(phase_md):
        content = text = _render(renderer, phase_md, ctx, issues)
    else:
        content = phase_overview(label, meta_phase, served)
    tasks = []
    for k, s in enumerate(served, start=1):
        task_ctx = {**s.meta.model_dump(), "id": s.id, "number": k}
        body = _render(renderer, pdir / s.file, task_context(ctx, task_ctx), issues)
        name = s.meta.name or first_heading(body)
        tasks.append(RenderedTask(id=s.id, number=k, name=name, content=body))
    gate_file = pdir / "gate-definition.yaml"
    gate = load_gate_file(gate_file, fallback_markdown=text)
    if not present(gate_file) and text and not gate.fields:
        issues.append(
            LibraryIssue(
                "warning",
                str(phase_md),
                "no gate-definition.yaml and no requirements found in phase.md",
                "any evidence passes, as in prAxIs' permissive fallback",
            )
        )
    phase = PhaseDefinition(
        example_evidence=example_evidence(content),
        index=index,
        label=label,
        name=meta_phase.phase_name or f"Phase {label}",
        content=content,
        tasks=tasks,
        gate=gate,
        requires_approval=meta_phase.requires_approval,
        approvers=list(meta_phase.approvers),
    )
    return phase, issues


_LEGACY = re.compile(r"\[(" + "|".join(LEGACY_PLACEHOLDERS) + r")\]")


def _render(renderer: Renderer, path: Path, ctx: dict[str, Any], issues: list[LibraryIssue]) -> str:
    """Render ``path``; a prAxIs file that is not a valid Jinja2 template for phasegate
    (``{{ task_name }}`` in an example, say) is served as written, legacy names filled."""
    try:
        return renderer.render(path, ctx)
    except TemplateNotFound:
        raise
    except DefinitionError as exc:
        legacy = ctx["legacy"]
        text = _LEGACY.sub(lambda m: str(legacy.get(m.group(1), m.group(0))), read_text(path))
        issues.append(
            LibraryIssue(
                "warning",
                exc.where or str(path),
                exc.message,
                "served verbatim with [PLACEHOLDER] names filled, as prAxIs serves it",
            )
        )
        return text


def session_context(ref: DefinitionRef, index: int) -> dict[str, Any]:
    """What templates see as ``session``: workflow type, target, phase count, the
    session's commands (``commands``: ``{name, command, source, when}``, and
    ``command_notes``) and ``how``, the agent's interface's words for phase ``index``."""
    found = ref.commands
    return {
        "workflow_type": ref.workflow_type,
        "target": ref.target,
        "total_phases": ref.total_phases,
        "runs_commands": found is not None,
        "commands": [
            {
                "name": c.name,
                "command": c.text,
                "source": c.source,
                "when": f"task {c.task}'s {c.role.replace('_', '-')}"
                if c.task is not None
                else "every phase that claims tests pass"
                if c.spec_phase is None
                else f"spec phase {c.phase_label}'s checkpoint",
            }
            for c in (found.all() if found else [])
        ],
        "command_listing": found.listing() if found else [],
        "command_notes": list(found.notes) if found else [],
        "interface": ref.interface or "",
        "how": interface_words(ref.interface, index),
    }


def interface_words(interface: str | None, index: int) -> dict[str, str]:
    """How an agent on ``interface`` (cli, mcp, sdk; None: all three) reads a phase, a
    task and the status, and submits phase ``index``'s evidence: markdown phrases."""
    words = {
        "cli": {
            "submit": f"`phasegate submit SESSION --phase {index} --file evidence.json`",
            "phase": "`phasegate phase SESSION`",
            "task": f"`phasegate task SESSION {index} TASK`",
            "status": "`phasegate status SESSION`",
        },
        "mcp": {
            "submit": f"the `submit_checkpoint` tool (`phase`: {index}, `evidence`: {{...}})",
            "phase": "the `get_current_phase` tool",
            "task": f'the `task` tool (`action`: "show", `phase`: {index}, `task_id`: TASK)',
            "status": "the `get_session_state` tool",
        },
        "sdk": {
            "submit": f"`await client.submit(session_id, {index}, evidence)`",
            "phase": "`await client.phase(session_id)`",
            "task": f"`await client.task(session_id, {index}, TASK)`",
            "status": "`await client.status(session_id)`",
        },
    }
    if interface in words:
        return words[interface]
    cli, mcp, sdk = words["cli"], words["mcp"], words["sdk"]
    return {
        key: f"{cli[key]} (MCP: {mcp[key]}; SDK: {sdk[key]})"
        for key in ("submit", "phase", "task", "status")
    }


def phase_context(session: dict[str, Any], phase: dict[str, Any], index: int) -> dict[str, Any]:
    total = session["total_phases"]
    gate_items = phase["validation_gate"]
    return {
        "session": session,
        "phase": phase,
        "spec": {"title": "", "source": ""},
        "task_count": len(phase["tasks"]),
        "next_phase_number": index + 1 if index + 1 < total else None,
        "legacy": {
            "PHASE_NUMBER": index,
            "PHASE_NAME": phase["name"],
            "PHASE_DESCRIPTION": phase["description"],
            "ESTIMATED_DURATION": phase["estimated_duration"] or "not estimated",
            "TASK_COUNT": len(phase["tasks"]),
            "NEXT_PHASE_NUMBER": index + 1 if index + 1 < total else "none (last phase)",
            "VALIDATION_GATE": "\n".join(f"- [ ] {item}" for item in gate_items) or "- none",
        },
    }


def task_context(ctx: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    count = ctx["task_count"]
    nxt = task["number"] + 1 if task["number"] < count else None
    legacy = {
        **ctx["legacy"],
        "TASK_ID": task.get("id", ""),
        "TASK_NAME": task.get("name", ""),
        "TASK_DESCRIPTION": task.get("description") or task.get("purpose", ""),
        "ESTIMATED_TIME": task.get("estimated_time") or "not estimated",
        "DEPENDENCIES": ", ".join(task.get("dependencies") or []) or "None",
        "ACCEPTANCE_CRITERIA": "\n".join(f"- {c}" for c in task.get("acceptance_criteria") or [])
        or "- none stated",
        "NEXT_TASK_NUMBER": nxt if nxt is not None else "none (last task of the phase)",
    }
    return {**ctx, "task": task, "next_task_number": nxt, "legacy": legacy}
