"""A scripted coding agent that walks any gated session to its end."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import (
    CheckpointResult,
    PhaseView,
    SequenceViolation,
    SessionView,
)
from phasegate.testing._evidence import Evidence, complete_evidence, example_evidence

__all__ = [
    "Approver",
    "EvidenceTable",
    "ScriptedAgent",
    "Step",
    "WalkFailed",
    "signed_approver",
    "unsigned_approver",
]

EvidenceTable = Mapping[int | str, Evidence]
"""Evidence per phase: keyed by session phase number (int), by the phase's label as
written in the source (str, e.g. ``"2"`` for tasks.md phase 2), or ``"*"`` for every
other phase. A value is the evidence dict or a function of the phase view."""

Approver = Callable[[PhasegateClient, str, int], Awaitable[SessionView]]
"""Decides a phase awaiting approval: ``await approver(client, session_id, phase)``
returns the session's status after the decision."""


class WalkFailed(PhasegateError):
    """The scripted agent could not finish: its evidence failed, or nobody approves."""

    code = "walk_failed"


@dataclasses.dataclass
class Step:
    """One submission the agent made."""

    phase: int
    label: str
    evidence: dict[str, Any]
    result: CheckpointResult


def unsigned_approver(name: str, comment: str = "approved by the scripted approver") -> Approver:
    """Approve by name only (sessions on a worker that allows unsigned approvals)."""

    async def approve(client: PhasegateClient, session_id: str, phase: int) -> SessionView:
        return await client.decide(
            session_id, approver=name, decision="approve", phase=phase, comment=comment
        )

    return approve


def signed_approver(
    name: str, *, key_dir: str | Path | None = None, comment: str = "approved"
) -> Approver:
    """Approve with ``name``'s Ed25519 key from ``key_dir`` (``phasegate keys new NAME``)."""
    from phasegate.client import keys

    directory = Path(key_dir) if key_dir is not None else None

    async def approve(client: PhasegateClient, session_id: str, phase: int) -> SessionView:
        status = await client.status(session_id)  # what the approver sees and signs
        nonce, signature = keys.sign_decision(
            name,
            session_id=session_id,
            phase=phase,
            decision="approve",
            comment=comment,
            directory=directory,
            binding=status.approval_binding,
        )
        return await client.decide(
            session_id,
            approver=name,
            decision="approve",
            phase=phase,
            comment=comment,
            nonce=nonce,
            signature=signature,
        )

    return approve


class ScriptedAgent:
    """Walks a session phase by phase, like a diligent coding agent.

    For each phase it reads the phase view, takes evidence from ``evidence`` (by
    phase number, then label, then ``"*"``), else the example the phase documents,
    completes missing required fields from the gate's schema, submits once, and
    calls ``approve`` when the phase awaits a person. It never reads ahead.

    Args:
        client: A connected :class:`~phasegate.client.api.PhasegateClient`.
        evidence: Evidence per phase (see :data:`EvidenceTable`).
        approve: Who approves phases that need it; without one a walk that reaches
            an approval raises :class:`WalkFailed`.
        max_steps: Submissions after which the walk gives up.
    """

    def __init__(
        self,
        client: PhasegateClient,
        evidence: EvidenceTable | None = None,
        *,
        approve: Approver | None = None,
        max_steps: int = 500,
    ) -> None:
        self.client = client
        self.evidence = dict(evidence or {})
        self.approve = approve
        self.max_steps = max_steps
        self.steps: list[Step] = []
        self.queries = 0

    def evidence_for(self, view: PhaseView) -> dict[str, Any]:
        """The evidence this agent submits for ``view``."""
        for key in (view.phase, view.label, "*"):
            if key in self.evidence:
                chosen = self.evidence[key]
                return dict(chosen(view) if callable(chosen) else chosen)
        return complete_evidence(example_evidence(view), view)

    async def walk(self, session_id: str) -> SessionView:
        """Submit evidence (and approve) until the session completes.

        Returns:
            The final status.

        Raises:
            WalkFailed: evidence failed its gate (the problems are in the message), a
                phase awaits approval and no approver was given, or ``max_steps`` ran out.
        """
        await self.advance_all(session_id)
        self.queries += 1
        return await self.client.status(session_id)

    async def advance_all(self, session_id: str) -> int:
        """:meth:`walk` without the final status query (a query of a completed workflow
        replays its whole history on a worker). Returns the submissions made."""
        view = await self._current(session_id)
        while view is not None:
            if len(self.steps) >= self.max_steps:
                raise WalkFailed(f"gave up after {self.max_steps} submissions", where=session_id)
            evidence = self.evidence_for(view)
            result = await self.client.submit(
                session_id,
                view.phase,
                evidence,
                submission_id=f"{session_id}-agent-{len(self.steps)}",
            )
            self.steps.append(Step(view.phase, view.label, evidence, result))
            if not result.passed:
                problems = "; ".join(f"{p.field}: {p.message}" for p in result.problems)
                raise WalkFailed(
                    f"phase {view.phase} ({view.name}) refused the evidence: {problems}",
                    where=session_id,
                )
            if result.completed:
                view = None
            elif result.awaiting_approval:
                view = await self._current(session_id)
            else:
                view = _next_view(result) or await self._current(session_id)
        return len(self.steps)

    async def _current(self, session_id: str) -> PhaseView | None:
        """The current phase's view (approving first if it waits), None once completed."""
        self.queries += 1
        current = await self.client.current(session_id)
        status = current.status
        decisions = 0  # a gate may want several approvers: ask until it moves on
        while status.status in ("awaiting_approval", "approval_overdue") and decisions < 10:
            if self.approve is None:
                raise WalkFailed(
                    f"phase {status.current_phase} awaits approval and this agent has no approver",
                    where=session_id,
                    hint="pass approve=signed_approver(NAME) or unsigned_approver(NAME)",
                )
            status = await self.approve(self.client, session_id, status.current_phase)
            decisions += 1
        if status.status == "completed":
            return None
        if status.status != "active":
            raise WalkFailed(f"session is {status.status}", where=session_id)
        if decisions == 0 and current.phase is not None:
            return current.phase  # read with the status, in one answer
        self.queries += 1
        view = await self.client.phase(session_id, status.current_phase)
        if isinstance(view, SequenceViolation):  # cannot happen for the current phase
            raise WalkFailed(view.message, where=session_id)
        return view


def _next_view(result: CheckpointResult) -> PhaseView | None:
    """The next phase's view when the advance's result carries it whole."""
    nxt = result.next_phase
    return nxt if isinstance(nxt, PhaseView) else None
