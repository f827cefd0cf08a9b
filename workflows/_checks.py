"""Workspace checks as every workflow runs them (kit).

Reading checks run as a local activity of this worker where it runs them
(``activities/_verify_local``: it sees the workspace as the verify worker does);
commands, and every check where it does not, go to the verify task queue. A check
that cannot run at all is one failed check (it blocks). Used by a step graph's step
gate and a session's task completions and pre-analysis; the session's checkpoint keeps
its own path (it also renders the next phase in the same local activity, behind
patches its recorded histories expect).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from phasegate.activities._verify_local import LocalChecks
    from phasegate.activities.verify import VerifyActivities
    from phasegate.domain.session.checking import verify_unavailable
    from phasegate.domain.settings import verify_task_queue
    from phasegate.domain.verify import (
        VerifyReport,
        VerifyRequest,
        VerifyResult,
        budget_seconds,
        reads_only,
    )
    from phasegate.domain.verify_contain import checked_report

__all__ = ["SLACK", "run_checks"]

SLACK = timedelta(seconds=60)
"""Beyond the commands' own timeouts: start-up, the reading checks, reporting."""


async def run_checks(
    request: VerifyRequest, *, here: bool, retry: RetryPolicy, summary: str
) -> tuple[list[VerifyResult], bool]:
    """Run ``request``'s checks. Returns one result per check, and whether this worker
    still runs reading checks itself (``here``: pass it back next time)."""
    timeout = timedelta(seconds=budget_seconds(request.checks)) + SLACK
    try:
        report: VerifyReport | None = None
        if here and reads_only(request.checks):
            report = await workflow.execute_local_activity_method(
                LocalChecks.run_checks_here,
                request,
                start_to_close_timeout=timeout,
                retry_policy=retry,
                summary=summary,
            )
            here = report is not None
        if report is None:
            report = await workflow.execute_activity_method(
                VerifyActivities.run_verify_checks,
                request,
                task_queue=verify_task_queue(workflow.info().task_queue),
                start_to_close_timeout=timeout,
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=retry,
                summary=summary,
            )
    except ActivityError as exc:
        cause = exc.cause
        text = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
        return verify_unavailable(text), here
    results = checked_report(request.checks, report.results)
    if results is None:
        n = len(request.checks)
        return verify_unavailable(f"the verify report does not answer the {n} checks"), here
    return results, here
