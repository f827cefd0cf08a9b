"""From a parsed spec to a session's phases: the gate a spec phase gets, the context
its templates render with, and the size a rendered phase may reach.

Reading the spec itself is ``activities.tasks_md.read_spec``.
"""

from __future__ import annotations

import re
from typing import Any

import phasegate.activities._safe_read as safe_read
from phasegate.activities._phase_render import phase_context
from phasegate.activities._session_commands import checkpoint_items
from phasegate.domain.commands import (
    CommandRefused,
    SessionCommands,
    bind_gate,
    split_command,
)
from phasegate.domain.errors import DefinitionError
from phasegate.domain.gate_fallback import checklist_fields
from phasegate.domain.gates import FieldSpec, GateDefinition, GateRule
from phasegate.domain.session.messages import PhaseDefinition
from phasegate.domain.spec import ParsedSpec, SpecPhase
from phasegate.domain.verify import SessionCommandCheck

__all__ = [
    "PHASE_LIMIT",
    "check_phase_size",
    "claim_items",
    "dynamic_context",
    "dynamic_gate",
    "validation_items",
]

PHASE_LIMIT = 512 * safe_read.KiB
"""Largest rendered phase (its JSON) served; a 700-task phase renders to about 2 MB."""


def check_phase_size(phase: PhaseDefinition, limit: int, *, where: str, spec: bool) -> None:
    """Refuse a phase whose JSON is over ``limit`` bytes: it would freeze the session that
    serves it (every view, query and history event carries it).

    Args:
        phase: The rendered phase.
        limit: Largest size accepted, in bytes.
        where: The phase's source (``tasks.md:line`` or its folder).
        spec: Whether the phase comes from a spec (the hint then names tasks.md).

    Raises:
        DefinitionError: The phase is larger: names its size, its task count and what to do.
    """
    size = len(phase.model_dump_json())
    if size <= limit:
        return
    tasks = len(phase.tasks)
    raise DefinitionError(
        f"phase {phase.label} ({phase.name}) renders to {size // safe_read.KiB} KiB "
        f"(limit {limit // safe_read.KiB} KiB): it has {tasks} task{'s' if tasks != 1 else ''}",
        where=where,
        hint="split it into smaller phases in tasks.md (a few dozen tasks each)"
        if spec
        else "shorten the phase's files or split it into several phases",
    )


def claim_items(sp: SpecPhase, commands: SessionCommands | None) -> list[str]:
    """The Validation Gate items of ``sp`` the agent confirms: all of them, except, in a
    session that runs commands, the items naming a command it runs (the check decides)."""
    if commands is None:
        return list(sp.validation_gate)
    return [t for t, named in checkpoint_items(sp.validation_gate) if not _all_run(named)]


def _all_run(commands: list[str]) -> bool:
    """Whether every command an item names runs (then the item is not a claim)."""
    try:
        return bool(commands) and all(split_command(c) for c in commands)
    except CommandRefused:
        return False


def dynamic_gate(
    base: GateDefinition,
    sp: SpecPhase,
    *,
    source: str,
    commands: SessionCommands | None = None,
    spec_index: int | None = None,
) -> GateDefinition:
    """The gate of a phase built from a spec: the workflow's dynamic gate ``base``, one
    boolean per validation-gate item of ``sp`` (but for the items a session command
    checks), a rule requiring every required task id in ``tasks_completed`` (which may
    be empty when the phase requires no task), and the session's commands bound
    (``domain.commands.bind_gate``: the test command, this phase's checkpoint commands)."""
    items = checklist_fields(claim_items(sp, commands), source=source)[0]
    fields = {**base.fields, **{k: v for k, v in items.fields.items() if k not in base.fields}}
    rules = list(base.rules) + list(items.rules)
    required_ids = [t.id for t in sp.tasks if not t.optional]
    listed = fields.get("tasks_completed")
    if listed is not None and not required_ids and listed.min_length:
        # No task is required (none written, or all optional): an empty list is honest.
        fields["tasks_completed"] = listed.model_copy(update={"min_length": None})
    if "tasks_completed" in fields and required_ids:
        # One rule per 100 ids keeps each expression well under the evaluator's size limit.
        chunks = [required_ids[i : i + 100] for i in range(0, len(required_ids), 100)]
        for n, ids in enumerate(chunks, start=1):
            rules.append(
                GateRule(
                    name="all_required_tasks_completed" + (f"_{n}" if len(chunks) > 1 else ""),
                    expr=" and ".join(f"{t!r} in tasks_completed" for t in ids),
                    message="tasks_completed must list every required task of this phase: "
                    + ", ".join(ids),
                )
            )
    gate = base.model_copy(
        update={
            "fields": fields,
            "rules": rules,
            "validators": {**items.validators, **base.validators},
            "source": f"{base.source} + validation gate at {source}",
        }
    )
    return bind_gate(gate, commands, spec_index) if commands is not None else gate


