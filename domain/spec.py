"""The parsed model of a spec's tasks.md: phases, tasks and validation gates.

Produced by ``activities.tasks_md.read_spec`` (markdown-it-py lives
there, not here) and consumed by the dynamic-phase renderer. Pure data.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from phasegate.domain.tasks.model import TaskSpec

__all__ = ["ParseWarning", "ParsedSpec", "SpecPhase", "SpecTask", "TaskStatus"]

TaskStatus = Literal["todo", "done", "in_progress", "skipped"]
"""Checkbox state: ``[ ]`` todo, ``[x]``/``[X]`` done, ``[-]`` in progress, ``[~]`` skipped."""


class SpecTask(BaseModel):
    """One task of a phase, as written in tasks.md."""

    id: str = Field(
        description="Task id as written: '1.1', 'T001', 'P1-T2'; '<phase>.<k>' if none."
    )
    name: str = Field(description="Short title (bold markers and ids stripped).")
    description: str = Field("", description="Free text under the task, metadata bullets removed.")
    status: TaskStatus = "todo"
    optional: bool = Field(False, description="A trailing '*' marked the task optional.")
    parallel: bool = Field(False, description="Marked [P]: may run in parallel.")
    stories: list[str] = Field(
        default_factory=list, description="User story markers, e.g. ['US1']."
    )
    estimated_time: str = ""
    dependencies: list[str] = Field(default_factory=list)
    acceptance_criteria: list[str] = Field(default_factory=list)
    requirements: list[str] = Field(
        default_factory=list, description="From _Requirements: 1.1, 2.3_."
    )
    line: int = Field(description="1-based line of the task in the file.")
    task: TaskSpec | None = Field(
        None, description="A task folder's task as its JSON file defines it (task state)."
    )


class SpecPhase(BaseModel):
    """One phase of tasks.md, numbered as written (``number``)."""

    number: int = Field(
        description=(
            "Phase number as written in the file (may start at 0 or 1); a phase written "
            "without a whole number is numbered after the phase before it (see written_number)."
        )
    )
    written_number: str = Field(
        "",
        description=(
            "The number exactly as the heading or item writes it: '7', or for phases numbered "
            "by position '3.1' (older spec-kit), 'N' (spec-kit's 'Phase N: Polish'), '' (none)."
        ),
    )
    name: str
    description: str = ""
    estimated_duration: str = ""
    tasks: list[SpecTask] = Field(default_factory=list)
    validation_gate: list[str] = Field(
        default_factory=list,
        description="Items of the phase's **Validation Gate:** / **Checkpoint**: block.",
    )
    line: int = Field(description="1-based line of the phase heading (or numbered item).")


class ParseWarning(BaseModel):
    """Something odd that did not stop the parse (duplicate ids, empty phase, ...)."""

    line: int
    message: str


class ParsedSpec(BaseModel):
    """A whole tasks.md. ``sha256`` is of the exact bytes parsed (the snapshot id)."""

    source: str = Field(description="Path (or name) of the parsed file, for messages.")
    title: str = ""
    phases: list[SpecPhase]
    warnings: list[ParseWarning] = Field(default_factory=list)
    sha256: str = ""

    @property
    def task_count(self) -> int:
        return sum(len(p.tasks) for p in self.phases)
