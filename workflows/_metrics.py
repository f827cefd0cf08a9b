"""phasegate's counters on the workflow side, through ``workflow.metric_meter()``.

That meter is replay-safe (nothing is recorded while a history replays) and may be used
in update validators: recording a metric is not a command, so a validator stays
read-only. Names and labels are documented in :mod:`phasegate.temporal`.
"""

from __future__ import annotations

from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from phasegate.domain.errors import PhasegateError
from phasegate.temporal import METRIC_ADVANCES, METRIC_REFUSALS, application_error

__all__ = ["advanced", "refused"]


def advanced(via: Literal["checkpoint", "approval"]) -> None:
    """Count one completed phase."""
    workflow.metric_meter().create_counter(
        METRIC_ADVANCES, "Phases completed (checkpoint passed or approval granted)"
    ).add(1, {"via": via})


def refused(problem: PhasegateError | ApplicationError) -> ApplicationError:
    """Count a refused message by its code; the ``ApplicationError`` to raise."""
    error = (
        application_error(problem, non_retryable=False)
        if isinstance(problem, PhasegateError)
        else problem
    )
    workflow.metric_meter().create_counter(
        METRIC_REFUSALS, "Messages a session refused before they reached its history"
    ).add(1, {"code": error.type or "phasegate_error"})
    return error
