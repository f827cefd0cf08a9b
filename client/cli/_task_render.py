"""Text of ``phasegate task ...`` for a person or an agent at a terminal (pure: models
in, lines out). Every text an agent wrote (titles, reasons, summaries, step outputs)
is kept terminal-safe; every result ends with the exact command to run next."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from phasegate.client import _task_text as task_text
from phasegate.client.cli._render import one_line, terminal_safe

if TYPE_CHECKING:
    from phasegate.domain.tasks.messages import (
        BoardView,
        CriterionResult,
        StepOutput,
        TaskLine,
        TaskResult,
        TaskState,
    )
    from phasegate.domain.verify import VerifyResult

__all__ = [
    "Commands",
    "render_block",
    "render_board",
    "render_claim",
    "render_completion",
    "render_split",
    "render_task_state",
]

_OUTPUT_LINES = 12
"""Lines of a pre-analysis step's output shown (the rest: ``--json``)."""


class Commands:
    """The exact ``phasegate task`` commands to run next, for one session and agent.

    Args:
        session_id: The session (named in every command, so it runs from anywhere).
        agent: Who works (``--as``); ``AGENT`` where not known.
    """

    def __init__(self, session_id: str, agent: str | None = None) -> None:
        self.session = shlex.quote(session_id)
        self.agent = shlex.quote(agent) if agent else "AGENT"

    def next(self) -> str:
        return f"phasegate task next {self.session} --as {self.agent}"

    def start(self, task_id: str) -> str:
        return f"phasegate task start {self.session} {shlex.quote(task_id)} --as {self.agent}"

    def done(self, task_id: str) -> str:
        return (
            f"phasegate task done {self.session} {shlex.quote(task_id)} --as {self.agent} "
            "--summary 'what you did'"
        )

    def submit(self, phase: int) -> str:
        return f"phasegate submit {self.session} --phase {phase} --file evidence.json"


def _criteria(criteria: Sequence[CriterionResult], verify: Sequence[VerifyResult]) -> list[str]:
    lines = []
    for c in criteria:
        mark = task_text.criterion_mark(c)
        lines.append(f"  {mark:<5} {one_line(c.criterion)}")
        note = task_text.criterion_note(c, verify)
        if note:
            lines.append(f"        {one_line(note)}")
    return lines


def _steps(context: Sequence[StepOutput]) -> list[str]:
    if not context:
        return []
    lines = ["pre-analysis:"]
    for s in context:
        into = f" → [{one_line(s.output_to)}]" if s.output_to else ""
        lines.append(f"  {'✓' if s.ok else '✗'} {one_line(s.step)}{into}")
        if s.note:
            lines.append(f"      {one_line(s.note)}")
        out = terminal_safe(s.output).rstrip().splitlines()
        lines += [f"      {line}" for line in out[:_OUTPUT_LINES]]
        if len(out) > _OUTPUT_LINES:
            lines.append(f"      … {len(out) - _OUTPUT_LINES} more lines (--json)")
    return lines


def _plan(state: TaskState | None) -> list[str]:
    """What a task asks for: description, acceptance criteria, where to look."""
    if state is None:
        return []
    spec = state.spec
    lines = []
    if spec.description:
        lines += [terminal_safe(spec.description).rstrip()]
    if spec.acceptance:
        lines.append("done when (checked where it names a file or a command; else a claim):")
        lines += [f"  - {one_line(a)}" for a in spec.acceptance]
    for label, items in (("focus", spec.focus_paths), ("target files", spec.target_files)):
        if items:
            lines.append(f"{label}: {one_line(', '.join(items))}")
    return lines


def render_claim(
    session_id: str, result: TaskResult, state: TaskState | None, cmd: Commands
) -> str:
    """``task next`` / ``task start``: the task claimed, what it asks, what to run next."""
    t = result.task
    if not result.ok:  # a pre-analysis step failed: the session blocked the task
        lines = [f"{t.id} not started: {one_line(result.note or t.blocked_reason)}"]
        lines += _steps(result.context)
        lines.append(f"the task is blocked; next: {cmd.next()}")
        return "\n".join(lines)
    lines = [f"claimed {t.id}: {one_line(t.title)}"]
    by = f" · by {one_line(t.claimed_by)}" if t.claimed_by else ""
    lines.append(f"  session {session_id} · phase {t.phase}{by}")
    if t.parent:
        lines.append(f"  subtask of {t.parent}")
    deps = ", ".join(t.depends_on)
    waits = ", ".join(t.waiting_for)
    lines.append(
        f"waits for: {waits}"
        if waits
        else f"waits for: nothing ({deps} complete)"
        if deps
        else "waits for: nothing"
    )
    lines += _plan(state)
    lines += _steps(result.context)
    lines += ["next: do the work, then", f"  {cmd.done(t.id)}"]
    return "\n".join(lines)


def render_completion(result: TaskResult, cmd: Commands) -> str:
    """``task done``: each criterion ✓/✗/claim, what failed and what to run next."""
    t = result.task
    failed = sum(c.passed is False for c in result.criteria)
    if result.ok:
        head = f"{t.id} completed" + (f" ({result.note})" if result.note else "")
    else:
        of = f": {failed} of {len(result.criteria)} criteria failed" if failed else ""
        head = f"{t.id} not completed{of}"
    lines = [head]
    lines += _criteria(result.criteria, result.verify)
    lines += [f"  ✗     {one_line(p)}" for p in task_text.unchecked_problems(result)]
    if not result.ok:
        lines += ["what to do: fix what failed, then run again:", f"  {cmd.done(t.id)}"]
        return "\n".join(lines)
    lines += _after(result, cmd)
    return "\n".join(lines)


