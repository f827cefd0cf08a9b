"""Human-readable rendering for the ``phasegate`` CLI (pure: models in, text out).

Shared by the command modules, so their handlers stay short. What a line says about
a session (task marks, problems, decisions, the gate's rows) comes from
``client._session_text``, as it does for the MCP server's markdown. Every function
returns a string; the caller decides where it goes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from phasegate.client import _session_text as session_text

if TYPE_CHECKING:
    from phasegate.activities.library import WorkflowDir
    from phasegate.activities.library_check import CheckReport
    from phasegate.client._executions import Waiting
    from phasegate.client.api import SessionListing
    from phasegate.domain.gates import Problem
    from phasegate.domain.session.messages import (
        CheckpointResult,
        ControlResult,
        PhaseContent,
        PhaseView,
        SequenceViolation,
        SessionView,
        TaskSummary,
        TaskView,
    )
    from phasegate.domain.spec import ParsedSpec

__all__ = [
    "TerminalSafeFormatter",
    "one_line",
    "phase_count",
    "problem_line",
    "progress_line",
    "render_check",
    "render_checkpoint",
    "render_control",
    "render_library",
    "render_listings",
    "render_phase",
    "render_spec",
    "render_status",
    "render_task",
    "render_violation",
    "table",
    "terminal_safe",
    "to_json",
    "ui_url",
    "waiting_lines",
]


def _escape_table() -> dict[int, str]:
    """What :func:`terminal_safe` writes instead of each character a terminal would obey."""
    table = {c: f"\\x{c:02x}" for c in range(0x20) if chr(c) not in "\n\t"}
    table[ord("\r")] = "\\r"
    # DEL, C1 (U+0080-U+009F, e.g. U+009B is an 8-bit CSI) and the bidi overrides and
    # isolates (U+202A-U+202E, U+2066-U+2069: text that reads differently than it is).
    # JSON may carry these raw, so they become \uXXXX: valid JSON and Python alike.
    for c in [0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]:
        table[c] = f"\\u{c:04x}"
    return table


_ESCAPES = _escape_table()
_NEWLINE = {ord("\n"): "\\n", ord("\t"): "\\t"}


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on written as a visible escape.

    What an agent controls (issue titles, phase and task names, comments, evidence,
    problems, outputs) reaches a person's terminal through the CLI; an escape sequence
    in it could erase or rewrite the lines around it (``Fix typo\\x1b[2K\\r APPROVED by
    lead``). So C0 controls but newline and tab become ``\\x1b``-style escapes (a CRLF
    line end is just a line end), DEL, C1 controls and bidi overrides become ``\\u009b``
    escapes. Every other character, emoji included, stays as it is. Valid JSON stays
    valid JSON with the same value (it can hold only the latter kind raw). The CLI's
    output chokepoints (``echo``, ``echo_err``, the progress and follow printers, the
    log formatter) apply it to everything they write.
    """
    if text.isascii() and text.isprintable():
        return text  # the common case: nothing to escape
    return text.replace("\r\n", "\n").translate(_ESCAPES)


def one_line(text: object) -> str:
    """A field that is one line by nature (a name, a title, a reason) kept to one line:
    newline and tab are escaped too, so it cannot start a line that looks like the CLI's."""
    return terminal_safe(str(text)).translate(_NEWLINE)


class TerminalSafeFormatter(logging.Formatter):
    """A log formatter whose lines are :func:`terminal_safe` (log records quote what
    agents sent: reasons, outputs, evidence)."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().format(record))


def to_json(data: Any) -> str:
    """Machine output: a pydantic model (or a list of them, or plain data) as JSON."""
    if hasattr(data, "model_dump"):
        data = data.model_dump(mode="json")
    elif isinstance(data, list):
        data = [d.model_dump(mode="json") if hasattr(d, "model_dump") else d for d in data]
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> str:
    """A plain left-aligned text table (the last column is not padded; a cell is one line)."""
    cells = [
        [str(h) for h in headers],
        *[["" if c is None else one_line(c) for c in r] for r in rows],
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + [r[-1]]
        lines.append(indent + "  ".join(parts).rstrip())
    return "\n".join(lines)


def ui_url(base: str, namespace: str, session_id: str) -> str:
    """The session's page in the Temporal Web UI at ``base`` (``Settings.web_ui_url``)."""
    return f"{base.rstrip('/')}/namespaces/{namespace}/workflows/{session_id}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def problem_line(p: Problem) -> str:
    """``field: message (expected …, got …)`` with the empty parts left out, one line."""
    return one_line(session_text.problem_text(p))


def _problems(title: str, problems: Sequence[Problem]) -> list[str]:
    return [title, *(f"  - {problem_line(p)}" for p in problems)] if problems else []


