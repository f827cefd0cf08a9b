"""What Temporal knows about a session beyond what its queries answer.

A query needs a worker that has loaded the session, so it cannot say why a
session never loaded, whether any worker is there to take a message, or how long
a verify check has been running. This module asks Temporal itself:

* :func:`failed_start`: a session whose execution closed before it loaded its
  definition (a bad or empty spec, a missing target): the reason from its result;
* :func:`waiting`: what a message to the session waits on: a worker to take the
  session's task (pending workflow task, pollers of its task queue), a verify check
  queued or running (pending activities on ``<queue>-verify``);
* :func:`failed_starts` and :func:`delete`: sessions that failed to start, listed
  from visibility and deleted (``phasegate sessions prune``).

Everything here reads or deletes executions through the Temporal client; it needs
no worker (trust level 2: any CLI user may do it, as with any Temporal client).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import (
    PendingActivityState,
    PendingWorkflowTaskState,
    TaskQueueType,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    DescribeTaskQueueRequest,
)
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    TerminatedError,
    TimeoutError,
)

from phasegate.domain.errors import PhasegateError, SessionError
from phasegate.domain.settings import verify_task_queue
from phasegate.temporal import phasegate_error

__all__ = [
    "PRUNE_HINT",
    "RunningCheck",
    "Waiting",
    "delete",
    "failed_start",
    "failed_start_reason",
    "failed_starts_query",
    "gather_limited",
    "parse_age",
    "waiting",
]

PRUNE_HINT = "`phasegate sessions prune` removes failed starts"
_CLOSED_BADLY = (
    WorkflowExecutionStatus.FAILED,
    WorkflowExecutionStatus.TERMINATED,
    WorkflowExecutionStatus.TIMED_OUT,
    WorkflowExecutionStatus.CANCELED,
)
# A worker long-polls for about a minute and the server lists a poller for minutes
# after it stopped: a poller not seen for this long is taken as gone.
POLLER_GONE_SECONDS = 90.0


@dataclass
class RunningCheck:
    """A verify activity of the session, queued or running."""

    state: str  # "queued" (no verify worker took it yet) or "running"
    seconds: float  # since it was queued, or since this attempt started
    attempt: int
    task_queue: str
    check: str = ""  # the check being run, when its last heartbeat says
    workers: int | None = None  # verify workers seen polling (only when queued)


@dataclass
class Waiting:
    """What a message to the session waits on (see :func:`waiting`)."""

    session_id: str
    task_queue: str
    running: bool
    # Seconds the session's workflow task has waited for a worker to take it (None: not
    # waiting), and whether one took it but has not answered (a stopped worker).
    task_waiting: float | None = None
    task_taken: bool = False
    workers: int = 0  # workers seen polling the session's task queue lately
    last_poll: float | None = None  # seconds since the latest poll
    checks: list[RunningCheck] = field(default_factory=list)


def _age(ts: Any, now: datetime) -> float:
    return max(0.0, (now - ts.ToDatetime(tzinfo=UTC)).total_seconds())


async def _pollers(
    client: Client, queue: str, kind: int, now: datetime
) -> tuple[int, float | None]:
    """Workers seen polling ``queue`` lately, and seconds since the latest poll."""
    resp = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=kind,  # type: ignore[arg-type]
        )
    )
    ages = [_age(p.last_access_time, now) for p in resp.pollers]
    fresh = [a for a in ages if a < POLLER_GONE_SECONDS]
    return len(fresh), (min(ages) if ages else None)


async def _check_name(client: Client, details: Any) -> str:
    """The check a verify activity's last heartbeat names (``{"check": i, "name": n}``)."""
    if not details.payloads:
        return ""
    try:
        values = await client.data_converter.decode(list(details.payloads))
    except Exception:  # noqa: BLE001 - a heartbeat we cannot read just names no check
        return ""
    first = values[0] if values else None
    return str(first.get("name", "")) if isinstance(first, dict) else ""


