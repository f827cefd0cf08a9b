"""What every phasegate workflow shares (workflow code, deterministic).

- :class:`CarryGate`: continue-as-new carry, trusted only from the workflow's own chain.
- :func:`not_ready`: the typed, retryable answer to a message that arrives before the
  run has a state (clients retry it).
- :func:`refuse` / :func:`check`: the update-validator pattern. A validator asks the
  domain state ``check_<message>(msg) -> PhasegateError | None`` and hands the answer
  to :func:`check`; a refusal becomes an ``ApplicationError`` typed by its code (and
  counted), and never reaches history.
- :class:`Publisher`: search attributes and the Web UI's current details, written
  only when they change (an upsert is a history event).

Carry: A run handed
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

import asyncio
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.provenance import ProvenanceActivities
    from phasegate.domain.errors import PhasegateError
    from phasegate.domain.provenance import CarryCheck
    from phasegate.temporal import (
        METRIC_REFUSALS,
        SA_PHASE,
        SA_STATUS,
        SA_WORKFLOW,
        application_error,
    )

__all__ = ["CARRY_PROOF", "CarryGate", "Publisher", "check", "not_ready", "refuse"]

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


# ------------------------------------------------------------------ refusals


def refuse(problem: PhasegateError) -> ApplicationError:
    """A refused message as clients see it: typed by the problem's code, retryable
    (the next message may be accepted), counted in ``phasegate_refusals_total``."""
    error = application_error(problem, non_retryable=False)
    workflow.metric_meter().create_counter(
        METRIC_REFUSALS, "Messages a workflow refused before they reached its history"
    ).add(1, {"code": error.type or "phasegate_error"})
    return error


def check(problem: PhasegateError | None) -> None:
    """The validator pattern: raise the domain's refusal, if any (nothing is recorded)."""
    if problem is not None:
        raise refuse(problem)


def not_ready(problem: PhasegateError) -> ApplicationError:
    """What a message to a run that has no state yet gets (its definition or setup is
    loading, or its carry is being proven): typed, retryable, never counted as a
    refusal; phasegate's clients wait and try again."""
    return application_error(problem, non_retryable=False)


# ---------------------------------------------------------------- visibility


class Publisher:
    """Search attributes (``PhasegateWorkflow``, ``PhasegatePhase``,
    ``PhasegateStatus``) and the Web UI's current details, written only on change.

    An upsert is a history event and a visibility write, which costs the server about as
    much as the update it rides with. Where a caller passes ``phase_every``, a change of
    the phase alone is published at most that often: held, then written by one timer with
    the latest values (a change of status or workflow is written at once, with the phase).
    ``phase_every`` decides commands: a value a history was recorded with stays fixed.

    Args:
        on_change: False only to replay histories recorded when a workflow upserted on
            every publish (see ``Orchestration``'s ``workflow.patched`` flag).
    """

    def __init__(self, *, on_change: bool = True) -> None:
        self._on_change = on_change
        self._attributes: tuple[str, int, str] | None = None
        self._details: str | None = None
        self._upserted_at: datetime | None = None
        self._held: tuple[str, int, str] | None = None  # written by the timer below
        self._timer: asyncio.Task[None] | None = None

    def details(self, markdown: str) -> None:
        """The Web UI's current details (not a history event; set when it changes)."""
        if markdown != self._details:
            self._details = markdown
            workflow.set_current_details(markdown)

    def stale(self, name: str, phase: int, status: str) -> bool:
        """Whether the search attributes differ from ``(name, phase, status)``."""
        return self._attributes != (name, phase, status)

    def holding(self) -> bool:
        """A phase change is held for the timer (publishing again now would not write)."""
        return self._held is not None

    def attributes(
        self,
        name: str,
        phase: int,
        status: str,
        *,
        phase_every: float = 0,
        latest: Callable[[], tuple[str, int, str]] | None = None,
        by_timer: bool = False,
        cancels: bool = False,
        final: bool = False,
    ) -> None:
        """Upsert the search attributes if they changed (an upsert is a history event);
        with ``phase_every`` (seconds), a change of the phase alone at most that often,
        then by a timer that writes ``latest()`` (the host's values when it fires).

        ``by_timer``: a change of the phase alone always waits for the timer (one running
        at a time), and no decision reads the clock. Without it (histories recorded so),
        the change is written at once when ``phase_every`` has passed since the last
        upsert, which compares ``workflow.now()`` with the time of that upsert, and the
        SDK does not replay the time of every activation as it ran: the activation that
        takes a local activity's result, when that result's marker closed an earlier
        workflow task (one completed early to answer a query), runs at that earlier
        task's time on replay (a nondeterminism error under load, 2026-11).

        ``cancels`` (with ``by_timer``): a write that leaves the timer nothing to write
        cancels it, and ``final`` (the run is about to complete) writes at once, holding
        nothing. A timer that fires while the run's closing
        workflow task runs makes the server refuse that task's completion
        (``UnhandledCommand``: one more task and a full replay); a cancel sent before the
        close command withdraws the buffered firing, so the close goes through."""
        if self._on_change and not self.stale(name, phase, status):
            self._held = None
            if cancels:
                self.end_timer()
            return
        last = self._attributes
        phase_alone = last is not None and (last[0], last[2]) == (name, status)
        if phase_every and phase_alone and not (final and cancels):
            every = timedelta(seconds=phase_every)
            if by_timer:
                self._hold((name, phase, status), lambda: self._write_held_after(every, latest))
                return
            if self._upserted_at is not None and workflow.now() < self._upserted_at + every:
                self._hold((name, phase, status), lambda: self._write_held(every, latest))
                return
        self._upsert(name, phase, status)
        if cancels:
            self.end_timer()

    def end_timer(self) -> None:
        """End the held attribute's timer, if one is running, without writing what it
        holds (written already, moot, or left to the next run, which writes its attributes
        when it loads)."""
        self._held = None
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
        self._timer = None

    def _hold(
        self, values: tuple[str, int, str], timer: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        """Hold ``values`` for the timer ``timer()`` runs (one timer at a time)."""
        self._held = values
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(timer())

    async def _write_held(
        self, every: timedelta, latest: Callable[[], tuple[str, int, str]] | None
    ) -> None:
        while self._held is not None and self._upserted_at is not None:
            wait = self._upserted_at + every - workflow.now()
            if wait > timedelta(0):  # an upsert since (a status change) moved the due time
                await workflow.sleep(wait)
                continue
            self._write_latest(latest)

    async def _write_held_after(
        self, every: timedelta, latest: Callable[[], tuple[str, int, str]] | None
    ) -> None:
        """``by_timer``'s timer: after ``every``, the latest values, if still unwritten."""
        await workflow.sleep(every)
        if self._held is not None:  # else a status change wrote them meanwhile
            self._write_latest(latest)

    def _write_latest(self, latest: Callable[[], tuple[str, int, str]] | None) -> None:
        """The held change's timer fired: write the latest values if still unwritten."""
        assert self._held is not None
        values = latest() if latest is not None else self._held
        self._held = None
        if self.stale(*values):
            self._upsert(*values)

    def _upsert(self, name: str, phase: int, status: str) -> None:
        self._held = None
        self._attributes = (name, phase, status)
        self._upserted_at = workflow.now()
        workflow.upsert_search_attributes(
            [SA_WORKFLOW.value_set(name), SA_PHASE.value_set(phase), SA_STATUS.value_set(status)]
        )