def _where(view: SessionView) -> str:
    """``phase 2 (3 of 5): Plan``: the phase number every command uses, then its place."""
    n = view.current_phase
    return f"phase {n} ({n + 1} of {view.total_phases}): {one_line(view.current_phase_name)}"


def progress_line(view: SessionView, session_id: str = "ID") -> str:
    """``phase 1 (2 of 5): Plan — awaiting approval by alice`` (or completed/abandoned)."""
    total = view.total_phases
    if view.status == "completed":
        return f"completed — all {total} phases done"
    if view.status == "abandoned":
        return f"abandoned at {_where(view)}{session_text.abandonment(view, one_line)}"
    approvers = session_text.who_approves(view.awaiting_approval_from, one_line)
    state = {
        "active": "awaiting checkpoint evidence",
        "awaiting_approval": f"awaiting approval by {approvers}",
        "approval_overdue": f"approval OVERDUE, by {approvers}",
        "paused": f"paused (resume with `phasegate control {session_id} resume --as NAME`)",
        "starting": "starting",
    }.get(view.status, view.status)
    return f"{_where(view)} — {state}"


AUDIT_LINES = 10
"""Latest audit entries ``status`` prints (``--json`` has every entry it holds)."""


def _audit(session_id: str, view: SessionView) -> list[str]:
    if not view.audit:
        return []
    total = view.audit_total or len(view.audit)
    shown = view.audit[-AUDIT_LINES:]
    head = (
        "audit trail:" if total <= len(shown) else f"audit trail (latest {len(shown)} of {total}):"
    )
    lines = [head]
    for a in shown:
        who = f" by {one_line(a.actor)}" if a.actor else ""
        why = f": {one_line(a.detail)}" if a.detail else ""
        when = a.at.astimezone()  # local time, as the other timestamps a person reads
        lines.append(f"  {when:%Y-%m-%d %H:%M:%S} phase {a.phase} {a.action}{who}{why}")
    if total > len(shown):
        lines.append(f"  (all of it: phasegate status {session_id} --json)")
    return lines


def render_status(session_id: str, view: SessionView) -> str:
    title = one_line(view.name or view.workflow_type)
    head = f"{session_id} · {title} [{view.workflow_type}] on {view.target or '-'}"
    lines = [one_line(head), progress_line(view, session_id)]
    for cp in view.completed_phases:
        label = f" (spec {one_line(cp.label)})" if cp.label and cp.label != str(cp.phase) else ""
        lines.append(
            f"  ✓ {cp.phase} {one_line(cp.name)}{label} — {_plural(cp.attempts, 'attempt')}"
        )
    if view.status not in ("completed", "abandoned"):
        lines.append(
            f"  ▸ {view.current_phase} {one_line(view.current_phase_name)} — "
            f"{_plural(view.attempts, 'attempt')} so far"
        )
    lines += _problems("last problems:", view.last_problems)
    if view.feedback:
        lines.append(f"reviewer feedback: {one_line(view.feedback)}")
    for verb, a in session_text.recent_decisions(view):
        note = f": {one_line(a.comment)}" if a.comment else ""
        lines.append(f"{verb} phase {a.phase} by {one_line(a.approver)}{note}")
    if view.last_signal_error:
        lines.append(
            f"a checkpoint sent without waiting was refused: {one_line(view.last_signal_error)}"
        )
    lines += _audit(session_id, view)
    if len(view.run_chain) > 1:
        lines.append(f"runs (continue-as-new): {len(view.run_chain)}, first {view.run_chain[0]}")
    return "\n".join(lines)


def _secs(seconds: float) -> str:
    return f"{int(seconds)} s"


def waiting_lines(w: Waiting, phase: int | None = None, waited: float = 0.0) -> list[str]:
    """What a session waits on, one line each: no worker on its task queue, a task no
    worker took, each verify check queued or running (with its elapsed time); else, once
    the caller has ``waited`` 3 s or more, that no worker has answered."""
    lines: list[str] = []
    if not w.running:
        return lines
    queue = f"task queue '{w.task_queue}'"
    seen = f"; the last poll was {_secs(w.last_poll)} ago" if w.last_poll is not None else ""
    if w.workers == 0:
        lines.append(
            f"no worker is polling {queue}: start one with `phasegate worker` (or `phasegate dev`)"
        )
    elif w.task_waiting is not None and w.task_waiting >= (5 if w.task_taken else 2):
        what = "answered" if w.task_taken else "taken the session's task"
        lines.append(
            f"no worker has {what} for {_secs(w.task_waiting)} on {queue}{seen}: "
            "is `phasegate worker` still running?"
        )
    name = "verify" if phase is None else f"verify phase {phase}"
    for c in w.checks:
        if c.state == "running":
            check = f", check '{c.check}'" if c.check else ""
            lines.append(f"{name}: running for {_secs(c.seconds)} (attempt {c.attempt}){check}")
        elif c.workers == 0:
            lines.append(
                f"{name}: queued for {_secs(c.seconds)}; no verify worker is polling "
                f"'{c.task_queue}': run `phasegate worker` (or `phasegate worker --verify-only`)"
            )
        else:
            lines.append(f"{name}: queued for {_secs(c.seconds)} behind other checks")
    if not lines and waited >= 3:
        # A stopped worker stays listed as a poller for minutes: say what is known.
        lines.append(
            f"no worker has answered for {_secs(waited)} on {queue}{seen}: "
            "is `phasegate worker` still running?"
        )
    return lines


