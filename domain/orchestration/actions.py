"""What :meth:`~phasegate.domain.orchestration.state.OrchestrationState.advance`
answers: the one thing the workflow does next (plan, run a step, wait for a person,
continue as new, finish). Pure values."""

from __future__ import annotations

from dataclasses import dataclass

from phasegate.domain.orchestration.messages import (
    AwaitingDecision,
    OrchestrationCarry,
    StepRecord,
)

__all__ = ["Action", "Finish", "NeedPlan", "Replan", "RunStep", "Wait"]


@dataclass(frozen=True)
class NeedPlan:
    """Ask the planner (or the rules planner) for a plan."""


@dataclass(frozen=True)
class RunStep:
    """Run plan step ``step`` (its agent's output will be recorded as ``key``)."""

    step: StepRecord
    key: str


@dataclass(frozen=True)
class Wait:
    """Wait for a person's decision, or a replan request."""

    awaiting: AwaitingDecision


@dataclass(frozen=True)
class Replan:
    """Continue as new with ``carry``: the planner runs again with the reason."""

    carry: OrchestrationCarry


@dataclass(frozen=True)
class Finish:
    """The run is over: completed, or failed with ``reason``."""

    completed: bool
    reason: str = ""


Action = NeedPlan | RunStep | Wait | Replan | Finish
