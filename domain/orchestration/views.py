"""What the orchestration's queries answer, the Web UI's current details, and the
compaction of what a replan carries. Pure.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from phasegate.domain.orchestration.agents import (
    AgentOutput,
    AnalysisResult,
    DeveloperResult,
    PlannerDecision,
    ReviewResult,
    StepUsage,
)
from phasegate.domain.orchestration.messages import OrchestrationCarry, OrchestrationView, PlanView

if TYPE_CHECKING:
    from phasegate.domain.orchestration.state import OrchestrationState

__all__ = [
    "INLINE_OUTPUT_BYTES",
    "MAX_CARRY_BYTES",
    "by_reference",
    "compact",
    "details_markdown",
    "developer_lines",
    "output_summary",
    "plan_view",
    "shrink",
    "state_view",
]

MAX_CARRY_BYTES = 1_000_000  # a replan's carried state stays well under Temporal's 2 MB
INLINE_OUTPUT_BYTES = 16 * 1024  # larger outputs travel by reference (a file in the workspace)


# ----------------------------------------------------------------- views
def plan_view(state: OrchestrationState) -> PlanView:
    plan = state.plan
    current = state.cursor if state.cursor < len(state.steps) else None
    return PlanView(
        reasoning=plan.reasoning if plan else "",
        scope=state.scope,
        mode=state.profile.orchestration_mode,
        steps=state.steps,
        current=current,
        replanned_count=state.replanned_count,
        replan_reason=state.replan_reason,
    )


def state_view(state: OrchestrationState) -> OrchestrationView:
    return OrchestrationView(
        orchestration_id=state.orchestration_id,
        issue=state.issue,
        status=state.status,
        plan=plan_view(state),
        awaiting=state.awaiting,
        approval_binding=state.approval_binding(),
        replan_gate=state.replan_gate(),
        replan_binding=state.replan_binding(),
        pending_replan=state.pending_replan,
        outputs=list(state.outputs.values()),
        usage=state.usage,
        last_decision=state.last_decision,
        failure=state.failure,
        child_sessions=state.child_sessions,
        developer_sessions=[r.model_copy() for r in state.sessions.records],
        approvers=state.approver_names(),
        run_chain_length=state.replanned_count + 1,
    )


def compact(carry: OrchestrationCarry) -> OrchestrationCarry:
    """Shrink a carry under MAX_CARRY_BYTES: older outputs lose their body first (their
    key, digest and file reference stay), then the oldest history entries go."""

    def size() -> int:
        return len(carry.model_dump_json())

    if size() <= MAX_CARRY_BYTES:
        return carry
    latest = {o.agent: o.key for o in carry.outputs}
    for record in carry.outputs:
        if record.key not in latest.values() and record.output:
            record.output = {}
            if size() <= MAX_CARRY_BYTES:
                return carry
    while len(carry.history) > 20 and size() > MAX_CARRY_BYTES:
        drop = len(carry.history) // 4
        carry.history = carry.history[drop:]
        carry.history_dropped += drop
    for record in carry.outputs:
        if size() <= MAX_CARRY_BYTES:
            break
        record.output = {}
    return carry


FINISHED = ("completed", "failed")


def plan_lines(view: OrchestrationView, *, gate: bool = True) -> list[str]:
    """The plan with the current step marked, what the run waits for, the last decision,
    replans, failure and usage: what the Web UI's details and ``phasegate plan show``
    both show (one renderer). Each item is one line as meant; texts agents wrote may
    hold control characters, which each caller makes safe for its medium."""
    plan = view.plan
    lines: list[str] = []
    if plan.steps:
        lines.append(f"plan ({plan.mode}, scope {plan.scope or '?'}): {plan.reasoning[:300]}")
        for s in plan.steps:
            mark = "▶" if s.index == plan.current and view.status not in FINISHED else " "
            mark = "✓" if s.status == "done" else ("✗" if s.status == "failed" else mark)
            extra = [
                f"→ {s.key}" if s.key else "",
                f"session {s.child_session}" if s.child_session else "",
                f"approved by {s.approved_by}" if s.approved_by else "",
            ]
            row = f"  {mark} {s.index} {s.agent:<9} [{s.status}] " + " ".join(x for x in extra if x)
            lines.append(row + (f"  {s.reason[:100]}" if s.reason else ""))
    else:
        lines.append("plan: not made yet")
    lines += developer_lines(view)
    if gate and view.awaiting is not None:
        g = view.awaiting
        lines.append(f"waiting for a person: gate {g.gate} ({g.kind} of {g.agent}): {g.reason}")
    if view.last_decision:
        lines.append(f"last decision: {view.last_decision}")
    if plan.replanned_count:
        lines.append(f"replans: {plan.replanned_count} (latest: {plan.replan_reason})")
    if view.pending_replan:
        lines.append(f"replan pending: {view.pending_replan}")
    return lines


def developer_lines(view: OrchestrationView) -> list[str]:
    """The developer sessions: which is open (its spec, and for an outside agent the
    command that prints its prompt) and which a replan replaced."""
    lines: list[str] = []
    for d in view.developer_sessions:
        how = ", ".join(x for x in (d.mode, d.status) if x)
        if d.status != "open":
            lines.append(f"developer session {d.session_id} ({how})")
            continue
        lines.append(f"developer session {d.session_id} ({how}): spec {d.spec_path}")
        if d.mode == "mcp":
            lines.append(
                f"  it waits for a coding agent; its prompt: "
                f"phasegate orchestrate prompt {view.orchestration_id}"
            )
    return lines


def usage_text(usage: StepUsage) -> str:
    """``usage: 3 model requests, 1200 in / 300 out tokens``."""
    return (
        f"usage: {usage.requests} model requests, {usage.input_tokens} in / "
        f"{usage.output_tokens} out tokens"
    )


def details_markdown(state: OrchestrationState) -> str:
    """The Web UI's current details: the issue and status, then :func:`plan_lines` (as
    preformatted text: the marks line up), failure and usage."""
    view = state.view()
    lines = [*plan_lines(view), *([f"failed: {view.failure}"] if view.failure else [])]
    lines.append(usage_text(view.usage))
    body = "\n".join(" ".join(line.replace("`", "'").split("\n")) for line in lines)
    return f"**{state.issue.id}: {state.issue.title}** — {state.status}\n\n```\n{body}\n```"


def shrink(data: dict[str, Any], limit: int) -> dict[str, Any]:
    """``data`` with its long texts and lists cut until its JSON fits in ``limit``
    bytes. Types stay as they were (a cut text keeps at least one character), so the
    shrunk output still validates as its model; the whole one is kept by reference."""

    def size(value: object) -> int:
        return len(json.dumps(value, ensure_ascii=False).encode())

    budget = 4000
    out = dict(data)
    while size(out) > limit and budget >= 16:
        out = {key: _cut(value, budget) for key, value in data.items()}
        budget //= 2
    return out


def _cut(value: Any, budget: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= budget else value[: max(1, budget - 1)] + "…"
    if isinstance(value, list):
        return [_cut(item, budget) for item in value[:8]]
    return value


def output_summary(output: AgentOutput) -> str:
    """One line for the history: what an agent's output says."""
    if isinstance(output, AnalysisResult):
        return f"scope {output.scope}, confidence {output.confidence:.2f}"
    if isinstance(output, ReviewResult):
        verdict = "approved" if output.approved else f"changes requested ({output.severity})"
        return f"{verdict}, confidence {output.confidence:.2f}"
    if isinstance(output, DeveloperResult):
        done = "completed" if output.completed else "not completed"
        return (
            f"session {output.session_id} {done} ({output.phases_completed}/{output.total_phases})"
        )
    if isinstance(output, PlannerDecision):
        return " → ".join(s.agent for s in output.steps)
    return f"{getattr(output, 'goal', '')} (confidence {getattr(output, 'confidence', 0):.2f})"


def by_reference(output: AgentOutput) -> bool:
    """Whether an output is too large for history and travels as a file instead."""
    data = output.model_dump(mode="json")
    return len(json.dumps(data, ensure_ascii=False).encode()) > INLINE_OUTPUT_BYTES
