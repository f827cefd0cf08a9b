"""Approval deadlines of ``GatedSession``: the timer and the webhook an escalation calls.

What a passed deadline means (reject, or escalate and notify) is
``SessionState.apply_deadline``'s call; this is the mechanics: one timer per
(phase, due_at) the session waits on, and the notify activity outside the lock
(its retries must not hold up a decision).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.notify import notify_webhook
    from phasegate.domain.session.plan import NotifyRequest
    from phasegate.domain.session.state import SessionState

__all__ = ["Deadlines"]


class Host(Protocol):
    _lock: asyncio.Lock

    def _ready(self) -> SessionState: ...

    def _publish(self, *, defer_search_attributes: bool = False) -> None: ...


class Deadlines:
    def __init__(self, host: Host) -> None:
        self._host = host
        self._key: tuple[int, datetime] | None = None
        self._waiting: set[asyncio.Task[None]] = set()  # deadlines whose timer runs

    def arm(self) -> None:
        """Start the timer for the approval deadline the session now waits on, if any."""
        key = self._host._ready().approval_deadline()
        if key is not None and self._key != key:
            self._key = key
            task = asyncio.create_task(self._deadline(key))
            self._waiting.add(task)

    def end(self) -> None:
        """The run closes (engine 4): stop the timers of the deadlines still waiting, so a
        firing during the closing workflow task cannot make the server refuse the close;
        a continued run arms its deadline again from its carried state."""
        for task in self._waiting:
            task.cancel()
        self._waiting.clear()

    async def _deadline(self, key: tuple[int, datetime]) -> None:
        state = self._host._ready()
        phase, due_at = key
        remaining = max((due_at - workflow.now()).total_seconds(), 0.001)
        task = asyncio.current_task()
        try:
            await workflow.wait_condition(
                lambda: not state.approval_pending(phase, due_at), timeout=remaining
            )
            # Decided, rolled back or paused in time; a resume arms the deadline again.
            if self._key == key:
                self._key = None
            return
        except TimeoutError:
            pass
        finally:
            if task is not None:
                self._waiting.discard(task)
        async with self._host._lock:
            expiry = state.apply_deadline(
                phase, due_at, workflow.now(), session_id=workflow.info().workflow_id
            )
            if expiry is None:
                return
            self._host._publish()
        if expiry.notify is not None:  # outside the lock: retries must not block decisions
            await self._notify(state, expiry.notify, phase)

    async def _notify(self, state: SessionState, request: NotifyRequest, phase: int) -> None:
        error: str | None = None
        try:
            await workflow.execute_activity(
                notify_webhook,
                request,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(minutes=1)),
            )
        except ActivityError as exc:
            error = str(exc.cause or exc)
        state.apply_notification(phase, request.url, workflow.now(), error)
