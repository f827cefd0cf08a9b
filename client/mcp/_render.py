"""Markdown for the MCP server's tool results (pure: models in, text out).

An agent reads this text, so it is short, says what to do next and never
mentions a phase the session has not reached. The structured content next to
it carries the full models. What a line says about a session (task marks,
problems, decisions, the gate's rows) comes from ``client._session_text``, as it
does for the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from phasegate.client import _session_text as session_text
from phasegate.client import _task_text as task_text
from phasegate.domain.session.messages import PhaseView

if TYPE_CHECKING:
    from phasegate.domain.gates import Problem
    from phasegate.domain.session.messages import (
        CheckpointResult,
        PhaseContent,
        SessionView,
        TaskSummary,
        TaskView,
    )
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
    "NO_APPROVAL_TOOL",
    "approval_line",
    "render_checkpoint",
    "render_current",
    "render_phase",
    "render_state",
    "render_task",
    "render_task_board",
    "render_task_change",
    "render_task_claim",
    "render_task_completion",
    "render_task_state",
    "render_workflows",
]

NO_APPROVAL_TOOL = "a person must approve; there is no tool for that"


def approval_line(approvers: Sequence[str]) -> str:
    """``awaiting approval by alice — a person must approve; there is no tool for that``."""
    return f"awaiting approval by {session_text.who_approves(approvers)} — {NO_APPROVAL_TOOL}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _problem(p: Problem) -> str:
    return f"- {session_text.problem_text(p)}"


def _tasks(tasks: Sequence[TaskSummary]) -> list[str]:
    if not tasks:
        return []
    lines = ["", '### Tasks (claim the next with the task tool, action "next"; read one: "show")']
    for t in tasks:
        tid = f" `{session_text.task_id(t)}`" if session_text.task_id(t) else ""
        opt = " (optional)" if t.optional else ""
        lines.append(f"- {session_text.box(t.status)} {t.number}.{tid} {t.name}{opt}")
    return lines


def _heading(phase: int, label: str, name: str) -> str:
    written = session_text.written_label(phase, label)
    return f"Phase {phase}{f' (spec {written})' if written else ''}: {name}"


def render_workflows(rows: Sequence[tuple[str, str, str, int | str]]) -> str:
    """A table of ``(workflow_type, name, description, phases)``."""
    if not rows:
        return "No workflows found (add a library folder with PHASEGATE_LIBRARY)."
    lines = ["| type | name | phases | description |", "|---|---|---|---|"]
    lines += [f"| `{t}` | {_cell(n)} | {p} | {_cell(d)} |" for t, n, d, p in rows]
    lines.append("")
    lines.append("Start one with start_session; 'dynamic' workflows need spec_path.")
    return "\n".join(lines)


def render_phase(view: PhaseView, total: int | None = None) -> str:
    """One readable phase: content, tasks, gate fields, approval and earlier artifacts."""
    of = f" ({view.phase + 1} of {total})" if total else ""
    lines = [f"## {_heading(view.phase, view.label, view.name)}{of} — {view.state}", ""]
    lines.append(view.content.rstrip())
    lines += _tasks(view.tasks)
    gate = view.gate
    lines += ["", "### Gate: evidence for submit_checkpoint"]
    if gate.fields:
        lines += [
            "| field | type | required | limits | description |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{name}` | {kind} | {req} | {_cell(limits)} | {_cell(description)} |"
            for name, kind, req, limits, description in session_text.gate_rows(gate)
        ]
        lines.append(
            "The evidence's JSON Schema is gate.json_schema in this result's structured "
            "content: build evidence that validates against it and submit once."
        )
        if not gate.strict:
            lines.append("(not strict: validator failures are warnings)")
    else:
        lines.append("No fields required: submit `{}`.")
    if gate.requires_approval:
        who = session_text.who_approves(gate.approvers)
        lines.append(f"After it passes, {who} must approve ({NO_APPROVAL_TOOL}).")
    if view.artifacts:
        lines += ["", "### Earlier evidence"]
        lines += [
            f"- phase {k}: {', '.join(sorted(a.evidence)) or '(empty)'}"
            for k, a in view.artifacts.items()
        ]
    return "\n".join(lines).rstrip()


def render_current(session_id: str, state: SessionView, view: PhaseView | None) -> str:
    """get_current_phase: where the session is and, unless it is finished, the phase."""
    head = f"Session `{session_id}` · {state.name or state.workflow_type} · {state.status}"
    if state.status == "completed":
        return f"{head}\nAll {state.total_phases} phases are complete; nothing left to do."
    if state.status == "abandoned":
        return f"{head}\n{_abandoned(state)} Start a new one with start_session."
    lines = [head]
    if state.status in ("awaiting_approval", "approval_overdue"):
        lines.append(
            f"Phase {state.current_phase} passed its checkpoint, "
            + approval_line(state.awaiting_approval_from)
            + "."
        )
    elif state.status == "paused":
        lines.append("The session is paused by a person; submissions are refused until resumed.")
    if state.feedback:
        lines.append(f"Reviewer feedback: {state.feedback}")
    if state.last_problems:
        lines.append("Problems of the last attempt:")
        lines += [_problem(p) for p in state.last_problems]
    if view is not None:
        lines += ["", render_phase(view, state.total_phases)]
    return "\n".join(lines)


def render_task(view: TaskView) -> str:
    t = view.task
    tid = f" `{session_text.task_id(t)}`" if session_text.task_id(t) else ""
    head = f"## Phase {view.phase} · task {t.number}{tid}: {t.name} {session_text.box(t.status)}"
    return f"{head}\n\n{view.content.rstrip()}"


def _next_phase(p: PhaseContent | PhaseView) -> list[str]:
    if isinstance(p, PhaseView):  # the advance carries the whole next view: no extra call
        body = render_phase(p).split("\n")[1:]
        return ["", f"## Now on {_heading(p.phase, p.label, p.name)}", *body]
    return [
        "",
        f"## Now on {_heading(p.phase, p.label, p.name)}",
        "",
        p.content.rstrip(),
        *_tasks(p.tasks),
        "",
        "Call get_current_phase for this phase's gate fields.",
    ]


def render_checkpoint(phase: int, result: CheckpointResult, approvers: Sequence[str] = ()) -> str:
    """Failed: every problem as ``field: message``. Passed: what comes next."""
    if not result.passed:
        n = len(result.problems)
        head = (
            f"**Not passed**: phase {phase}, attempt {result.attempt}, "
            f"{n} problem{'s' if n != 1 else ''}. Fix each and submit again:"
        )
        lines = [head]
        lines += [_problem(p) for p in result.problems]
        if result.warnings:
            lines += ["Warnings:", *(_problem(p) for p in result.warnings)]
        if result.example_evidence:
            lines += ["Example evidence:", "```json", result.example_evidence.rstrip(), "```"]
        return "\n".join(lines)
    lines = [f"**Passed**: phase {phase}, attempt {result.attempt}."]
    if result.warnings:
        lines += ["Warnings:", *(_problem(p) for p in result.warnings)]
    if result.completed:
        lines.append("The session is completed: every phase is done.")
    elif result.awaiting_approval:
        lines.append(f"Now {approval_line(approvers)}.")
        lines.append("Check later with get_session_state or get_current_phase.")
    elif result.next_phase is not None:
        lines += _next_phase(result.next_phase)
    return "\n".join(lines).rstrip()


def _abandoned(view: SessionView) -> str:
    """``The session was abandoned at phase 1 by bob: spec withdrawn.``"""
    return (
        f"The session was abandoned at phase {view.current_phase}{session_text.abandonment(view)}."
    )


def render_state(session_id: str, view: SessionView) -> str:
    """get_session_state: progress, attempts, problems, approvals."""
    title = view.name or view.workflow_type
    lines = [f"Session `{session_id}` · {title} (`{view.workflow_type}`) on {view.target or '-'}"]
    total = view.total_phases
    if view.status == "completed":
        lines.append(f"Status: completed — all {total} phases done.")
    elif view.status == "abandoned":
        lines.append(f"Status: {_abandoned(view)}")
    else:
        lines.append(
            f"Status: {view.status} — phase {view.current_phase} ({view.current_phase + 1} of "
            f"{total}): {view.current_phase_name}, {view.attempts} attempt(s) so far."
        )
    if view.status in ("awaiting_approval", "approval_overdue"):
        lines.append(f"Now {approval_line(view.awaiting_approval_from)}.")
    if view.completed_phases:
        done = ", ".join(f"{c.phase} {c.name}" for c in view.completed_phases)
        lines.append(f"Completed: {done}.")
    if view.last_problems:
        lines.append("Problems of the last attempt:")
        lines += [_problem(p) for p in view.last_problems]
    if view.feedback:
        lines.append(f"Reviewer feedback: {view.feedback}")
    for verb, a in session_text.recent_decisions(view):
        note = f": {a.comment}" if a.comment else ""
        lines.append(f"Phase {a.phase} {verb} by {a.approver}{note}.")
    if view.last_signal_error:
        lines.append(f"Last signalled checkpoint failed: {view.last_signal_error}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the task tool


def task_call(action: str, session_id: str, **args: str) -> str:
    """``task(action="done", session_id="S", agent="ann", task_id="T001")``."""
    shown = {"action": action, "session_id": session_id, **args}
    return "task(" + ", ".join(f'{k}="{v}"' for k, v in shown.items()) + ")"


def _mark(status: str) -> str:
    return task_text.MARKS.get(status, "[?]")


def _line(t: TaskLine) -> str:
    state = task_text.line_state(t)
    return f"{_mark(t.status)} `{t.id}` {t.title}" + (f" {state}" if state else "")


def render_task_board(view: BoardView, agent: str | None) -> str:
    """``task`` ``list``: the tasks, containers (``▸``) with their progress."""
    phases = sorted({t.phase for t in view.lines}) or [view.current_phase]
    phase = phases[0]
    done = sum(t.status == "completed" for t in view.lines)
    which = f"phase {phase}" if len(phases) == 1 else "every phase so far"
    lines = [f"Session `{view.session_id}` · {which} · {done} of {view.total} tasks done"]
    lines += [f"{'  ' * depth}- {_line(t)}" for t, depth in task_text.grouped(view.lines)]
    end = view.offset + len(view.lines)
    if end < view.total:
        lines.append(f"(tasks {view.offset + 1}-{end} of {view.total})")
    who = {"agent": agent} if agent else {}
    current = [t for t in view.lines if t.phase == view.current_phase]
    if view.next_task:
        call = task_call("next", view.session_id, **who)
        lines.append(f"Next: {call} claims {view.next_task}.")
    elif (
        current
        and end == view.total
        and all(t.status == "completed" or t.optional for t in current)
    ):
        cur = view.current_phase
        lines.append(
            f"Next: every task of phase {cur} is complete: submit_checkpoint(session_id="
            f'"{view.session_id}", phase={cur}, evidence={{...}}).'
        )
    else:
        lines.append("Next: no task is ready: each open one waits for another, or is blocked.")
    return "\n".join(lines)


def _criteria(criteria: Sequence[CriterionResult], verify: Sequence[VerifyResult]) -> list[str]:
    out = []
    for c in criteria:
        mark = task_text.criterion_mark(c)
        note = task_text.criterion_note(c, verify)
        tail = " (a claim: recorded, checked by nobody)" if c.passed is None else ""
        out.append(f"- {mark} {c.criterion}{tail}" + (f" — {note}" if note else ""))
    return out


def _steps(context: Sequence[StepOutput]) -> list[str]:
    if not context:
        return []
    lines = ["", "Pre-analysis:"]
    for s in context:
        into = f" → `[{s.output_to}]`" if s.output_to else ""
        lines.append(f"- {'✓' if s.ok else '✗'} {s.step}{into}" + (f": {s.note}" if s.note else ""))
        if s.output.strip():
            lines += ["  ```", *(f"  {x}" for x in s.output.rstrip().splitlines()[:40]), "  ```"]
    return lines


def _asks(state: TaskState | None) -> list[str]:
    if state is None:
        return []
    spec = state.spec
    lines = [spec.description.rstrip()] if spec.description else []
    if spec.acceptance:
        lines += ["", "Done when (`file` contains/exists and session commands are checked):"]
        lines += [f"- {a}" for a in spec.acceptance]
    for label, items in (("Focus", spec.focus_paths), ("Target files", spec.target_files)):
        if items:
            lines.append(f"{label}: " + ", ".join(f"`{i}`" for i in items))
    return lines


def render_task_claim(
    session_id: str, result: TaskResult, state: TaskState | None, agent: str
) -> str:
    """``next``/``start``: the task claimed, what it asks for, then the ``done`` call."""
    t = result.task
    if not result.ok:
        lines = [f"**Not started**: `{t.id}`: {result.note or t.blocked_reason}"]
        lines += _steps(result.context)
        call = task_call("next", session_id, agent=agent)
        lines.append(f"Next: the task is blocked; {call} claims another.")
        return "\n".join(lines)
    parent = f", subtask of `{t.parent}`" if t.parent else ""
    lines = [f"Claimed `{t.id}`: {t.title} (phase {t.phase}{parent})."]
    deps = ", ".join(f"`{d}`" for d in t.depends_on)
    lines.append(f"Waits for: nothing ({deps} complete)." if deps else "Waits for: nothing.")
    lines += _asks(state)
    lines += _steps(result.context)
    done = task_call("done", session_id, agent=agent, task_id=t.id, summary="<what you did>")
    lines += ["", f"Next: do the work, then {done}."]
    return "\n".join(lines)


def _after(session_id: str, result: TaskResult, agent: str) -> str:
    phase = result.task.phase
    if result.phase_ready:
        return (
            f"Next: every task of phase {phase} is complete: submit_checkpoint("
            f'session_id="{session_id}", phase={phase}, evidence={{...}}) '
            "(get_current_phase lists the gate's fields)."
        )
    if result.next_task:
        call = task_call("next", session_id, agent=agent)
        return f"Next: {call} claims {result.next_task}."
    return f"Next: no task is ready now; {task_call('list', session_id)} shows what each waits for."


def render_task_completion(session_id: str, result: TaskResult, agent: str) -> str:
    """``done``: every criterion ✓/✗/claim; failed: what to fix; passed: what next."""
    t = result.task
    if result.ok:
        lines = [f"**Completed** `{t.id}`" + (f" ({result.note})." if result.note else ".")]
    else:
        lines = [f"**Not completed**: `{t.id}` stays active. Fix each ✗ and call done again:"]
    lines += _criteria(result.criteria, result.verify)
    lines += [f"- ✗ {p}" for p in task_text.unchecked_problems(result)]
    if result.ok:
        lines.append(_after(session_id, result, agent))
    else:
        call = task_call("done", session_id, agent=agent, task_id=t.id, summary="...")
        lines.append(f"Next: fix what failed, then {call}.")
    return "\n".join(lines)


def render_task_change(session_id: str, action: str, result: TaskResult, agent: str) -> str:
    """``block`` and ``split``: what changed, and what next."""
    t = result.task
    if action == "block":
        return f"`{t.id}` blocked: {t.blocked_reason} (claim released).\n" + _after(
            session_id, result, agent
        )
    waits = f" Waits for: {', '.join(t.waiting_for)}." if t.waiting_for else ""
    call = task_call("start", session_id, agent=agent, task_id=t.id)
    return (
        f"Added `{t.id}`: {t.title} (subtask of `{t.parent}`, now a container that never "
        f"runs itself).{waits}\nNext: {call}."
    )


def render_task_state(state: TaskState, status: str, subtasks: Sequence[TaskLine] = ()) -> str:
    """``show``: one task of the board in full."""
    spec = state.spec
    lines = [f"## {_mark(status)} `{spec.id}`: {spec.title} ({status})"]
    facts = [f"phase {state.phase}"]
    if spec.parent:
        facts.append(f"subtask of `{spec.parent}`")
    if state.claimed_by:
        facts.append(f"claimed by {state.claimed_by}")
    if spec.depends_on:
        facts.append("depends on " + ", ".join(f"`{d}`" for d in spec.depends_on))
    lines.append(" · ".join(facts))
    if state.blocked_reason:
        lines.append(f"Blocked: {state.blocked_reason}")
    lines += _asks(state)
    if subtasks:
        lines += ["", "Subtasks:", *(f"- {_line(t)}" for t in subtasks)]
    if state.criteria:
        lines += ["", f"Last completion (attempt {state.attempts}):"]
        lines += _criteria(state.criteria, state.verify)
    lines += _steps(state.context)
    if state.summary:
        lines.append(f"Summary: {state.summary}")
    return "\n".join(lines)
