"""A step graph run as text, the same for the CLI (``phasegate graph show``) and the MCP
tools (``get_graph_step``): where the run is, the step it is on, its questions and the
path it took. Text from the run is made terminal-safe by the caller's output."""

from __future__ import annotations

import json

from phasegate.domain.graph.messages import GraphView, StepView

__all__ = ["graph_text"]


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def graph_text(view: GraphView, step: StepView | None) -> str:
    lines = [f"status: {view.status}" + (f" (ended {view.outcome})" if view.outcome else "")]
    if view.failure:
        lines.append(f"failed: {_one_line(view.failure)}")
    if step is not None:
        lines += [
            f"step {step.step_id}: {_one_line(step.title)} (visit {step.visit}, {step.handler})",
            "",
            step.actions.strip() or "(no actions written)",
            "",
            f"outcomes: {', '.join(step.outcomes)}",
        ]
        if step.state:
            lines.append(f"state: {json.dumps(step.state, ensure_ascii=False)}")
        if step.findings:
            lines += [
                "findings to address:",
                *(f"  [{f.severity}] {f.text}" for f in step.findings),
            ]
        if step.gate:
            lines.append(f"evidence: {', '.join(step.gate.get('fields', {}))}")
    if view.questions:
        lines.append(f"questions (round {view.question_round}):")
        for q in view.questions:
            choices = " | ".join(q.options) if q.options else "free text"
            lines.append(f"  {q.id}: {q.text} [{choices}]")
    for key, child in view.children.items():
        lines.append(f"child run of {key.replace('#', ', visit ')}: {child}")
    if view.path:
        trail = " → ".join(f"{p.step}:{p.outcome}" for p in view.path[-10:])
        lines.append(f"path ({view.path_total}): {trail}")
    return "\n".join(lines)
