"""What ``GatedSession`` shows of itself: search attributes and the Web UI's current
details, by the engine level the session was loaded at.

An upsert is a history event, so which upserts a session writes (and when) is part of
its commands: engine 2 holds a change of the phase alone for ``PHASE_ATTRIBUTE_SECONDS``
(on the clock), engine 3 by the timer alone, engine 4 cancels the timer when it has
nothing left to write and before the run closes (``workflows/_kit.Publisher``).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from phasegate.domain.session.plan import PHASE_ATTRIBUTE_SECONDS
    from phasegate.domain.session.state import SessionState
    from phasegate.domain.session.views import details_markdown
    from phasegate.workflows._kit import Publisher

__all__ = ["SessionVisibility"]


class _Prefetch(Protocol):
    def pending(self) -> bool: ...


class _Deadlines(Protocol):
    def end(self) -> None: ...


class Host(Protocol):
    @property
    def _prefetch(self) -> _Prefetch: ...

    @property
    def _deadlines(self) -> _Deadlines: ...

    def _ready(self) -> SessionState: ...


class SessionVisibility:
    def __init__(self, host: Host) -> None:
        self._host = host
        self._publisher = Publisher()

    def due(self) -> bool:
        """Deferred search attributes are due once the prefetch has come back."""
        stale = self._publisher.stale(*self._shown())
        return stale and not self._host._prefetch.pending() and not self._publisher.holding()

    def publish(self, *, defer_search_attributes: bool = False, final: bool = False) -> None:
        """Keep search attributes and the Web UI's current details in step with state.

        With ``defer_search_attributes`` and a prefetch in flight, the upsert waits
        for the prefetch's workflow task (the run loop sees :meth:`due`).
        ``final``: the run completes next (engine 4 writes what is held, ends its timer).
        """
        state = self._host._ready()
        self._publisher.details(details_markdown(state))
        if defer_search_attributes and self._host._prefetch.pending():
            return
        every = PHASE_ATTRIBUTE_SECONDS if state.engine >= 2 else 0
        self._publisher.attributes(
            *self._shown(),
            phase_every=every,
            latest=self._shown,
            by_timer=state.engine >= 3,
            cancels=state.engine >= 4,
            final=final,
        )

    async def close(self, state: SessionState) -> None:
        """Before the run's close command (engine 4, else what older runs did).

        From engine 4, no timer of this run may fire while its closing workflow task runs
        (the server would refuse the close, ``UnhandledCommand``): a completing run writes
        what it held; a run continuing as new only cancels the held attribute's timer (the
        next run writes its attributes when it loads). Deadlines' timers are cancelled too
        (the next run arms them from its carried state). The yield lets the cancels'
        commands go out before the close."""
        if state.engine < 4:
            self.publish()
            return
        if state.finished:
            self.publish(final=True)
        else:
            self._publisher.details(details_markdown(state))
            self._publisher.end_timer()
        self._host._deadlines.end()
        await asyncio.sleep(0)

    def _shown(self) -> tuple[str, int, str]:
        state = self._host._ready()
        return state.workflow_type, state.current.index, state.status
