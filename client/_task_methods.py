"""The task-board methods of :class:`~phasegate.client.api.PhasegateClient`: claim,
complete, block and split a session's tasks, read its board, project its ``.workflow/``
files (docs/tasks.md). Kept apart from the phase methods in ``client/api.py`` by
concern; they go through the same retrying update and query helpers, so a refusal
comes back as the session's typed error (``TaskRefused``, code ``task_refused``, with
its message and hint) and an argument out of bounds as an error naming the field,
before anything is sent.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from phasegate.domain.errors import PayloadTooLarge, PhasegateError
from phasegate.domain.session.state import evidence_size
from phasegate.domain.tasks.files import ProjectResult
from phasegate.domain.tasks.messages import (
    MAX_TASK_EVIDENCE_BYTES,
    AddSubtask,
    BlockTask,
    BoardQuery,
    BoardView,
    CompleteTask,
    StartTask,
    TaskResult,
)
from phasegate.workflows.gated_session import GatedSession

__all__ = ["NO_ARG", "TaskMethods"]

NO_ARG: Any = object()
"""The argument of an update that takes none (``project_task_files``)."""


class TaskMethods:
    """Task state of gated sessions; mixed into ``PhasegateClient``, which supplies the
    update and query helpers."""

    async def _update(
        self, session_id: str, update: Any, arg: Any, update_id: str | None = None
    ) -> Any:
        raise NotImplementedError

    async def _query(self, session_id: str, query: Any, *args: Any) -> Any:
        raise NotImplementedError

    async def start_task(self, session_id: str, agent: str, task: str | None = None) -> TaskResult:
        """Claim ``task`` (None: the next ready one) for ``agent`` and run its pre-analysis.
        Of two agents claiming one task exactly one wins; a repeat by the holder stands.

        Raises:
            TaskRefused: Claimed by someone else, dependencies not complete, a container,
                not in the current phase, nothing ready (the message says which).
        """
        msg = _task_message(StartTask, agent=agent, task=task)
        return await self._update(session_id, GatedSession.start_task, msg)

    async def complete_task(
        self,
        session_id: str,
        agent: str,
        task: str,
        summary: str,
        evidence: dict[str, Any] | None = None,
    ) -> TaskResult:
        """Complete a task ``agent`` holds: its checkable acceptance criteria run against
        the workspace first; ``ok`` False (the task stays active) lists what failed."""
        msg = _task_message(
            CompleteTask, agent=agent, task=task, summary=summary, evidence=evidence or {}
        )
        size = evidence_size(msg.evidence)
        if size > MAX_TASK_EVIDENCE_BYTES:
            raise PayloadTooLarge(
                f"the task's evidence is {size} bytes; the limit is {MAX_TASK_EVIDENCE_BYTES}",
                where="evidence",
                hint="record paths and short summaries, not file contents",
            )
        return await self._update(session_id, GatedSession.complete_task, msg)

    async def block_task(self, session_id: str, agent: str, task: str, reason: str) -> TaskResult:
        """Mark a task blocked with the reason (its claim is released)."""
        msg = _task_message(BlockTask, agent=agent, task=task, reason=reason)
        return await self._update(session_id, GatedSession.block_task, msg)

    async def add_subtask(
        self,
        session_id: str,
        agent: str,
        parent: str,
        title: str,
        *,
        acceptance: list[str] | None = None,
        depends_on: list[str] | None = None,
        description: str = "",
    ) -> TaskResult:
        """Split top-level task ``parent``: the new subtask is ``<parent>.<n>`` and the
        parent becomes a container (its status derives from its subtasks)."""
        msg = _task_message(
            AddSubtask,
            agent=agent,
            parent=parent,
            title=title,
            description=description,
            acceptance=acceptance or [],
            depends_on=depends_on or [],
        )
        return await self._update(session_id, GatedSession.add_subtask, msg)

    async def tasks(
        self,
        session_id: str,
        phase: int | None = None,
        task: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> BoardView:
        """The task board: the current phase's tasks (``phase`` None), one phase's, or
        every phase's so far (-1), a page of ``limit``; ``task`` also returns that task
        in full (``BoardView.task``). Never a task of a phase not reached."""
        query = _task_message(BoardQuery, phase=phase, task=task, offset=offset, limit=limit)
        return await self._query(session_id, GatedSession.tasks, query)

    async def project_task_files(self, session_id: str) -> ProjectResult | None:
        """Write the session's ``.workflow/`` files again now; None: it keeps none."""
        return await self._update(session_id, GatedSession.project_task_files, NO_ARG)


_M = TypeVar("_M", bound=BaseModel)


def _task_message(model: type[_M], **fields: Any) -> _M:
    """A task message, its bounds checked here: a field out of bounds is an error that
    names the field, before anything is sent."""
    try:
        return model(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"]
        if first["type"] == "string_pattern_mismatch":
            message = f"{first['input']!r} is not a task id"
        elif first.get("input") == "":
            message = "is empty"
        field = str(first["loc"][0]) if first["loc"] else ""
        raise PhasegateError(message, where=where, hint=_FIELD_HINTS.get(field)) from None


_IDS = "letters, digits, '.', '_' and '-', at most 64; `phasegate task list` shows the ids"
_FIELD_HINTS = {
    "agent": "name who works, e.g. claude-1 (one line, at most 128 characters)",
    "task": _IDS,
    "parent": _IDS,
    "depends_on": _IDS,
}
