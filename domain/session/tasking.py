"""Task state inside a gated session: the rules that span the session and its board.

The board (``domain.tasks.board``) decides about tasks; this module adds what only the
session knows: a task message is taken only while the session is active (not paused,
finished, or parked for an approval: the phase's work was handed in), and a phase's
tasks join the board when the phase is entered. Read-only but for
:func:`enter_tasks`, like ``approvals`` and ``controls``.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from phasegate.domain.errors import SessionError, SessionNotActive
from phasegate.domain.session.messages import AuditEntry, PhaseDefinition, RenderedTask
from phasegate.domain.tasks.board import TaskBoard
from phasegate.domain.tasks.files import PhaseLine, ProjectResult, TaskFilesSource
from phasegate.domain.tasks.messages import AddSubtask, BlockTask, CompleteTask, StartTask
from phasegate.domain.tasks.model import ID_PATTERN, TaskSpec

if TYPE_CHECKING:
    from phasegate.domain.session.state import SessionState

__all__ = [
    "TaskMessage",
    "check_task",
    "enter_tasks",
    "files_source",
    "note_projection",
    "task_specs",
]

TaskMessage = StartTask | CompleteTask | BlockTask | AddSubtask
_ID = re.compile(ID_PATTERN)
_STATUS: dict[str, Literal["pending", "completed"]] = {"done": "completed", "skipped": "completed"}


def task_specs(phase: PhaseDefinition) -> list[TaskSpec]:
    """The phase's tasks as the board keeps them: the definition's own task when the
    renderer gave one (a task JSON file, a tasks.md task), else built from the rendered
    task (its id, or ``<phase>.<n>`` when the id is not one a task id may be)."""
    return [_spec(phase, t) for t in phase.tasks]


def _spec(phase: PhaseDefinition, task: RenderedTask) -> TaskSpec:
    if task.task is not None:
        return task.task
    task_id = task.id if _ID.match(task.id) else f"{phase.index}.{task.number}"
    return TaskSpec(
        id=task_id,
        title=(task.name or task_id)[:300],
        status=_STATUS.get(task.status, "pending"),
        optional=task.optional,
        source=f"phase {phase.label} ({phase.name})"[:600],
    )


def enter_tasks(state: SessionState, phase: PhaseDefinition, now: datetime | None) -> None:
    """Put ``phase``'s tasks on the board (a phase entered again keeps its tasks)."""
    state.tasks.enter_phase(phase.index, task_specs(phase), now)


def check_task(state: SessionState, msg: TaskMessage) -> SessionError | None:
    """Why a task message must be refused, or None."""
    if state.status == "paused":
        return SessionNotActive(
            "the session is paused; task changes wait until it is resumed",
            hint="ask a person to resume it: phasegate control SESSION resume",
        )
    if state.finished:
        return SessionNotActive(f"the session is {state.status}; its tasks no longer change")
    if state.awaiting_approval:
        return SessionNotActive(
            f"phase {state.current.index} was handed in and awaits approval; its tasks "
            "change again if it is rejected",
            hint="wait for the decision (`phasegate status SESSION`)",
        )
    board, phase = state.tasks, state.current.index
    if isinstance(msg, StartTask):
        return board.check_start(msg, phase)
    if isinstance(msg, CompleteTask):
        return board.check_complete(msg, phase)
    if isinstance(msg, BlockTask):
        return board.check_block(msg, phase)
    return board.check_add_subtask(msg, phase, state.ref.commands)


def files_source(state: SessionState, session_id: str) -> TaskFilesSource:
    """What the ``.workflow/`` files show: the session, its phases so far, the board."""
    lines = [
        PhaseLine(index=c.phase, label=c.label, name=c.name, status="completed")
        for c in state.phases.completed
    ]
    if not state.finished:
        cur = state.current
        lines.append(PhaseLine(index=cur.index, label=cur.label, name=cur.name, status="current"))
    return TaskFilesSource(
        session_id=session_id,
        workflow_type=state.workflow_type,
        name=state.name,
        description=state.description,
        target=state.target,
        folder=state.tasks.projection.folder,
        status=state.status,
        current_phase=state.current.index,
        total_phases=state.total_phases,
        phases=lines,
        board=_bounded(state.tasks),
        started_at=state.started_at,
        updated_at=state.updated_at,
    )


FILES_SOURCE_BYTES = 1_000_000
"""The ``task_files`` answer stays under the server's blob limit (the carry's, 1.2 MB)."""


def _bounded(board: TaskBoard) -> TaskBoard:
    """The board, or a copy with completed tasks' evidence elided (then, for a huge
    imported board, the task files' own objects dropped) when it is large."""

    def size(b: TaskBoard) -> int:
        return len(json.dumps(b.model_dump(mode="json"), default=str))

    if size(board) <= FILES_SOURCE_BYTES:
        return board
    copy = board.model_copy(deep=True)
    copy.compact(FILES_SOURCE_BYTES // 4)
    if size(copy) > FILES_SOURCE_BYTES:
        copy.drop_raw()
    return copy


def note_projection(
    state: SessionState, result: ProjectResult, now: datetime, *, first: bool = False
) -> None:
    """Audit what a projection found: files edited by hand (overwritten: the files are
    views) and files missing or unreadable (written again). The first projection into an
    imported folder replaces the folder's own files (kept in .phasegate-originals/)."""
    edited = (
        "was the folder's own and is now phasegate's view (the original is kept in "
        ".phasegate-originals/)"
        if first
        else "was edited by hand and is written again"
    )
    found = [f"{path} {edited}" for path in result.edits[:20]]
    found += [f"{path} was missing or unreadable and is rebuilt" for path in result.rebuilt[:20]]
    for detail in found:
        state.audit.append(
            AuditEntry(
                at=now,
                action="task_files",
                actor="phasegate",
                phase=state.current.index,
                detail=f"{result.folder}/{detail}"[:2000],
            )
        )
