"""The public contract of task state: one model per message, query and answer.

Sent to a ``GatedSession`` (updates ``start_task``, ``complete_task``, ``block_task``,
``add_subtask``; queries ``tasks`` and ``next_task``) by the CLI (``phasegate task``),
the MCP ``task`` tool and SDK clients in any language, as JSON. Every field an agent
can send is bounded here, before the session sees it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from phasegate.domain.gates import Problem
from phasegate.domain.limits import MAX_TEXT_CHARS, Name, shallow
from phasegate.domain.tasks.model import (
    MAX_DEPENDENCIES,
    Short,
    TaskId,
    TaskSpec,
    TaskStatus,
)
from phasegate.domain.verify import VerifyResult

__all__ = [
    "MAX_TASK_EVIDENCE_BYTES",
    "AddSubtask",
    "BlockTask",
    "BoardQuery",
    "BoardView",
    "CompleteTask",
    "CriterionResult",
    "StartTask",
    "StepOutput",
    "TaskLine",
    "TaskResult",
    "TaskState",
]

MAX_TASK_EVIDENCE_BYTES = 8 * 1024
"""A completion's evidence, as compact JSON: 500 tasks' evidence must fit the carry."""

Agent = Annotated[Name, StringConstraints(min_length=1)]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartTask(_Message):
    """Claim a task and start it: ``task`` None claims the next ready one. Two agents
    claiming one task: exactly one wins, the other is refused with who holds it."""

    agent: Agent = Field(description="Who claims it (your agent's name, e.g. claude-1).")
    task: TaskId | None = Field(None, description="The task; omitted: the next ready task.")


class CompleteTask(_Message):
    """Finish a task you started: its acceptance criteria a machine can check are run
    against the workspace first (``{file}`` contains ..., ``{cmd}`` exits 0)."""

    agent: Agent
    task: TaskId
    summary: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="What was done (the summary file)."
    )
    evidence: Annotated[dict[str, Any], AfterValidator(shallow)] = Field(
        default_factory=dict,
        description="Anything else to record (at most 8 KB as JSON, 32 levels deep).",
    )


class BlockTask(_Message):
    """Mark a task blocked, with the reason; its claim is released."""

    agent: Agent
    task: TaskId
    reason: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)


class AddSubtask(_Message):
    """Split a top-level task: the new subtask (``<parent>.<n>``) joins it, and the parent
    becomes a container (its status derives from its subtasks). Two levels at most."""

    agent: Agent
    parent: TaskId
    title: Short = Field(min_length=1)
    description: str = Field("", max_length=1000)
    acceptance: list[Annotated[str, StringConstraints(max_length=300)]] = Field(
        default_factory=list, max_length=8
    )
    depends_on: list[TaskId] = Field(default_factory=list, max_length=MAX_DEPENDENCIES)
    focus_paths: list[Annotated[str, StringConstraints(max_length=300)]] = Field(
        default_factory=list, max_length=16
    )


class BoardQuery(_Message):
    """What ``tasks`` lists: the current phase's tasks (``phase`` None), one phase's, or
    all of them (``phase`` -1); ``task`` one task in full."""

    phase: int | None = Field(None, ge=-1, le=10_000)
    task: TaskId | None = None
    offset: int = Field(0, ge=0, le=100_000)
    limit: int = Field(100, ge=1, le=1000)


class StepOutput(BaseModel):
    """What one pre-analysis step gave (its output is in the task's context)."""

    step: str
    output_to: str = ""
    ok: bool
    output: str = ""
    note: str = ""


class CriterionResult(BaseModel):
    """One acceptance criterion at completion: checked against the workspace, or a claim."""

    criterion: str
    check: str = Field("", description="The verify check that ran it; '' for a claim.")
    passed: bool | None = Field(None, description="None: nothing could check it (a claim).")


class TaskState(BaseModel):
    """One task on the board: its definition and live status."""

    spec: TaskSpec
    phase: int = Field(description="The session phase the task belongs to.")
    status: Literal["pending", "active", "completed", "blocked"] = Field(
        "pending",
        description="A leaf's status; a container's own: completed once its checkable "
        "criteria passed (its shown status derives from its subtasks).",
    )
    has_checks: bool = Field(False, description="A machine checks some acceptance criterion.")
    preparing: bool = Field(False, description="Its pre-analysis is running.")
    claimed_by: str = ""
    started_at: datetime | None = None
    completed_at: datetime | None = None
    updated_at: datetime | None = None
    blocked_reason: str = ""
    blocked_by: str = ""
    needs_person: bool = Field(
        False, description="Blocked by a pre-analysis step that waits for a person."
    )
    summary: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)
    criteria: list[CriterionResult] = Field(default_factory=list)
    verify: list[VerifyResult] = Field(default_factory=list)
    attempts: int = 0
    problems: list[Problem] = Field(default_factory=list)
    context: list[StepOutput] = Field(default_factory=list)


class TaskLine(BaseModel):
    """One task as ``tasks`` lists it (compact: what an agent needs to choose)."""

    id: str
    title: str
    status: TaskStatus
    phase: int
    parent: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    waiting_for: list[str] = Field(
        default_factory=list, description="Dependencies not complete yet (it cannot start)."
    )
    claimed_by: str = ""
    progress: str = Field("", description="Containers: 'completed/all' subtasks.")
    blocked_reason: str = ""
    optional: bool = False


class BoardView(BaseModel):
    """The answer to ``tasks``: the lines asked for, the next ready task, the counts."""

    session_id: str = ""
    current_phase: int
    lines: list[TaskLine] = Field(default_factory=list)
    total: int = Field(0, description="Tasks matching the query (lines is one page).")
    offset: int = 0
    next_task: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    complexity: str = ""
    task: TaskState | None = Field(None, description="The task asked for, in full.")


class TaskResult(BaseModel):
    """The answer to a task update."""

    ok: bool
    task: TaskLine
    problems: list[Problem] = Field(default_factory=list)
    criteria: list[CriterionResult] = Field(default_factory=list)
    verify: list[VerifyResult] = Field(default_factory=list)
    context: list[StepOutput] = Field(
        default_factory=list, description="start_task: what the task's pre-analysis gave."
    )
    next_task: str | None = Field(None, description="The next ready task, after this one.")
    phase_ready: bool = Field(
        False, description="Every leaf task of the phase is complete: submit the checkpoint."
    )
    note: str = ""
