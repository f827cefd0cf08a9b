"""A session's prefetch: the next phase rendered in the background while the agent works
(``SessionOptions.prefetch``), so an advance needs no activity round trip.

The result lands in the workflow's history. Where the deployment holds a seal key ring
(``SessionState.sealed_prefetch``, decided by the worker that loaded the session) it is
a ``SealedPhase`` that the worker's data converter stores encrypted (``phasegate.sealing``)
and the session takes only once opened for this session and this phase: anything else
(a forged answer from a poller on phasegate's queue, a payload that does not
authenticate, a render error) is a cache miss, and the phase is rendered at the advance.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TypeAlias

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.definitions import DefinitionActivities
    from phasegate.activities.sealed_prefetch import SealedPrefetch
    from phasegate.domain.session.messages import PhaseDefinition, RenderPhaseRequest
    from phasegate.domain.session.sealed import SealedPhase
    from phasegate.domain.session.state import SessionState

__all__ = ["Prefetch", "Prefetching", "prefetched", "start_prefetch"]

Prefetching: TypeAlias = "asyncio.Task[PhaseDefinition | SealedPhase]"
_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=["definition_invalid"])
_TIMEOUT = timedelta(seconds=30)


def start_prefetch(state: SessionState, index: int, *, here: bool = False) -> Prefetching:
    """Start rendering phase ``index`` of the session (sealed where the deployment seals):
    ``here``, as a local activity of the session's worker (its result a marker in the
    workflow task that started it: no activity task, no second workflow task); else on
    the task queue, in the background of the workflow tasks that answer the agent."""
    request = RenderPhaseRequest(ref=state.ref, index=index)
    summary = f"prefetch phase {index}"
    method = SealedPrefetch.prefetch_phase if state.sealed_prefetch else None
    task: Prefetching
    if here and method is not None:
        task = workflow.start_local_activity_method(
            method, request, start_to_close_timeout=_TIMEOUT, retry_policy=_RETRY, summary=summary
        )
    elif here:
        task = workflow.start_local_activity_method(
            DefinitionActivities.render_phase,
            request,
            start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
            summary=summary,
        )
    elif method is not None:
        task = workflow.start_activity_method(
            method, request, start_to_close_timeout=_TIMEOUT, retry_policy=_RETRY, summary=summary
        )
    else:
        task = workflow.start_activity_method(
            DefinitionActivities.render_phase,
            request,
            start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
            summary=summary,
        )
    # A failed prefetch is only a cache miss; mark its exception as seen.
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


async def prefetched(task: Prefetching, index: int) -> PhaseDefinition | None:
    """The prefetched phase ``index``, or None: the prefetch failed, or a sealed one was
    not opened for this session's phase ``index`` (the caller renders it again)."""
    try:
        found = await task
    except (ActivityError, ApplicationError):
        return None
    if not isinstance(found, SealedPhase):
        return found
    phase = found.opened_for(workflow.info().workflow_id, index)
    if phase is None:
        workflow.logger.warning("prefetch of phase %d not taken: %s", index, found.refusal())
    return phase


class Prefetch:
    """A session's one background render at a time: which phase, and its task. Private
    to the workflow: no query, result or error ever reads it."""

    def __init__(self) -> None:
        self._task: Prefetching | None = None
        self._index = -1

    def covers(self, index: int) -> bool:
        """Phase ``index`` is the one prefetched (or being prefetched)."""
        return self._index == index

    def start(self, state: SessionState, index: int, *, here: bool = False) -> None:
        self._index = index
        self._task = start_prefetch(state, index, here=here)  # sealed where it seals

    def pending(self) -> bool:
        """A prefetch is still running (its result comes in a workflow task of its own)."""
        return self._task is not None and not self._task.done()

    async def take(self, index: int) -> PhaseDefinition | None:
        """Phase ``index`` if it was prefetched and may be taken (see :func:`prefetched`);
        None at once otherwise."""
        if self._task is None or self._index != index:
            return None
        return await prefetched(self._task, index)
