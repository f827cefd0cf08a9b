"""phasegate's counters on the workflow side, through ``workflow.metric_meter()``.

That meter is replay-safe (nothing is recorded while a history replays) and may be used
in update validators: recording a metric is not a command, so a validator stays
read-only. Names and labels are documented in :mod:`phasegate.temporal`.
"""

from __future__ import annotations

from typing import Literal

from temporalio import workflow

from phasegate.temporal import METRIC_ADVANCES

__all__ = ["advanced"]


def advanced(via: Literal["checkpoint", "approval"]) -> None:
    """Count one completed phase."""
    workflow.metric_meter().create_counter(
        METRIC_ADVANCES, "Phases completed (checkpoint passed or approval granted)"
    ).add(1, {"via": via})