def _after(result: TaskResult, cmd: Commands) -> list[str]:
    """What comes after a change: the next ready task, or the phase's checkpoint."""
    if result.phase_ready:
        return [
            f"every task of phase {result.task.phase} is complete; next: submit the checkpoint:",
            f"  {cmd.submit(result.task.phase)}",
        ]
    if result.next_task:
        return [f"next: {result.next_task} is ready: {cmd.next()}"]
    return ["next: no task is ready now (`phasegate task list` shows what each waits for)"]


def render_block(result: TaskResult, cmd: Commands) -> str:
    t = result.task
    lines = [f"{t.id} blocked: {one_line(t.blocked_reason)} (claim released)"]
    return "\n".join(lines + _after(result, cmd))


def render_split(result: TaskResult, cmd: Commands) -> str:
    t = result.task
    lines = [
        f"added {t.id}: {one_line(t.title)} (subtask of {t.parent}, now a container that "
        + "never runs itself)"
    ]
    if t.waiting_for:  # not startable yet: point at what is ready instead
        lines.append(f"waits for: {', '.join(t.waiting_for)}")
        lines += _after(result, cmd)
    else:
        lines.append(f"next: {cmd.start(t.id)}")
    return "\n".join(lines)


def render_board(view: BoardView, cmd: Commands, *, all_phases: bool = False) -> str:
    """``task list``: the tasks with marks, containers (``▸``) with their progress."""
    counts = view.counts
    total, done = sum(counts.values()), counts.get("completed", 0)
    if all_phases:
        head = f"every phase so far · {done} of {total} tasks done"
    else:
        phase = view.lines[0].phase if view.lines else view.current_phase
        shown = sum(t.status == "completed" for t in view.lines)
        head = f"phase {phase} · {shown} of {view.total} tasks done (session: {done} of {total})"
    cx = f" · complexity {view.complexity}" if view.complexity else ""
    lines = [f"session {view.session_id} · {head}{cx}"]
    if not view.lines:
        lines.append("  (no tasks)")
    current = None
    for t, depth in task_text.grouped(view.lines):
        if all_phases and t.phase != current and depth == 0:
            current = t.phase
            lines.append(f"phase {current}:")
        mark = task_text.MARKS.get(t.status, "[?]")
        state = task_text.line_state(t, one_line)
        lines.append(
            f"{'  ' * (depth + 1)}{mark:<3} {t.id}  {one_line(t.title)}"
            + (f"  {state}" if state else "")
        )
    end = view.offset + len(view.lines)
    if end < view.total or view.offset:
        lines.append(f"  (tasks {view.offset + 1}-{end} of {view.total}; --offset for more)")
    lines.append(_board_next(view, cmd, all_phases))
    return "\n".join(lines)


def _board_next(view: BoardView, cmd: Commands, all_phases: bool) -> str:
    if view.next_task:
        return f"next ready: {view.next_task} — claim it: {cmd.next()}"
    current = [t for t in view.lines if t.phase == view.current_phase]
    whole = not all_phases and view.offset == 0 and len(view.lines) == view.total
    if whole and current and all(t.status == "completed" or t.optional for t in current):
        return (
            f"every task of phase {view.current_phase} is complete; next: submit the "
            f"checkpoint: {cmd.submit(view.current_phase)}"
        )
    return "next ready: none (each open task waits for another, is claimed or is blocked)"


def render_task_state(state: TaskState, status: str, subtasks: Sequence[TaskLine] = ()) -> str:
    """``task show``: one task of the board in full (a container with its subtasks)."""
    spec = state.spec
    mark = task_text.MARKS.get(status, "[?]")
    lines = [f"{mark} {spec.id}: {one_line(spec.title)}  ({status})"]
    facts = [f"phase {state.phase}"]
    if spec.parent:
        facts.append(f"subtask of {spec.parent}")
    if state.claimed_by:
        facts.append(f"claimed by {one_line(state.claimed_by)}")
    if spec.type or spec.agent:
        facts.append(one_line(" ".join(x for x in (spec.type, spec.agent) if x)))
    if spec.optional:
        facts.append("optional")
    lines.append("  " + " · ".join(facts))
    if spec.depends_on:
        lines.append(f"depends on: {', '.join(spec.depends_on)}")
    if state.blocked_reason:
        by = f" (by {one_line(state.blocked_by)})" if state.blocked_by else ""
        lines.append(f"blocked{by}: {one_line(state.blocked_reason)}")
    lines += _plan(state)
    if subtasks:
        lines.append("subtasks:")
        for t in subtasks:
            state_text = task_text.line_state(t, one_line)
            mark = task_text.MARKS.get(t.status, "[?]")
            lines.append(f"  {mark:<3} {t.id}  {one_line(t.title)}  {state_text}".rstrip())
    if state.criteria:
        lines.append(f"acceptance at the last completion (attempt {state.attempts}):")
        lines += _criteria(state.criteria, state.verify)
    lines += _steps(state.context)
    if state.summary:
        lines.append(f"summary: {one_line(state.summary)}")
    if spec.source:
        lines.append(f"defined in: {one_line(spec.source)}")
    return "\n".join(lines)