async def waiting(client: Client, session_id: str) -> Waiting:
    """What a message to ``session_id`` is waiting on right now: one describe of the
    execution and of its task queue (plus the verify queue while a check is queued)."""
    desc = await client.get_workflow_handle(session_id).describe()
    now = datetime.now(UTC)
    raw = desc.raw_description
    out = Waiting(
        session_id=session_id,
        task_queue=desc.task_queue,
        running=desc.status == WorkflowExecutionStatus.RUNNING,
    )
    if not out.running:
        return out
    if raw.HasField("pending_workflow_task"):
        wft = raw.pending_workflow_task
        if wft.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
            out.task_waiting = _age(wft.scheduled_time, now)
        elif wft.HasField("started_time"):
            out.task_waiting, out.task_taken = _age(wft.started_time, now), True
    out.workers, out.last_poll = await _pollers(
        client, desc.task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, now
    )
    verify_queue = verify_task_queue(desc.task_queue)
    for act in raw.pending_activities:
        if act.activity_type.name != "run_verify_checks":
            continue
        if act.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            check = RunningCheck(
                "running",
                _age(act.last_started_time, now),
                act.attempt,
                verify_queue,
                check=await _check_name(client, act.heartbeat_details),
            )
        else:
            workers, _ = await _pollers(
                client, verify_queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY, now
            )
            check = RunningCheck(
                "queued", _age(act.scheduled_time, now), act.attempt, verify_queue, workers=workers
            )
        out.checks.append(check)
    return out


def _reason(exc: BaseException) -> str:
    """Why an execution closed, from its result's failure."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ApplicationError):
            return str(phasegate_error(cause))
        if isinstance(cause, TerminatedError):
            return f"it was terminated ({cause.message or 'no reason given'})"
        if isinstance(cause, TimeoutError):
            return "it timed out"
        if isinstance(cause, CancelledError):
            return "it was cancelled"
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return str(exc)


async def failed_start_reason(client: Client, session_id: str, run_id: str | None = None) -> str:
    """Why the closed execution ``session_id`` (``run_id``) failed, in one line."""
    handle = client.get_workflow_handle(session_id, run_id=run_id)
    try:
        await handle.result(follow_runs=False)
    except WorkflowFailureError as exc:
        return _reason(exc)
    except Exception as exc:  # noqa: BLE001 - e.g. history deleted meanwhile
        return str(exc) or type(exc).__name__
    return "it closed without loading"


async def failed_start(client: Client, session_id: str) -> SessionError | None:
    """The error for a session whose execution closed before it loaded its definition,
    or None when it is still running (really starting)."""
    desc = await client.get_workflow_handle(session_id).describe()
    if desc.status not in _CLOSED_BADLY:
        return None
    why = await failed_start_reason(client, session_id, desc.run_id)
    return SessionError(
        f"session {session_id} failed to start: {why}",
        hint="fix the spec or the target and start a new session with `phasegate start`; "
        + PRUNE_HINT,
    )


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d`` (s, m, h, d, w) as a timedelta.

    Raises:
        PhasegateError: Any other text, naming ``--older-than``.
    """
    m = _AGE.match(text)
    if not m:
        raise PhasegateError(
            f"expected a duration like 30m, 12h or 7d, got {text!r}", where="--older-than"
        )
    return timedelta(seconds=float(m[1]) * _UNITS[m[2]])


def failed_starts_query(older_than: timedelta | None = None) -> str:
    """The visibility query of sessions that closed before loading their definition:
    failed, terminated, timed out or cancelled while their status was still "starting"
    (a session that loaded has published another status)."""
    clauses = [
        "WorkflowType = 'GatedSession'",
        "ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut', 'Canceled')",
        "PhasegateStatus = 'starting'",
    ]
    if older_than is not None:
        cutoff = datetime.now(UTC) - older_than
        clauses.append(f"StartTime < '{cutoff.strftime('%Y-%m-%dT%H:%M:%SZ')}'")
    return " AND ".join(clauses)


async def delete(client: Client, session_id: str, run_id: str) -> None:
    """Delete one closed execution and its history (Temporal's DeleteWorkflowExecution)."""
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=session_id, run_id=run_id),
        )
    )


async def gather_limited(coros: list[Any], limit: int = 8) -> list[Any]:
    """Run ``coros`` at most ``limit`` at a time, results in order."""
    gate = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with gate:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))
