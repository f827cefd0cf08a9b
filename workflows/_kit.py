"""What every phasegate workflow shares (workflow code, deterministic).

Continue-as-new carry, trusted only from the workflow's own chain. A run handed
``carried`` state believes it only when the server says the run it continues is the
same workflow type on phasegate's task queue and that it started this run as its
continue-as-new, not as a cron or retry run re-using a starter's input
(:mod:`phasegate.domain.provenance`).
The check is a local activity, so its answer is a marker in history and a foreign
workflow can never ask for it. Until it answers, the run has no state and refuses
every message with the retryable "still starting" refusal that clients retry.

Histories recorded before the check replay as they were recorded (the check is a
``workflow.patched`` change; see :data:`CARRY_PROOF`).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.provenance import ProvenanceActivities
    from phasegate.domain.provenance import CarryCheck

__all__ = ["CARRY_PROOF", "CarryGate"]

CARRY_PROOF = "carry-proof-v1"
"""Patch id: runs from this change on prove their carry with the server."""

# The server answers in milliseconds; while it cannot, keep asking (never fail a
# session over an outage), with backoff capped at a minute.
_CHECK_RETRY = RetryPolicy(maximum_interval=timedelta(minutes=1))


class CarryGate:
    """The carried state of one run, held back until its origin is proven.

    Construct it in ``@workflow.init`` with the start input's ``carried``; then

    - ``gate.legacy`` is the carried state a pre-proof history restores at once
      (None otherwise: a fresh start, or a carry to prove);
    - ``await gate.proven()`` in ``run()`` returns the carried state once the server
      vouches for it, None for a fresh start, and raises nothing: a refused carry
      leaves ``gate.refusal`` set to the reason, which the workflow reports.
    """

    def __init__(self, carried: object | None) -> None:
        self._carried = carried
        self.legacy: object | None = None
        self.refusal = ""
        if carried is None:
            return
        if not workflow.patched(CARRY_PROOF):
            # Recorded before the proof: the run believed its own continue-as-new.
            info = workflow.info()
            if info.continued_run_id and not info.cron_schedule and info.retry_policy is None:
                self.legacy = carried
            else:
                self.refusal = "carried state from outside the run's own continue-as-new"
            self._carried = None

    async def proven(self) -> object | None:
        """The carried state, once the server confirms this run continues its own chain."""
        carried, self._carried = self._carried, None
        if carried is None:
            return None
        verdict = await workflow.execute_local_activity_method(
            ProvenanceActivities.check_carry,
            CarryCheck(workflow_type=workflow.info().workflow_type),
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=_CHECK_RETRY,
            summary="prove the carried state's origin",
        )
        if not verdict.trusted:
            self.refusal = verdict.reason
            return None
        return carried
