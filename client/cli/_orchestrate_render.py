"""Human-readable rendering of orchestrations for the CLI (pure: models in, text out):
history entries, the open gate with the commands that decide it, a developer session
(its spec, and in mcp mode the command that prints its agent's prompt), ``plan show``,
and the usage line a finished orchestration ends with."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from phasegate.client.cli._render import one_line, table
from phasegate.domain.orchestration.messages import DeveloperSession
from phasegate.domain.orchestration.views import plan_lines, usage_text

if TYPE_CHECKING:
    from phasegate.domain.orchestration.agents import StepUsage
    from phasegate.domain.orchestration.messages import (
        HistoryEntry,
        OrchestrationView,
        OutputRecord,
    )

__all__ = [
    "entry_line",
    "gate_lines",
    "output_summary",
    "render_plan",
    "session_lines",
    "sessions_of",
    "usage_line",
]


def entry_line(e: HistoryEntry, *, limit: int = 400) -> str:
    """One history entry: ``[12:00:01] ✓ reviewer_0 done: approved, confidence 0.90``."""
    when = e.at.astimezone().strftime("%H:%M:%S")
    subject = e.key or e.agent
    by = f" by {e.actor}" if e.actor else ""
    head = {
        "plan": f"plan ({e.actor or 'planner'})",
        "plan_refused": "✗ plan refused",
        "approval": f"approval of {e.agent}{by}",
        "escalation": f"escalation of {e.agent}{by}",
        "step_started": f"▶ {subject} started" + (f" ({e.actor})" if e.actor else ""),
        "step_done": f"✓ {subject} done",
        "step_failed": f"✗ {subject} failed",
        "review_rejected": "↺ review rejected",
        "replan_requested": f"replan requested{by}",
        "replan": "↻ replanned (a new run)",
        "completed": "✓ completed",
        "failed": "✗ failed",
    }.get(e.kind, e.kind.replace("_", " "))
    detail = e.detail if len(e.detail) <= limit else e.detail[: limit - 1] + "…"
    return one_line(f"[{when}] {head}: {detail}" if detail else f"[{when}] {head}")


def _approver_arg(view: OrchestrationView) -> str:
    names = [n for n in view.approvers if n and not n.startswith("anyone")]
    return names[0] if len(names) == 1 else "NAME"


def gate_lines(view: OrchestrationView) -> list[str]:
    """What the open gate waits for and the exact commands that decide it."""
    gate = view.awaiting
    if gate is None:
        return []
    oid, who = view.orchestration_id, _approver_arg(view)
    return [
        f"waiting for a person: gate {gate.gate} ({gate.kind} of {gate.agent}): "
        + one_line(gate.reason),
        f"  approvers: {one_line(', '.join(view.approvers))}",
        f"  approve: phasegate orchestrate approve {oid} --as {who} --comment 'looks right'",
        f"  reject:  phasegate orchestrate approve {oid} --as {who} --reject --comment WHY",
    ]


def sessions_of(view: OrchestrationView) -> list[DeveloperSession]:
    """The developer sessions of ``view``; a worker that named only their ids gives each
    as open (what is done with it, its own status says)."""
    if view.developer_sessions:
        return view.developer_sessions
    return [DeveloperSession(session_id=c, mode="") for c in view.child_sessions]


def session_lines(session: DeveloperSession, oid: str) -> list[str]:
    """A developer session as ``orchestrate`` announces it: the commands that show it,
    its spec, and (mcp mode, open) the command that prints what its agent is told."""
    sid = session.session_id
    shows = f"`phasegate phase {sid}` shows its current phase, `phasegate status {sid}`"
    lines = [f"  developer session {sid}: {shows} its progress"]
    if session.spec_path:
        lines.append(f"    spec: {session.spec_path}")
    if session.mode == "mcp" and session.status == "open":
        lines.append(
            "    developer mode mcp: your coding agent drives it; its prompt: "
            f"phasegate orchestrate prompt {oid}  "
            f'(e.g. claude -p "$(phasegate orchestrate prompt {oid})")'
        )
    return lines


def output_summary(o: OutputRecord) -> str:
    """One line of what an output says."""
    return one_line(_summary(o))


def _summary(o: OutputRecord) -> str:
    d = o.output
    if not d:
        return f"(kept in {o.ref})" if o.ref else "(compacted)"
    if o.agent == "planner":
        return " → ".join(s.get("agent", "?") for s in d.get("steps", []))
    if o.agent == "analyst":
        return f"scope {d.get('scope')}, {len(d.get('findings', []))} findings, " + _conf(d)
    if o.agent == "architect":
        return f"goal: {d.get('goal', '')} ({_conf(d)})"
    if o.agent == "developer":
        return str(d.get("summary") or d.get("session_id", ""))
    if o.agent == "reviewer":
        verdict = "approved" if d.get("approved") else f"changes requested ({d.get('severity')})"
        first = (d.get("comments") or [""])[0]
        return f"{verdict}, {_conf(d)}" + (f": {first[:120]}" if first else "")
    return json.dumps(d)[:120]


def _usage(o: OutputRecord) -> str:
    u = o.usage
    return f"{u.requests} req, {u.input_tokens}/{u.output_tokens} tok" if u.requests else "-"


def _conf(d: dict[str, Any]) -> str:
    c = d.get("confidence")
    return f"confidence {c:.2f}" if isinstance(c, int | float) else "confidence ?"


def usage_line(u: StepUsage) -> str:
    """``usage: 3 model requests, 1200 in / 300 out tokens``."""
    return usage_text(u)


def render_plan(view: OrchestrationView, history: list[HistoryEntry], *, tail: int) -> str:
    """``plan show``: the plan (the one renderer the Web UI's details use too), the open
    gate with the commands that decide it, outputs, usage, failure and history."""
    issue = view.issue
    lines = [f"{view.orchestration_id} · issue {issue.id}: {one_line(issue.title)} — {view.status}"]
    lines += [one_line(line) for line in plan_lines(view, gate=False)]
    lines += gate_lines(view)
    if view.outputs:
        rows = [(o.key, o.model or "-", _usage(o), output_summary(o)[:160]) for o in view.outputs]
        lines += ["outputs:", table(("KEY", "MODEL", "USAGE", "SAYS"), rows, indent="  ")]
    lines.append(usage_line(view.usage))
    if view.failure:
        lines.append(f"failed: {one_line(view.failure)}")
    if history and tail:
        shown = history[-tail:]
        head = "history:" if len(shown) == len(history) else f"history (latest {len(shown)}):"
        lines += [head, *(f"  {entry_line(e)}" for e in shown)]
        if len(shown) < len(history):
            lines.append(f"  (all of it: phasegate plan show {view.orchestration_id} --json)")
    return "\n".join(lines)
