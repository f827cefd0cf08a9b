"""phasegate's own metrics on the activity side: how long verify checks take.

Recorded on the Temporal runtime's meter (``activity.metric_meter()``), so they reach
the same Prometheus endpoint as the SDK's metrics (``phasegate worker --metrics-port``,
see :func:`phasegate.temporal.metrics_runtime`); with no metrics configured the meter
records nothing. The workflow-side counters are in ``phasegate.workflows._metrics``.
"""

from __future__ import annotations

import time

from temporalio import activity

from phasegate.activities.verify import VerifyActivities
from phasegate.domain.verify import VerifyReport, VerifyRequest
from phasegate.temporal import METRIC_VERIFY_SECONDS

__all__ = ["MeteredVerify"]


class MeteredVerify:
    """``run_verify_checks`` that also records its run time in
    :data:`~phasegate.temporal.METRIC_VERIFY_SECONDS` (label ``outcome``: ``passed``,
    ``failed``, or ``error`` when it raised, cancellation included).

    Args:
        inner: The activities that run the checks.
    """

    def __init__(self, inner: VerifyActivities) -> None:
        self.inner = inner

    @activity.defn(name="run_verify_checks")
    def run_verify_checks(self, req: VerifyRequest) -> VerifyReport:
        """See :meth:`VerifyActivities.run_verify_checks`."""
        start = time.monotonic()
        outcome = "error"
        try:
            report = self.inner.run_verify_checks(req)
            outcome = "passed" if report.passed else "failed"
            return report
        finally:
            activity.metric_meter().create_histogram_float(
                METRIC_VERIFY_SECONDS, "Run time of one verify activity", "s"
            ).record(time.monotonic() - start, {"outcome": outcome})
