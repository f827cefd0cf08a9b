"""The server's word on who is asking: phasegate's workers serve only phasegate's runs.

Two checks, one source of truth (the server's record of a run: its workflow type and
task queue; see :mod:`phasegate.domain.provenance` for why nothing in an input can
prove it):

- :class:`CallerCheck`, an activity interceptor on every phasegate worker: an activity
  runs only when the run that scheduled it is one of phasegate's workflow types on
  phasegate's task queue. A foreign workflow on a queue of its own that schedules
  ``run_coding_agent``, ``run_verify_checks``, ``render_phase`` or a model request on
  phasegate's queues is refused (``caller_refused``, not retried) before the activity
  reads its input. One ``DescribeWorkflowExecution`` per run, then cached. Local
  activities are exempt: only the worker running the workflow task runs them, so a
  foreign workflow cannot ask for one.
- :meth:`ProvenanceActivities.check_carry`, a *local* activity: a run handed carried
  state is trusted only when the server started it as the continue-as-new of a run of
  the same workflow type on the same task queue (not a cron or retry run). Its answer is recorded in history (a marker),
  so replay needs no server.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Collection
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import ContinueAsNewInitiator
from temporalio.api.history.v1 import WorkflowExecutionStartedEventAttributes
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from phasegate.domain.errors import CallerRefused, ProvenanceUnavailable
from phasegate.domain.provenance import (
    CarryCheck,
    Provenance,
    RunRecord,
    caller_verdict,
    carry_verdict,
)
from phasegate.temporal import application_error

__all__ = ["CallerCheck", "ProvenanceActivities", "describe_run"]

_CACHE_RUNS = 10_000  # verdicts kept (one per run); a run's type and queue never change


async def describe_run(client: Client, workflow_id: str, run_id: str) -> RunRecord | None:
    """The server's record of one run (None when there is no such run).

    Raises:
        ApplicationError: retryable, when the server cannot answer now.
    """
    try:
        desc = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            return None
        raise application_error(
            ProvenanceUnavailable(
                f"cannot ask the Temporal server who scheduled this activity: {exc.message}"
            ),
            non_retryable=False,
        ) from None
    return RunRecord(
        workflow_id=desc.id,
        run_id=desc.run_id,
        workflow_type=desc.workflow_type,
        task_queue=desc.task_queue,
    )


class CallerCheck(Interceptor):
    """Refuses every (non-local) activity whose scheduling run is not phasegate's own.

    Args:
        client: The worker's client (its namespace is the one checked).
        workflow_types: phasegate's workflow type names.
        task_queue: phasegate's main task queue, where its workflows run.
    """

    def __init__(self, client: Client, workflow_types: Collection[str], task_queue: str) -> None:
        self._client = client
        self._types = frozenset(workflow_types)
        self._queue = task_queue
        self._verdicts: collections.OrderedDict[tuple[str, str], Provenance] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self)

    async def verdict(self, info: activity.Info) -> Provenance:
        """The verdict on the run that scheduled the activity ``info`` describes."""
        if info.is_local:
            return Provenance(trusted=True)
        if (
            not info.workflow_id
            or not info.workflow_run_id
            or info.workflow_namespace != self._client.namespace
        ):
            return caller_verdict(None, workflow_types=self._types, task_queue=self._queue)
        key = (info.workflow_id, info.workflow_run_id)
        with self._lock:
            cached = self._verdicts.get(key)
            if cached is not None:
                self._verdicts.move_to_end(key)
                return cached
        run = await describe_run(self._client, *key)
        found = caller_verdict(run, workflow_types=self._types, task_queue=self._queue)
        with self._lock:
            self._verdicts[key] = found
            while len(self._verdicts) > _CACHE_RUNS:
                self._verdicts.popitem(last=False)
        return found


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, check: CallerCheck) -> None:
        super().__init__(next)
        self._check = check

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        found = await self._check.verdict(info)
        if not found.trusted:
            activity.logger.warning("refused activity %s: %s", info.activity_type, found.reason)
            raise application_error(
                CallerRefused(
                    f"phasegate refuses to run {info.activity_type}: {found.reason}",
                    where=f"workflow {info.workflow_id} run {info.workflow_run_id}",
                    hint="start phasegate's workflows with `phasegate start` / `phasegate "
                    "orchestrate` (or the SDK) on its task queue; its activities are not a "
                    "public API",
                )
            )
        return await super().execute_activity(input)


class ProvenanceActivities:
    """The local activity that checks a carry's origin with the server.

    Args:
        client: The worker's client.
        task_queue: phasegate's main task queue.
    """

    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._queue = task_queue

    @activity.defn
    async def check_carry(self, req: CarryCheck) -> Provenance:
        """Whether this run was handed its carried state by its own predecessor: the server
        started it as a continue-as-new of a run of the same workflow type on the same task
        queue (run as a local activity, so only phasegate's own workflow code asks)."""
        info = activity.info()
        wid = info.workflow_id or ""
        started = await _started_event(self._client, wid, info.workflow_run_id or "")
        predecessor_id = started.continued_execution_run_id if started else ""
        predecessor = (
            await describe_run(self._client, wid, predecessor_id) if predecessor_id else None
        )
        return carry_verdict(
            predecessor,
            workflow_type=req.workflow_type,
            task_queue=self._queue,
            continued_as_new=started is not None
            and started.initiator == ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW,
        )


async def _started_event(
    client: Client, workflow_id: str, run_id: str
) -> WorkflowExecutionStartedEventAttributes | None:
    """The server's record of how a run started (its first history event)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        async for event in handle.fetch_history_events(page_size=1):
            if event.HasField("workflow_execution_started_event_attributes"):
                return event.workflow_execution_started_event_attributes
            return None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise application_error(
            ProvenanceUnavailable(
                f"cannot ask the Temporal server how this run started: {exc.message}"
            ),
            non_retryable=False,
        ) from None
    return None