def dynamic_context(
    session: dict[str, Any],
    spec: ParsedSpec,
    index: int,
    spec_index: int,
    base: GateDefinition,
    commands: SessionCommands | None = None,
) -> dict[str, Any]:
    """The context a dynamic phase template is rendered with (also used by
    ``phasegate library check``, so a template it accepts renders in a session).

    Args:
        session: ``{workflow_type, target, total_phases}``.
        spec: The parsed spec.
        index: The session phase number.
        spec_index: The phase's position in ``spec.phases``.
        base: The workflow's dynamic gate (for ``phase.validation_items``).
        commands: The session's commands (``phase.commands``: the ones this phase runs).

    Returns:
        ``session``, ``phase`` (number, label, name, description, estimated_duration,
        tasks, validation_gate, validation_items), ``spec``, ``task_count``,
        ``next_phase_number`` and ``legacy``; each task of ``phase.tasks`` is a task's
        context (a :class:`SpecTask` as a dict, plus its ``number``).
    """
    sp = spec.phases[spec_index]
    tasks = [{**t.model_dump(), "number": k} for k, t in enumerate(sp.tasks, start=1)]
    phase_ctx = {
        "number": index,
        "label": str(sp.number),
        "name": sp.name,
        "description": sp.description,
        "estimated_duration": sp.estimated_duration,
        "tasks": tasks,
        "validation_gate": claim_items(sp, commands),
        "validation_items": validation_items(base, sp, commands),
        "commands": _phase_commands(base, commands, spec_index),
    }
    ctx = phase_context(session, phase_ctx, index)
    ctx["spec"] = {"title": spec.title, "source": spec.source}
    return ctx


def _phase_commands(
    base: GateDefinition, commands: SessionCommands | None, spec_index: int
) -> list[dict[str, Any]]:
    """The commands a spec phase's gate runs, as ``phase.commands`` shows them:
    ``{name, command, source}`` in check order."""
    if commands is None:
        return []
    out: list[dict[str, Any]] = []
    for check in base.verify:
        if not isinstance(check, SessionCommandCheck):
            continue
        chosen = (
            ([commands.test] if commands.test else [])
            if check.command == "test"
            else [c for c in commands.checkpoints if c.spec_phase == spec_index]
        )
        for c in chosen:
            name = check.name if c is commands.test else c.name
            out.append({"name": name, "command": c.text, "source": c.source})
    return out


def validation_items(
    base: GateDefinition, sp: SpecPhase, commands: SessionCommands | None = None
) -> list[dict[str, Any]]:
    """The Validation Gate items of ``sp`` as a phase template sees them
    (``phase.validation_items``): per item its ``text``, the gate ``field`` that checks it
    and an ``example`` value that passes (``None`` when a field of ``base`` checks it,
    whose example the template already shows), so the evidence a phase documents passes
    the gate :func:`dynamic_gate` builds.

    Args:
        base: The workflow's dynamic gate (``phases/dynamic/gate-definition.yaml``).
        sp: The spec phase.

    Returns:
        One dict per non-empty item, in order; a repeated item once.
    """
    texts = claim_items(sp, commands)
    gate, names = checklist_fields(texts, source="tasks.md")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for text, name in zip(texts, names, strict=True):
        if not name or name in seen:
            continue
        seen.add(name)
        own = name not in base.fields
        example = _example_value(gate.fields[name]) if own else None
        out.append({"text": text.strip(), "field": name, "example": example})
    return out


def _example_value(spec: FieldSpec) -> Any:
    """A value a checklist field accepts: items are booleans that must be true; an item
    naming its field (``- [ ] `coverage_percent`: 85``) shows the value it states."""
    stated = spec.description
    if spec.type == "boolean":
        return spec.validator != "is_false"
    if spec.type in ("integer", "number"):
        found = re.search(r"-?\d+(?:\.\d+)?", stated)
        number = float(found.group()) if found else 1.0
        return int(number) if spec.type == "integer" else number
    if spec.type == "list":
        return [stated or "done"]
    if spec.type == "dict":
        return {"status": stated or "done"}
    return stated or "done"
