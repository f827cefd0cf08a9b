"""One task as phasegate keeps it: the JSON task model of ``.workflow/`` folders.

Teams using Claude-Code-Workflow (and maestro-flow after it) keep their task state in
``.workflow/WFS-<slug>/.task/IMPL-N[.M].json`` files::

    {"id": "IMPL-1.2", "title": "...", "status": "pending",
     "meta": {"type": "feature", "agent": "@code-developer"},
     "context": {"requirements": [...], "focus_paths": [...], "acceptance": [...],
                 "parent": "IMPL-1", "depends_on": ["IMPL-1.1"], "inherited": {...},
                 "shared_context": {...}, "artifacts": [...]},
     "flow_control": {"pre_analysis": [{"step": "...", "action": "...", "command": "...",
                                        "output_to": "...", "on_error": "fail"}],
                      "implementation_approach": [...], "target_files": [...]}}

and the later unified schema flat ids (``IMPL-001``) and ``convergence.criteria``
(``activities/task_folders.py`` reads both). :class:`TaskSpec` is what a session keeps
of one, whatever wrote it (a task JSON file, a tasks.md line, an agent's
``add_subtask``); the board (``domain.tasks.board``) adds its live status. Pure data,
every field bounded: an agent may have written the file.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = [
    "ID_PATTERN",
    "MAX_CRITERIA",
    "MAX_DEPENDENCIES",
    "MAX_TASKS",
    "OnError",
    "PreAnalysisStep",
    "StepOnError",
    "TaskId",
    "TaskSpec",
    "TaskStatus",
]

MAX_TASKS = 1000
"""Most tasks one session holds (subtasks included): 500 fit with room to spare."""
MAX_CRITERIA = 20
MAX_DEPENDENCIES = 32
MAX_STEPS = 16
MAX_ITEMS = 64
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

TaskId = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Short = Annotated[str, StringConstraints(max_length=300)]
Text = Annotated[str, StringConstraints(max_length=4000)]
Item = Annotated[str, StringConstraints(max_length=1000)]

TaskStatus = Literal["pending", "active", "completed", "blocked", "container"]
"""``container``: the task has subtasks; its status derives from them, it never runs."""
StepOnError = Literal["skip_optional", "fail", "retry_once", "manual_intervention"]
"""What a pre-analysis step's failure does: skip it (its output is empty), refuse the
task's start, run it once more, or block the task until a person unblocks it."""
OnError = Literal["fail", "skip_optional", "continue"]
"""The unified schema's task-level ``on_error`` (kept and shown; ``skip_optional``
marks the task optional: a phase's gate does not wait for it)."""


class PreAnalysisStep(BaseModel):
    """One ``flow_control.pre_analysis`` step: run before the task's view is served."""

    model_config = ConfigDict(extra="ignore")

    step: Short = Field(min_length=1, description="The step's name.")
    action: Text = ""
    command: Text = Field(
        "", description="What runs; ``[name]`` words are replaced by earlier outputs."
    )
    output_to: Annotated[str, StringConstraints(max_length=64)] = ""
    on_error: StepOnError = "fail"


class TaskSpec(BaseModel):
    """A task as defined (never its live status; that is the board's)."""

    model_config = ConfigDict(extra="forbid")

    id: TaskId
    title: Short = Field(min_length=1)
    status: Literal["pending", "active", "completed", "blocked"] = Field(
        "pending", description="The status the definition gave it when the session began."
    )
    type: Annotated[str, StringConstraints(max_length=64)] = ""
    agent: Annotated[str, StringConstraints(max_length=128)] = ""
    description: Text = ""
    requirements: list[Item] = Field(default_factory=list, max_length=MAX_ITEMS)
    focus_paths: list[Item] = Field(default_factory=list, max_length=MAX_ITEMS)
    acceptance: list[Item] = Field(default_factory=list, max_length=MAX_CRITERIA)
    parent: TaskId | None = None
    depends_on: list[TaskId] = Field(default_factory=list, max_length=MAX_DEPENDENCIES)
    pre_analysis: list[PreAnalysisStep] = Field(default_factory=list, max_length=MAX_STEPS)
    implementation_approach: list[Text] = Field(default_factory=list, max_length=MAX_ITEMS)
    target_files: list[Item] = Field(default_factory=list, max_length=MAX_ITEMS)
    on_error: OnError = "fail"
    optional: bool = False
    source: Annotated[str, StringConstraints(max_length=600)] = Field(
        "", description="Where it was defined: a task file, tasks.md:LINE, or who added it."
    )
    raw: dict[str, Any] | None = Field(
        None,
        description="The task file's own object, kept to write the file back with the "
        "fields phasegate does not model (inherited, shared_context, artifacts, ...).",
    )

    @property
    def depth(self) -> int:
        """1 for a top-level task, 2 for a subtask."""
        return 1 if self.parent is None else 2
