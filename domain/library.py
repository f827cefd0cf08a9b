"""metadata.json of a workflow directory (prAxIs OS compatible), as pydantic models,
and the rules that decide which tasks of a phase are served.

Unknown keys are kept (``extra="allow"``) so a prAxIs OS directory loads
unchanged and round-trips.

prAxIs serves a phase's tasks from the ``task-N-*.md`` files in its folder,
whatever ``metadata.json`` lists. :func:`reconcile_tasks` does the same and
reports every disagreement as a :class:`LibraryIssue` (a warning: the phase is
still served); only a phase with neither ``phase.md`` nor task files is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "DynamicConfig",
    "LibraryIssue",
    "PhaseMetadata",
    "ServedTask",
    "TaskFile",
    "TaskMetadata",
    "WorkflowMetadata",
    "parse_task_file",
    "phase_overview",
    "reconcile_tasks",
]

_TASK_FILE = re.compile(r"^task-(\d+)(?:-(.*))?\.md$")


class TaskMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    task_number: int
    name: str = ""
    file: str = ""
    purpose: str = ""


class PhaseMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    phase_number: int | str = Field(description='An int, or a range such as "1-N" (dynamic).')
    phase_name: str = ""
    purpose: str = ""
    estimated_effort: str = ""
    requires_approval: bool = False
    approvers: list[str] = Field(default_factory=list)
    tasks: list[TaskMetadata] = Field(default_factory=list)

    @field_validator("phase_number", mode="before")
    @classmethod
    def _digits_are_numbers(cls, value: Any) -> Any:
        # "0" is phase 0; "1-N" (a dynamic range) stays a string.
        return int(value) if isinstance(value, str) and value.strip().isdigit() else value

    @property
    def is_static(self) -> bool:
        return isinstance(self.phase_number, int)


class DynamicConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    source_type: str = "spec_tasks_md"
    source_path_key: str = "spec_path"
    templates: dict[str, str] = Field(
        default_factory=lambda: {
            "phase": "phases/dynamic/phase-template.md",
            "task": "phases/dynamic/task-template.md",
        }
    )
    parser: str = "spec_tasks_parser"


class WorkflowMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    workflow_type: str
    version: str = ""
    name: str = ""
    description: str = ""
    phases: list[PhaseMetadata] = Field(default_factory=list)
    dynamic_phases: bool = False
    dynamic_config: DynamicConfig | None = None

    @property
    def static_phases(self) -> list[PhaseMetadata]:
        """Phases with an integer number, in order of that number."""
        return sorted((p for p in self.phases if p.is_static), key=lambda p: int(p.phase_number))


@dataclass(frozen=True)
class LibraryIssue:
    """A disagreement between a workflow's files, and what phasegate does about it.

    Attributes:
        severity: ``error`` (the phase or workflow cannot be served) or ``warning``.
        where: The file (and field) concerned.
        problem: What disagrees or is missing.
        action: What phasegate does instead, or what to do.
    """

    severity: Literal["error", "warning"]
    where: str
    problem: str
    action: str

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}; {self.action}"


@dataclass(frozen=True)
class TaskFile:
    """A ``task-N-slug.md`` file name, split."""

    number: int
    file: str
    slug: str


@dataclass(frozen=True)
class ServedTask:
    """A task as a session serves it: a unique id, its metadata, its file name."""

    id: str
    meta: TaskMetadata
    file: str


def parse_task_file(name: str) -> TaskFile | None:
    """``task-3-build-plan.md`` -> ``TaskFile(3, name, "build-plan")``; None if not a task."""
    m = _TASK_FILE.match(name)
    return TaskFile(int(m.group(1)), name, m.group(2) or "") if m else None


def reconcile_tasks(
    listed: list[TaskMetadata],
    files: list[str],
    *,
    metadata_where: str,
    folder_where: str,
    label: str = "phase",
) -> tuple[list[ServedTask], list[LibraryIssue]]:
    """The tasks served for a phase: its ``task-N-*.md`` files, in order of N then name.

    Metadata entries describe the file they name (its ``name``, ``purpose``); an entry
    without ``file`` describes the folder's task with its ``task_number``.

    Args:
        listed: ``tasks`` of the phase in ``metadata.json`` (may be empty).
        files: File names in the phase folder (non-task files are ignored).
        metadata_where: ``<dir>/metadata.json: phases[i]``, where metadata fields are.
        folder_where: The phase folder, where task files are.
        label: How messages name the folder (``phases/0``).

    Returns:
        The served tasks and a warning per disagreement.
    """
    found = sorted(
        (t for t in map(parse_task_file, files) if t is not None), key=lambda t: (t.number, t.file)
    )
    by_file = {t.file: t for t in listed if t.file}
    by_number = {t.task_number: t for t in listed if not t.file}
    issues: list[LibraryIssue] = []
    served: list[ServedTask] = []
    used: set[int] = set()
    seen_numbers: dict[int, str] = {}
    for tf in found:
        meta = by_file.get(tf.file) or by_number.get(tf.number)
        tid = str(tf.number)
        if tf.number in seen_numbers:
            tid = f"{tf.number}-{tf.slug}" if tf.slug else f"{tf.number}-{len(served) + 1}"
            issues.append(
                _warn(
                    f"{folder_where}/{tf.file}",
                    f"a second file for task {tf.number} (besides {seen_numbers[tf.number]})",
                    f"both are served; this one has task id {tid!r}",
                )
            )
        seen_numbers.setdefault(tf.number, tf.file)
        if meta is None:
            meta = TaskMetadata(task_number=tf.number, name=_title(tf.slug), file=tf.file)
            if listed:
                issues.append(
                    _warn(
                        f"{folder_where}/{tf.file}",
                        f"not listed in metadata.json {metadata_where.rsplit(': ', 1)[-1]}.tasks",
                        f"served as task {tid} (the folder decides, as in prAxIs)",
                    )
                )
        else:
            used.add(id(meta))
            if meta.task_number != tf.number:
                k = next(i for i, t in enumerate(listed) if t is meta)
                issues.append(
                    _warn(
                        f"{metadata_where}.tasks[{k}].task_number",
                        f"{meta.task_number} for {tf.file}, whose name says task {tf.number}",
                        f"served as task {tid}, in folder order",
                    )
                )
            meta = meta.model_copy(update={"file": tf.file})
        served.append(ServedTask(tid, meta, tf.file))
    slugs = {tf.slug: tf.file for tf in found}
    for k, t in enumerate(listed):
        if id(t) in used:
            continue
        name = t.file or f"task-{t.task_number}-*.md"
        moved = parse_task_file(t.file) if t.file else None
        also = f" (the folder has {slugs[moved.slug]})" if moved and moved.slug in slugs else ""
        issues.append(
            _warn(
                f"{metadata_where}.tasks[{k}].file",
                f"names {name}, which is not in {label}/{also}",
                "not served: prAxIs serves the task-N-*.md files the folder holds",
            )
        )
    return served, issues


def phase_overview(label: str, phase: PhaseMetadata, tasks: list[ServedTask]) -> str:
    """The text served for a phase whose folder has task files but no ``phase.md``.

    Built only from what the workflow states (``metadata.json`` and the task files);
    nothing here is a requirement (the gate comes from ``gate-definition.yaml`` or is
    permissive, as in prAxIs).
    """
    extra = phase.model_extra or {}
    lines = [f"# Phase {label}: {phase.phase_name or 'Phase ' + label}", ""]
    if phase.purpose:
        lines += [f"**Purpose:** {phase.purpose}", ""]
    lines += [
        (
            "> This workflow has no phase.md for this phase; this overview lists what its "
            "metadata.json and task files say."
        ),
        "",
        "## Tasks",
        "",
    ]
    lines += [f"- Task {t.id}: {t.meta.name or t.file} (`{t.file}`)" for t in tasks]
    for key, title in (("key_deliverables", "Deliverables"), ("validation_criteria", "Criteria")):
        items = [str(i) for i in extra.get(key) or [] if str(i).strip()]
        if items:
            lines += ["", f"## {title} (from metadata.json)", ""] + [f"- {i}" for i in items]
    return "\n".join(lines) + "\n"


def _warn(where: str, problem: str, action: str) -> LibraryIssue:
    return LibraryIssue("warning", where, problem, action)


def _title(slug: str) -> str:
    return slug.replace("-", " ").strip().capitalize()