def render_other_runs(others: Sequence[SessionListing]) -> list[str]:
    """Executions under the same session id that are not this session's own runs."""
    if not others:
        return []
    warning = (
        "WARNING: this session id was used before by another session (terminated and "
        "started again); its runs are not part of this session:"
    )
    lines = [warning]
    for o in others:
        when = o.started_at.strftime("%Y-%m-%d %H:%M:%S") if o.started_at else "?"
        lines.append(f"  run {o.run_id} started {when}: {o.execution_status}")
    return lines


def _tasks(tasks: Sequence[TaskSummary]) -> list[str]:
    if not tasks:
        return []
    lines = [f"Tasks ({len(tasks)}):"]
    for t in tasks:
        opt = " (optional)" if t.optional else ""
        tid = f"{session_text.task_id(t)} " if session_text.task_id(t) else ""
        lines.append(f"  {session_text.box(t.status)} {t.number}. {one_line(tid + t.name)}{opt}")
    return lines


def _heading(phase: int, label: str, name: str) -> str:
    written = session_text.written_label(phase, label)
    as_written = f" (written as {one_line(written)})" if written else ""
    return f"Phase {phase}{as_written}: {one_line(name)}"


def render_phase(view: PhaseView) -> str:
    lines = [f"{_heading(view.phase, view.label, view.name)}  [{view.state}]", ""]
    lines += [view.content.rstrip(), ""]
    lines += _tasks(view.tasks)
    gate = view.gate
    if gate.fields:
        lines.append("Gate evidence:")
        lines.append(
            table(
                ("FIELD", "TYPE", "REQUIRED", "LIMITS", "DESCRIPTION"),
                session_text.gate_rows(gate),
                indent="  ",
            )
        )
        lines.append(
            "  (JSON Schema of the evidence: `phasegate phase SESSION --json`, gate.json_schema)"
        )
        if not gate.strict:
            lines.append("  (not strict: validator failures are warnings)")
    else:
        lines.append("Gate evidence: none required")
    if gate.requires_approval:
        lines.append(
            f"Requires approval by: {one_line(', '.join(gate.approvers)) or 'any approver'}"
        )
    for key, art in view.artifacts.items():
        by = f", approved by {one_line(art.approved_by)}" if art.approved_by else ""
        lines.append(f"Artifact {key} (attempt {art.attempt}{by}): {json.dumps(art.evidence)}")
    if view.context:
        lines.append(f"Context: {_plural(len(view.context), 'item')} (see --json)")
    return "\n".join(lines).rstrip()


def render_task(view: TaskView) -> str:
    t = view.task
    tid = f" {session_text.task_id(t)}" if session_text.task_id(t) else ""
    name = one_line(f"{tid}: {t.name}")
    head = f"Phase {view.phase} · task {t.number}{name}  {session_text.box(t.status)}"
    return f"{head}\n\n{view.content.rstrip()}"


def render_violation(session_id: str, v: SequenceViolation) -> str:
    hint = f"`phasegate phase {session_id}` shows phase {v.current_phase}"
    return f"{one_line(v.message)} (hint: {hint})"


def _next_phase(p: PhaseContent | PhaseView) -> list[str]:
    return [
        "",
        f"Now on {_heading(p.phase, p.label, p.name)}",
        "",
        p.content.rstrip(),
        "",
        *_tasks(p.tasks),
    ]


