"""What an LLM agent working a graph step is asked, and what its answer means: the
outcome named by its ``outcome_field`` (through the handler's ``outcome_map``), its
summary, and, for a reviewer on a review step, its comments as findings. Pure."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from phasegate.domain.graph.model import Finding, StepDef
from phasegate.domain.graph.state import HandlerOutcome

if TYPE_CHECKING:
    from phasegate.domain.graph.state import GraphState

__all__ = ["agent_outcome", "agent_prompt"]

# A reviewer grades its comments as a whole; the review schedule reads severities.
_SEVERITY = {"critical": "must", "major": "must", "minor": "should", "none": "could"}


def agent_prompt(state: GraphState, step: StepDef) -> str:
    """The step as its agent reads it: title, rendered actions, the run's params, state
    and answers (JSON), and the blocking findings of the last review."""
    context = {"params": state.params, "state": state.values, "answers": state.answers}
    parts = [
        f"# {step.title}",
        state.rendered or step.actions,
        "## Context",
        json.dumps(context, ensure_ascii=False, sort_keys=True, default=str)[:20_000],
    ]
    if state.findings:
        parts += ["## Findings to address", *(f"- [{f.severity}] {f.text}" for f in state.findings)]
    return "\n\n".join(parts)


def agent_outcome(step: StepDef, output: dict[str, Any]) -> HandlerOutcome:
    """The step's outcome from the agent's validated output."""
    handler = step.handler
    outcome = "ok"
    if handler.outcome_field is not None:
        outcome = handler.outcome_of(output.get(handler.outcome_field))
    findings: list[Finding] = []
    comments = output.get("comments")
    if step.review is not None and isinstance(comments, list):
        severity = _SEVERITY.get(str(output.get("severity", "none")), "could")
        if output.get("approved") is False and severity == "could":
            severity = "should"  # a rejection with ungraded comments still counts
        findings = [Finding(severity=severity, text=str(c)[:2000]) for c in comments[:100] if c]
    summary = str(output.get("summary") or output.get("comments") or "")[:2000]
    return HandlerOutcome(outcome=outcome[:40], findings=findings, summary=summary)
