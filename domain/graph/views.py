"""What a step graph run shows: the step view an agent reads (never a step it is not
on), the run's status, its result, the Web UI's details and a Mermaid drawing with the
current step and the path taken marked. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from phasegate.domain.graph.messages import GraphSummary, GraphView, StepView
from phasegate.domain.graph.model import DEFAULT, NEEDS_INPUT, Graph

if TYPE_CHECKING:
    from phasegate.domain.graph.state import GraphState

__all__ = ["details_markdown", "mermaid", "status_view", "step_view", "summary"]

PATH_IN_VIEW = 100


def step_view(state: GraphState) -> StepView | None:
    """The current step as its worker reads it, or None when the run is on none."""
    step = state.step()
    if step is None or state.finished:
        return None
    outcomes = step.possible_outcomes() + ([NEEDS_INPUT] if step.ask else [])
    return StepView(
        graph=state.graph.name,
        step_id=step.id,
        title=step.title,
        actions=state.rendered if state.rendered is not None else step.actions,
        visit=state.visit(),
        outcomes=outcomes,
        handler=step.handler.kind + (f" {step.handler.target}" if step.handler.target else ""),
        state=dict(state.values),
        params=dict(state.params),
        gate={"fields": step.gate.public_fields()} if step.gate is not None else None,
        questions=list(state.questions),
        answers=dict(state.answers),
        may_ask=step.ask,
        findings=list(state.findings),
        rendered=state.rendered is not None,
        status=state.status,
    )


def status_view(state: GraphState) -> GraphView:
    """The answer to the ``status`` query."""
    return GraphView(
        graph=state.graph.name,
        sha256=state.sha256,
        status=state.status,
        current_step=state.current,
        visit=state.visit(),
        path=state.path[-PATH_IN_VIEW:],
        path_total=state.path_total,
        state=dict(state.values),
        params=dict(state.params),
        questions=list(state.questions),
        question_round=state.question_round,
        awaiting_input_from=(state.approvers or ["any approver"])
        if state.status == "awaiting_input"
        else [],
        answer_binding=state.answer_binding() if state.status == "awaiting_input" else None,
        outcome=state.outcome,
        failure=state.failure,
        children=dict(state.children),
        runs=state.runs,
        started_at=state.started_at,
        updated_at=state.updated_at,
    )


def summary(state: GraphState) -> GraphSummary:
    """The result of a finished run."""
    return GraphSummary(
        graph=state.graph.name,
        status=state.status,
        outcome=state.outcome,
        failure=state.failure,
        path=state.path[-PATH_IN_VIEW:],
        state=dict(state.values),
    )


def details_markdown(state: GraphState) -> str:
    """The Web UI's current details: where the run is, what it waits for, the path."""
    step = state.step()
    lines = [f"**{state.graph.name}** — {state.status}"]
    if step is not None and not state.finished:
        lines.append(f"- step `{step.id}` ({step.title}), visit {state.visit()}")
        waits = {
            "outside": "a report from the agent working it",
            "function": f"its function {step.handler.target}",
            "agent": f"the agent {step.handler.target}",
            "session": f"a child session of {step.handler.target}",
            "graph": f"a child graph {step.handler.target}",
        }[step.handler.kind]
        if state.status == "awaiting_input":
            lines.append(f"- waiting for a person to answer (round {state.question_round}):")
            for q in state.questions:
                options = " / ".join(q.options) if q.options else "free text"
                lines.append(f"  - {q.text} ({options})")
        else:
            lines.append(f"- waiting for {waits}")
    if state.failure:
        lines.append(f"- failed: {state.failure}")
    if state.outcome:
        lines.append(f"- ended: {state.outcome}")
    if state.path:
        trail = " → ".join(f"{p.step}:{p.outcome}" for p in state.path[-8:])
        more = f" (of {state.path_total})" if state.path_total > 8 else ""
        lines.append(f"- path{more}: {trail}")
    return "\n".join(lines)


def mermaid(graph: Graph, *, current: str | None = None, taken: set[str] | None = None) -> str:
    """The graph as a Mermaid flowchart: every step and edge; the current step and the
    steps already taken styled, when a run is drawn."""
    lines = ["flowchart TD"]
    ids = {s.id: f"s{i}" for i, s in enumerate(graph.steps)}
    for s in graph.steps:
        label = s.title.replace('"', "'")
        lines.append(f'    {ids[s.id]}["{s.id}: {label}"]')
    lines.append("    end_((end))")
    lines.append(f"    start_(( )) --> {ids.get(graph.entry, 'end_')}")
    for s in graph.steps:
        if s.terminal:
            lines.append(f"    {ids[s.id]} --> end_")
        for outcome, target in s.next.items():
            label = "otherwise" if outcome == DEFAULT else outcome
            lines.append(f"    {ids[s.id]} -- {label} --> {ids.get(target or '', 'end_')}")
    if taken:
        lines.append("    classDef taken fill:#dfd,stroke:#393")
        lines += [f"    class {ids[t]} taken" for t in sorted(taken) if t in ids]
    if current and current in ids:
        lines.append("    classDef current fill:#ffd,stroke:#c90,stroke-width:3px")
        lines.append(f"    class {ids[current]} current")
    return "\n".join(lines)