def render_checkpoint(session_id: str, phase: int, r: CheckpointResult) -> str:
    if not r.passed:
        head = (
            f"failed: phase {phase} checkpoint, attempt {r.attempt} — "
            f"{_plural(len(r.problems), 'problem')}"
        )
        lines = [head]
        lines += [f"  - {problem_line(p)}" for p in r.problems]
        lines += _problems("warnings:", r.warnings)
        if r.example_evidence:
            lines += ["example evidence:", r.example_evidence.rstrip()]
        return "\n".join(lines)
    lines = [f"passed: phase {phase} checkpoint, attempt {r.attempt}"]
    lines += _problems("warnings:", r.warnings)
    if r.completed:
        lines.append("session completed — every phase is done")
    elif r.awaiting_approval:
        lines.append(
            f"awaiting approval: `phasegate approve {session_id} --as NAME` "
            f"(or reject with a --comment)"
        )
    elif r.next_phase is not None:
        lines += _next_phase(r.next_phase)
    return "\n".join(lines).rstrip()


def render_control(r: ControlResult, actor: str = "", *, signed: bool = False) -> str:
    by = f" by {actor}{' (signed)' if signed else ''}" if actor else ""
    return f"{r.action}{by}: session is {r.status}, on phase {r.current_phase}"


def _listing_status(s: SessionListing) -> str:
    if s.status == "starting" and s.execution_status not in ("running", "continued_as_new"):
        return f"failed to start ({s.execution_status.replace('_', ' ')})"
    status = s.status or s.execution_status
    if s.execution_status not in ("running", "completed", "continued_as_new"):
        status += f" ({s.execution_status.replace('_', ' ')})"
    return status


def render_listings(rows: Sequence[SessionListing], *, failed: bool = False) -> str:
    """The ``list`` table; with ``failed``, each failed start's reason under its row."""
    if not rows:
        return "no sessions that failed to start" if failed else "no sessions"
    out = []
    for s in rows:
        started = s.started_at.strftime("%Y-%m-%d %H:%M") if s.started_at else ""
        phase = "" if s.phase is None else s.phase
        out.append((s.session_id, s.workflow_type, _listing_status(s), phase, started))
    text = table(("SESSION", "WORKFLOW", "STATUS", "PHASE", "STARTED"), out)
    if not failed:
        return text
    reasons = [f"  {s.session_id}: {one_line(s.reason)}" for s in rows if s.reason]
    return "\n".join([text, *(["why:", *reasons] if reasons else [])])


def render_spec(spec: ParsedSpec) -> str:
    title = f" — {one_line(spec.title)}" if spec.title else ""
    head = (
        f"{spec.source}{title}: {_plural(len(spec.phases), 'phase')}, "
        f"{_plural(spec.task_count, 'task')}"
    )
    lines = [head]
    for ph in spec.phases:
        est = f" [{one_line(ph.estimated_duration)}]" if ph.estimated_duration else ""
        written = ph.written_number
        as_written = (
            f" (written as {one_line(written)})" if written and written != str(ph.number) else ""
        )
        lines.append(f"Phase {ph.number}{as_written}: {one_line(ph.name)}  (line {ph.line}){est}")
        for t in ph.tasks:
            marks = "".join(
                [
                    " [P]" if t.parallel else "",
                    *(f" [{s}]" for s in t.stories),
                    " (optional)" if t.optional else "",
                ]
            )
            lines.append(f"  {session_text.box(t.status)} {one_line(f'{t.id}  {t.name}{marks}')}")
        if not ph.tasks:
            lines.append("  (no tasks)")
        if ph.validation_gate:
            lines.append("  validation gate:")
            lines += [f"    - {one_line(item)}" for item in ph.validation_gate]
    if spec.warnings:
        lines.append("warnings:")
        lines += [f"  {spec.source}:{w.line}: {one_line(w.message)}" for w in spec.warnings]
    return "\n".join(lines)


def phase_count(wf: WorkflowDir) -> str:
    n = len(wf.metadata.static_phases)
    if wf.metadata.dynamic_phases:
        return f"{n}+dynamic" if n else "dynamic"
    return str(n)


def render_library(workflows: Sequence[WorkflowDir]) -> str:
    if not workflows:
        return "no workflows found (add a library folder with PHASEGATE_LIBRARY)"
    rows = [(w.metadata.workflow_type, w.metadata.name, phase_count(w), w.path) for w in workflows]
    return table(("TYPE", "NAME", "PHASES", "PATH"), rows)


def render_check(directory: str, report: CheckReport) -> str:
    lines = [f"error: {one_line(e)}" for e in report.errors]
    lines += [f"warning: {one_line(w)}" for w in report.warnings]
    verdict = "FAILED" if report.errors else "ok"
    lines.append(
        f"{directory}: {verdict} — {_plural(len(report.workflows), 'workflow')}"
        f" ({', '.join(report.workflows) or 'none'}), {_plural(len(report.errors), 'error')}, "
        f"{_plural(len(report.warnings), 'warning')}"
    )
    return "\n".join(lines)
