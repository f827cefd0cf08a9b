"""What ``phasegate library check`` knows besides the loaders: the keys metadata.json may
hold, the sample spec dynamic templates are rendered with, and the template variables a
failed render is told about.

A key phasegate does not read is most often a typo or another tool's name for a field
(``name`` where a phase needs ``phase_name``): the check warns and suggests the key
meant. prAxIs OS's own informational keys (``author``, ``key_deliverables``, ...) are
known, so a prAxIs folder loads without such warnings.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from phasegate.domain.library import DynamicConfig, PhaseMetadata, TaskMetadata, WorkflowMetadata
from phasegate.domain.spec import ParsedSpec, SpecPhase, SpecTask

__all__ = [
    "KNOWN_KEYS",
    "SAMPLE_TARGET",
    "sample_spec",
    "suggest_key",
    "undefined_hint",
    "variables",
]

SAMPLE_TARGET = "/path/to/project"
"""``session.target`` in the sample data templates are checked with."""

# Keys prAxIs OS workflows carry that phasegate shows or ignores on purpose.
_PRAXIS_TOP = {
    "author", "core_utilities", "created", "created_date", "estimated_duration", "notes",
    "primary_outputs", "quality_gates", "quality_standards", "requires_user_interaction",
    "rollback_strategy", "start_phase", "state_persistence", "strict_mode",
    "supports_dry_run", "supports_rollback", "tags", "target_language", "total_phases",
    "updated", "usage", "workflow_features",
}  # fmt: skip
_PRAXIS_PHASE = {
    "checkpoint", "evidence_gate_enabled", "file", "key_deliverables", "phase_file",
    "requires_restart", "skip_condition", "skippable", "task_execution", "validation_criteria",
}  # fmt: skip

# Read by the legacy [TASK_DESCRIPTION]-style names; any task key reaches ``task.*``.
_TASK_EXTRA = {"description", "estimated_time", "dependencies", "acceptance_criteria"}

KNOWN_KEYS: dict[str, frozenset[str]] = {
    "workflow": frozenset({*WorkflowMetadata.model_fields, "approver_keys", *_PRAXIS_TOP}),
    "phase": frozenset({*PhaseMetadata.model_fields, *_PRAXIS_PHASE}),
    "task": frozenset({*TaskMetadata.model_fields, *_TASK_EXTRA}),
    "dynamic_config": frozenset(DynamicConfig.model_fields),
    "templates": frozenset({"phase", "task"}),
}
"""Keys read or known per level of metadata.json (``phases[i]``, ``tasks[k]``, ...)."""

# Names other tools (or a first guess) use for a key, per level.
_ALIASES: dict[str, dict[str, str]] = {
    "workflow": {
        "type": "workflow_type", "id": "workflow_type", "title": "name",
        "dynamic": "dynamic_phases", "approvers": "approver_keys",
    },
    "phase": {
        "name": "phase_name", "title": "phase_name", "number": "phase_number",
        "id": "phase_number", "description": "purpose", "goal": "purpose",
        "approval": "requires_approval", "approval_required": "requires_approval",
        "requires_approvals": "requires_approval", "approver": "approvers",
        "duration": "estimated_effort", "estimated_duration": "estimated_effort",
        "effort": "estimated_effort", "criteria": "validation_criteria",
        "deliverables": "key_deliverables", "gate": "validation_criteria",
    },
    "task": {
        "title": "name", "number": "task_number", "id": "task_number",
        "path": "file", "filename": "file", "goal": "purpose",
    },
    "dynamic_config": {
        "source": "source_type", "type": "source_type",
        "template": "templates", "path_key": "source_path_key",
    },
    "templates": {"phase_template": "phase", "task_template": "task"},
}  # fmt: skip


def suggest_key(level: str, key: str) -> str | None:
    """The known key ``key`` was probably meant to be at ``level``, or None."""
    known = KNOWN_KEYS[level]
    alias = _ALIASES.get(level, {}).get(key.lower())
    if alias:
        return alias
    close = difflib.get_close_matches(key.lower(), sorted(known), n=1, cutoff=0.75)
    return close[0] if close else None


def sample_spec(source: str) -> ParsedSpec:
    """A two-phase spec exercising every field a dynamic template may use: a full phase
    (done, optional and parallel tasks, criteria, a Validation Gate) and a bare one."""
    full = SpecPhase(
        number=1,
        name="Sample phase",
        description="What the phase delivers.",
        estimated_duration="2 hours",
        line=3,
        validation_gate=["All tests pass", "`coverage_percent`: 85"],
        tasks=[
            SpecTask(
                id="1.1",
                name="First task",
                description="What to build.",
                status="done",
                stories=["US1"],
                estimated_time="30 minutes",
                acceptance_criteria=["It works"],
                requirements=["R1"],
                line=5,
            ),
            SpecTask(id="1.2", name="Second task", parallel=True, dependencies=["1.1"], line=9),
            SpecTask(id="1.3", name="Optional task", optional=True, line=11),
        ],
    )
    bare = SpecPhase(
        number=2, name="Bare phase", line=14, tasks=[SpecTask(id="T001", name="Only task", line=15)]
    )
    return ParsedSpec(source=source, title="Sample spec", phases=[full, bare])


_UNDEFINED = re.compile(r"'(\w+)' is undefined|has no attribute '(\w+)'")


def variables(ctx: dict[str, Any]) -> list[str]:
    """The variables of a template context, dotted (``phase.name``); a list of objects
    shows its items' keys once (``phase.tasks[].id``). Legacy names are not listed."""
    out: list[str] = []
    for key, value in ctx.items():
        if key == "legacy":
            continue
        if not isinstance(value, dict):
            out.append(key)
            continue
        for sub, inner in value.items():
            out.append(f"{key}.{sub}")
            if isinstance(inner, list) and inner and isinstance(inner[0], dict):
                out += [f"{key}.{sub}[].{k}" for k in inner[0]]
    return out


def undefined_hint(message: str, ctx: dict[str, Any]) -> str | None:
    """For a render failure on an undefined name: the variables ``ctx`` offers, and the
    one probably meant (``target`` -> ``session.target``, ``phase_number`` ->
    ``phase.number``). None for other failures."""
    found = _UNDEFINED.search(message)
    if not found:
        return None
    name = found.group(1) or found.group(2)
    names = [n for n in variables(ctx) if "[]" not in n]
    leaf = {n: n.rsplit(".", 1)[-1] for n in names}
    close = (
        [n for n in names if n.replace(".", "_") == name]
        or [n for n in names if leaf[n] == name]
        or [n for n in names if difflib.get_close_matches(name, [leaf[n]], cutoff=0.8)]
    )
    meant = " or ".join(f"{{{{ {n} }}}}" for n in close[:3])
    meant = f"did you mean {meant}? " if meant else ""
    items = [
        f"each of {key}.{sub}: {', '.join(inner[0])}"
        for key, value in ctx.items()
        if isinstance(value, dict) and key != "legacy"
        for sub, inner in value.items()
        if isinstance(inner, list) and inner and isinstance(inner[0], dict)
    ]
    return f"{meant}variables: {', '.join([*names, *items])}"
