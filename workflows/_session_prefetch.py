"""A session's prefetch: the next phase rendered in the background while the agent works
(``SessionOptions.prefetch``), so an advance needs no activity round trip. Where the
deployment allows (``SessionPlan.ahead_bytes``: by default only where it seals) one
prefetch also renders the phases after it that fit: a walk of small phases is rendered
once, in the run's first workflow task, and its advances start none.

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
    from phasegate.domain.errors import SessionError
    from phasegate.domain.session.messages import PhaseDefinition
    from phasegate.domain.session.plan import PhasesAhead, RenderPhaseRequest
    from phasegate.domain.session.sealed import SealedPhase, in_order
    from phasegate.domain.session.state import SessionState

__all__ = ["Prefetch", "Prefetching", "prefetched", "render_now", "start_prefetch"]

Prefetching: TypeAlias = "asyncio.Task[PhaseDefinition | SealedPhase | PhasesAhead]"
_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=["definition_invalid"])
_TIMEOUT = timedelta(seconds=30)


def start_prefetch(state: SessionState, index: int, *, here: bool = False) -> Prefetching:
    """Start rendering phase ``index`` of the session (sealed where the deployment seals)
    and the phases after it that fit ``state.ahead_bytes``: ``here``, as a
    local activity of the session's worker (its result a marker in the workflow task that
    started it: no activity task, no second workflow task); else on the task queue, in
    the background of the workflow tasks that answer the agent."""
    ahead = state.ahead_bytes
    request = RenderPhaseRequest(ref=state.ref, index=index, ahead_bytes=ahead)
    summary = f"prefetch phase {index}" + (" and after" if ahead else "")
    result_type: type[PhaseDefinition | SealedPhase | PhasesAhead]
    if state.sealed_prefetch:
        name, result_type = "prefetch_sealed_phase", SealedPhase
    elif ahead:
        name, result_type = "render_phases", PhasesAhead
    else:
        name, result_type = "render_phase", PhaseDefinition
    task: Prefetching
    if here:
        task = workflow.start_local_activity(
            name,
            request,
            result_type=result_type,
            start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
            summary=summary,
        )
    else:
        task = workflow.start_activity(
            name,
            request,
            result_type=result_type,
            start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
            summary=summary,
        )
    # A failed prefetch is only a cache miss; mark its exception as seen.
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


async def prefetched(task: Prefetching, index: int) -> list[PhaseDefinition]:
    """The prefetched phase ``index`` and those after it, in order: empty where the
    prefetch failed, or a sealed one was not opened for this session's phase ``index``
    (the caller renders it again)."""
    try:
        found = await task
    except (ActivityError, ApplicationError):
        return []
    if isinstance(found, PhaseDefinition):
        return [found] if found.index == index else []
    if isinstance(found, PhasesAhead):
        return in_order(found.phases, index)
    run = found.opened_run(workflow.info().workflow_id, index)
    if not run:
        workflow.logger.warning("prefetch of phase %d not taken: %s", index, found.refusal())
    return run


async def render_now(state: SessionState, index: int) -> PhaseDefinition:
    """Phase ``index`` rendered at the advance that enters it (a local activity).

    Raises:
        SessionError: it could not be rendered; nothing has changed yet.
    """
    try:
        return await workflow.execute_local_activity_method(
            DefinitionActivities.render_phase,
            RenderPhaseRequest(ref=state.ref, index=index),
            start_to_close_timeout=_TIMEOUT,
            retry_policy=_RETRY,
        )
    except (ActivityError, ApplicationError) as exc:
        # The passed attempt (and its evidence) stays recorded; the phase stays
        # current and can be resubmitted once the definition is fixed.
        cause = exc.cause if isinstance(exc, ActivityError) else exc
        message = cause.message if isinstance(cause, ApplicationError) else str(exc)
        raise SessionError(
            f"checkpoint passed but phase {index} could not be rendered: {message}",
            hint="fix the workflow definition, then submit the same evidence again",
        ) from None


class Prefetch:
    """A session's background render (one at a time) and the phases it brought that
    are still ahead. Private to the workflow: no query, result or error ever reads it.

    Recorded histories fix how it answers (``_ahead`` stays empty where nothing is rendered
    ahead): the prefetch of phase ``i`` covers ``i`` once taken too, until the next one
    starts, and taking a phase twice gives the same answer."""

    def __init__(self) -> None:
        self._task: Prefetching | None = None
        self._index = -1
        self._taken: Prefetching | None = None  # the task whose phases are in _ahead
        self._ahead: dict[int, PhaseDefinition] = {}  # a window's phases after its first

    def covers(self, index: int) -> bool:
        """Phase ``index`` is prefetched (or being prefetched)."""
        return self._index == index or index in self._ahead

    def start(self, state: SessionState, index: int, *, here: bool = False) -> None:
        self._index = index
        self._task = start_prefetch(state, index, here=here)  # sealed where it seals

    def pending(self) -> bool:
        """A prefetch is still running (its result comes in a workflow task of its own)."""
        return self._task is not None and not self._task.done()

    async def take(self, index: int) -> PhaseDefinition | None:
        """Phase ``index`` if it was prefetched and may be taken (see :func:`prefetched`);
        None at once otherwise. Phases before it are dropped."""
        task, found = self._task, None
        if task is not None and self._index == index:
            run = await prefetched(task, index)  # the same answer every time
            if run and self._taken is not task:
                self._taken = task
                self._ahead.update((p.index, p) for p in run[1:])
            found = run[0] if run else None
        for behind in [i for i in self._ahead if i < index]:
            del self._ahead[behind]
        return found or self._ahead.get(index)
