"""The MCP ``task`` tool's actions: one tool for task state, so the server stays at eight.

``list``, ``show`` (with ``phase``: the phase's rendered task text, what ``get_task``
served), ``next`` and ``start`` (a claim), ``done``, ``block``, ``split``. Each answer
is markdown ending in a ``Next:`` call and compact structured content (defaults left
out, a task file's raw object and check output never sent back). A refusal's hint
names the CLI command in the session's words; here it is rewritten as the ``task``
call that does the same.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from phasegate.client import _task_text as task_text
from phasegate.client.mcp._render import (
    render_task,
    render_task_board,
    render_task_change,
    render_task_claim,
    render_task_completion,
    render_task_state,
)
from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import SequenceViolation

if TYPE_CHECKING:
    from phasegate.client.api import PhasegateClient
    from phasegate.domain.tasks.messages import BoardView, TaskResult

__all__ = ["TaskAction", "TaskCall", "mcp_words", "run_task"]

TaskAction = Literal["list", "show", "next", "start", "done", "block", "split"]
_NEEDS = {
    "show": ("task_id",),
    "start": ("agent", "task_id"),
    "next": ("agent",),
    "done": ("agent", "task_id", "summary"),
    "block": ("agent", "task_id", "reason"),
    "split": ("agent", "task_id", "title"),
}
_CLI_TASK = re.compile(r"`phasegate task (\w+)((?: [^`\s]+)*)`")
_CLI_OTHER = {
    "`phasegate submit`": "the submit_checkpoint tool",
    "`phasegate status SESSION`": "get_session_state",
}


class TaskCall(BaseModel):
    """The ``task`` tool's arguments, as the SDK validated them."""

    action: TaskAction
    session_id: str | None = None
    agent: str | None = None
    task_id: str | None = None
    phase: int | None = None
    summary: str | None = None
    evidence: dict[str, Any] | None = None
    reason: str | None = None
    title: str | None = None
    acceptance: list[str] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)


def mcp_words(text: str | None) -> str | None:
    """A refusal's CLI commands as the MCP calls that do the same."""
    if not text:
        return text

    def call(m: re.Match[str]) -> str:
        if m.group(1) == "unblock":
            return m.group(0)  # a person's command: no tool does it
        words = [w for w in m.group(2).split() if w not in ("SESSION", "ID") and w[0] != "-"]
        task_id = f', task_id="{words[0]}"' if words else ""
        return f'`task(action="{m.group(1)}"{task_id})`'

    text = _CLI_TASK.sub(call, text)
    for cli, mcp in _CLI_OTHER.items():
        text = text.replace(cli, mcp)
    return text


def _compact(model: BaseModel) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(
        mode="json", exclude_defaults=True, exclude={"verify": {"__all__": {"excerpt"}}}
    )
    return data


def _board(view: BoardView) -> dict[str, Any]:
    return {
        "session_id": view.session_id,
        "current_phase": view.current_phase,
        "next_task": view.next_task,
        "counts": view.counts,
        "total": view.total,
        "tasks": [t.model_dump(mode="json", exclude_defaults=True) for t in view.lines],
    }


def _state(view: BoardView) -> dict[str, Any]:
    assert view.task is not None
    return view.task.model_dump(
        mode="json",
        exclude_defaults=True,
        exclude={"spec": {"raw"}, "verify": {"__all__": {"excerpt"}}},
    )


async def run_task(
    pg: PhasegateClient, call: TaskCall
) -> tuple[str, dict[str, Any]] | SequenceViolation:
    """Do one ``task`` action: its text and structured content, or the refusal of a
    future phase's task (``show`` with ``phase``).

    Raises:
        PhasegateError: A missing argument, a refusal (its hint in MCP words).
    """
    missing = [f for f in _NEEDS.get(call.action, ()) if not getattr(call, f)]
    if missing:
        raise PhasegateError(
            f"action {call.action!r} needs {', '.join(missing)}",
            where=missing[0],
            hint="agent: your name, the same in every call (e.g. claude-1)"
            if "agent" in missing
            else 'task(action="list") shows the task ids',
        )
    sid = call.session_id or task_text.session_near(Path.cwd()).session_id
    try:
        return await _act(pg, sid, call)
    except PhasegateError as err:
        err.message = mcp_words(err.message) or err.message
        err.hint = mcp_words(err.hint)
        raise


async def _act(
    pg: PhasegateClient, sid: str, call: TaskCall
) -> tuple[str, dict[str, Any]] | SequenceViolation:
    agent = call.agent or ""
    task_id = call.task_id or ""
    if call.action == "list":
        view = await pg.tasks(sid, phase=call.phase)
        return render_task_board(view, call.agent), _board(view)
    if call.action == "show":
        return await _show(pg, sid, task_id, call.phase)
    if call.action in ("next", "start"):
        result = await pg.start_task(sid, agent, task_id if call.action == "start" else None)
        state = (await pg.tasks(sid, task=result.task.id, limit=1)).task if result.ok else None
        data = _compact(result)
        if state is not None and state.spec.acceptance:
            data["acceptance"] = list(state.spec.acceptance)
        return render_task_claim(sid, result, state, agent), data
    result = await _change(pg, sid, call)
    if call.action == "done":
        return render_task_completion(sid, result, agent), _compact(result)
    return render_task_change(sid, call.action, result, agent), _compact(result)


async def _change(pg: PhasegateClient, sid: str, call: TaskCall) -> TaskResult:
    agent, task_id = call.agent or "", call.task_id or ""
    if call.action == "done":
        return await pg.complete_task(sid, agent, task_id, call.summary or "", call.evidence)
    if call.action == "block":
        return await pg.block_task(sid, agent, task_id, call.reason or "")
    return await pg.add_subtask(
        sid,
        agent,
        task_id,
        call.title or "",
        acceptance=call.acceptance,
        depends_on=call.depends_on,
    )


async def _show(
    pg: PhasegateClient, sid: str, task_id: str, phase: int | None
) -> tuple[str, dict[str, Any]] | SequenceViolation:
    if phase is not None:  # the phase's rendered task, what get_task served
        got = await pg.task(sid, phase, task_id)
        if isinstance(got, SequenceViolation):
            return got
        return render_task(got), got.model_dump(mode="json")
    view = await pg.tasks(sid, task=task_id, limit=1000)
    if view.task is not None and view.task.phase != view.current_phase:
        view = await pg.tasks(sid, phase=view.task.phase, task=task_id, limit=1000)
    state = view.task
    if state is None:  # the board answers an unknown task with an error
        raise PhasegateError(f"there is no task {task_id} in session {sid}")
    line = next((t for t in view.lines if t.id == task_id), None)
    status = line.status if line is not None else state.status
    subtasks = [t for t in view.lines if t.parent == task_id]
    data = _state(view)
    data["status"] = status
    return render_task_state(state, status, subtasks), data
