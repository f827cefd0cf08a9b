"""Step graph function handlers phasegate ships (``phasegate.agents.graph_handlers``).

A worker always allows this module (``activities.step_handlers.SHIPPED_HANDLERS``),
whatever ``PHASEGATE_GRAPH_FUNCTION_MODULES`` says, so the shipped graphs run on any
worker. Each handler is a plain function of the step's
:class:`~phasegate.domain.graph.activities.StepContext` that decides an outcome from
the run's parameters and step state: a decision the graph makes structurally, not
one the agent working the other steps reports for itself.
"""

from __future__ import annotations

from phasegate.domain.graph.activities import StepContext
from phasegate.domain.graph.state import HandlerOutcome

__all__ = ["assess_confidence"]


def assess_confidence(ctx: StepContext) -> HandlerOutcome:
    """``iterate`` (research again) while the step state's ``confidence`` is below the
    run's ``confidence_target``; ``ok`` once it reaches it, or once ``max_rounds``
    assessments have run (the answer then says what stays uncertain).

    Reads ``state.confidence`` (0–1, default 0), ``params.confidence_target``
    (default 0.8) and ``params.max_rounds`` (default 3). The step's ``max_iterations``
    stays the hard cap: a graph whose ``max_rounds`` exceeds it fails the run instead.
    """
    confidence = _number(ctx.state.get("confidence"), 0.0)
    target = _number(ctx.params.get("confidence_target"), 0.8)
    rounds = int(_number(ctx.params.get("max_rounds"), 3))
    if confidence >= target:
        return HandlerOutcome(
            outcome="ok",
            summary=f"confidence {confidence:.2f} reached the target {target:.2f} "
            f"after {ctx.visit} assessment(s)",
        )
    if ctx.visit >= rounds:
        return HandlerOutcome(
            outcome="ok",
            summary=f"confidence {confidence:.2f} is still below the target {target:.2f} "
            f"after {rounds} round(s): answering with the uncertainty stated",
        )
    return HandlerOutcome(
        outcome="iterate",
        summary=f"confidence {confidence:.2f} is below the target {target:.2f}: "
        f"research round {ctx.visit + 1} of at most {rounds}",
    )


def _number(value: object, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)
