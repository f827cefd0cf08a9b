"""The owners of a session's state: each keeps its own fields and is the only code
that changes them. :class:`~phasegate.domain.session.state.SessionState` holds one of
each and composes them; the rules that span several (a decision completes a phase
*and* spends a nonce *and* closes the attempts) live there.

- :class:`PhaseLedger`: the phase being worked on, the completed ones (definition,
  record, artifact), the artifact awaiting approval and the superseded ones;
- :class:`AttemptLog`: every checkpoint attempt (the current phase's, then the
  compacted log of earlier ones) and the current phase's attempt number;
- :class:`ApprovalBook`: who may decide (keys, unsigned policy), the decisions
  made, the open deadline and the nonces already spent;
- :class:`Answers`: the answers remembered for repeated submission ids.

Bounds (how much each keeps) are in ``bounds``; pure, like the rest of ``domain``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from phasegate.domain.session.bounds import (
    MAX_APPROVALS,
    MAX_ATTEMPT_LOG,
    MAX_CURRENT_ATTEMPTS,
    MAX_NONCES,
    MAX_REMEMBERED_SUBMISSIONS,
    MAX_SUPERSEDED,
    compact_result,
    elided,
)
from phasegate.domain.session.messages import (
    ApprovalDecision,
    ApprovalRecord,
    Attempt,
    CheckpointResult,
    CompletedPhase,
    PhaseArtifact,
    PhaseDefinition,
)
from phasegate.domain.signing import ApproverKey

__all__ = ["Answers", "ApprovalBook", "AttemptLog", "PhaseLedger", "nest_flat_state"]

_STRIPPED = "(content of this completed phase is in an earlier run's history)"


class PhaseLedger(BaseModel):
    """Where the session is: the current phase and what became of the others."""

    current: PhaseDefinition
    past: dict[int, PhaseDefinition] = Field(default_factory=dict)
    completed: list[CompletedPhase] = Field(default_factory=list)
    artifacts: dict[int, PhaseArtifact] = Field(default_factory=dict)
    superseded: list[PhaseArtifact] = Field(default_factory=list)
    pending: PhaseArtifact | None = Field(None, description="Passed, awaiting approval.")

    def readable(self, index: int, *, finished: bool) -> PhaseDefinition | None:
        """The phase if the agent may read it (current or completed), else None."""
        if index == self.current.index and not finished:
            return self.current
        if index in self.past:
            return self.past[index]
        if index == self.current.index:
            return self.current
        return None

    def park(self, artifact: PhaseArtifact) -> None:
        """Hold the current phase's passed checkpoint until it is approved or withdrawn."""
        self.pending = artifact

    def approve(self, approver: str) -> None:
        assert self.pending is not None, "approve without a passed checkpoint"
        self.pending.approved_by = approver

    def withdraw(self) -> None:
        """Drop the passed checkpoint awaiting approval, kept as superseded."""
        if self.pending is not None:
            self.superseded.append(self.pending.model_copy(update={"superseded": True}))
            self.pending = None

    def discard(self) -> None:
        """Drop the passed checkpoint (rejected: the decision records why)."""
        self.pending = None

    def complete(self, now: datetime, attempts: int) -> None:
        """The current phase is done: its pending artifact becomes its record."""
        assert self.pending is not None, "complete without a passed checkpoint"
        done = self.current
        self.artifacts[done.index] = self.pending
        self.pending = None
        self.completed.append(
            CompletedPhase(
                phase=done.index,
                label=done.label,
                name=done.name,
                completed_at=now,
                attempts=attempts,
            )
        )
        self.past[done.index] = done

    def enter(self, phase: PhaseDefinition) -> None:
        self.current = phase

    def rollback(self, to_phase: int) -> None:
        """Reopen completed phase ``to_phase``; later artifacts are kept as superseded."""
        for index in sorted(k for k in self.artifacts if k >= to_phase):
            self.superseded.append(
                self.artifacts.pop(index).model_copy(update={"superseded": True})
            )
        self.withdraw()
        self.current = self.past[to_phase]
        for index in [k for k in self.past if k >= to_phase]:
            del self.past[index]
        self.completed = [c for c in self.completed if c.phase < to_phase]

    # ---- compaction (see ``bounds.carry``) ---------------------------------

    def compact_superseded(self) -> None:
        self.superseded = [elided(a) for a in self.superseded[-MAX_SUPERSEDED:]]

    def strip_old_phases(self, keep: int = 3) -> None:
        """Completed phases' texts (they are in earlier runs' histories); names and tasks stay."""
        for index in sorted(self.past)[: max(len(self.past) - keep, 0)]:
            phase = self.past[index]
            self.past[index] = phase.model_copy(
                update={
                    "content": _STRIPPED,
                    "tasks": [
                        t.model_copy(update={"content": "", "context": []}) for t in phase.tasks
                    ],
                    "context": [],
                    "example_evidence": None,
                }
            )

    def elide_artifact(self, index: int) -> None:
        self.artifacts[index] = elided(self.artifacts[index])


class AttemptLog(BaseModel):
    """Every checkpoint attempt: the current phase's in full (the newest with their
    evidence), earlier phases' compacted, and the current phase's attempt count."""

    current: list[Attempt] = Field(default_factory=list, description="Current phase.")
    earlier: list[Attempt] = Field(
        default_factory=list, description="Attempts of earlier phases (and undone ones), compacted."
    )
    count: int = Field(0, ge=0)

    def record(self, attempt: Attempt, *, with_evidence: int) -> None:
        """Add the current phase's next attempt (numbered by :meth:`next_number`), keeping
        only the newest ``with_evidence`` with their evidence and at most
        :data:`~bounds.MAX_CURRENT_ATTEMPTS` in full: a flood never grows the state."""
        self.count = attempt.number
        self.current.append(attempt)
        older = len(self.current) - with_evidence
        for i in range(max(older, 0)):
            self.current[i] = self.current[i].compacted()
        overflow = len(self.current) - MAX_CURRENT_ATTEMPTS
        if overflow > 0:
            self.earlier.extend(self.current[:overflow])
            del self.current[:overflow]
            del self.earlier[:-MAX_ATTEMPT_LOG]

    def next_number(self) -> int:
        return self.count + 1

    def close_phase(self) -> None:
        """The phase is done, reopened or undone: its attempts move (compacted) to the
        bounded log and numbering starts again from 1."""
        self.earlier.extend(a.compacted() for a in self.current)
        del self.earlier[:-MAX_ATTEMPT_LOG]
        self.current = []
        self.count = 0

    def compact(self) -> None:
        self.current = [a.compacted() for a in self.current]

    def trim(self, keep: int) -> None:
        del self.earlier[: max(len(self.earlier) - keep, 0)]


class ApprovalBook(BaseModel):
    """Who may decide, what was decided, the open deadline and the spent nonces."""

    approver_keys: list[ApproverKey] = Field(
        default_factory=list, description="Signed approvers; non-empty means signatures required."
    )
    unsigned_approvals: bool = Field(
        True, description="Name-only approvals accepted when no approver keys are named."
    )
    operator_keys: list[ApproverKey] = Field(
        default_factory=list, description="Signed operators of the deployment (controls)."
    )
    unsigned_controls: bool = Field(
        True, description="Name-only controls accepted when no approver or operator keys."
    )
    signs_evidence: bool = False  # approvals are version 2 (bind evidence and first run)
    records: list[ApprovalRecord] = Field(default_factory=list)
    due_at: datetime | None = None
    used_nonces: list[str] = Field(
        default_factory=list, description="Nonces of accepted decisions (replays are refused)."
    )

    def control_keys(self) -> list[ApproverKey]:
        """The keys that may sign controls (the deployment's operators and trusted approvers)."""
        return list(dict.fromkeys(self.operator_keys))

    def open(self, now: datetime, timeout_seconds: float | None) -> None:
        """A checkpoint passed and awaits a decision: start its deadline, if the gate has one."""
        self.due_at = now + timedelta(seconds=timeout_seconds) if timeout_seconds else None

    def close(self) -> None:
        self.due_at = None

    def record(self, decision: ApprovalDecision, now: datetime) -> None:
        """Record a checked decision and spend its nonce; the deadline no longer runs."""
        self.records.append(
            ApprovalRecord(
                phase=decision.phase,
                approver=decision.approver,
                decision=decision.decision,
                comment=decision.comment,
                at=now,
            )
        )
        self.due_at = None
        self.spend(decision.nonce)

    def spend(self, nonce: str | None) -> None:
        """A signed message was accepted: its nonce is never accepted again."""
        if nonce:
            self.used_nonces.append(nonce)

    def trim(self) -> None:
        del self.records[:-MAX_APPROVALS]
        del self.used_nonces[:-MAX_NONCES]


class Answers(BaseModel):
    """Answers to submissions with an id, for idempotent repeats (bounded, oldest first)."""

    by_submission: dict[str, CheckpointResult] = Field(default_factory=dict)

    def __contains__(self, submission_id: object) -> bool:
        return submission_id in self.by_submission

    def __getitem__(self, submission_id: str) -> CheckpointResult:
        return self.by_submission[submission_id]

    def remember(self, submission_id: str | None, result: CheckpointResult) -> None:
        """Keep a result; the next phase's view is not stored (a repeat builds it again)."""
        if not submission_id:
            return
        if result.next_phase is not None:
            result = result.model_copy(update={"next_phase": None})
        self.by_submission[submission_id] = result
        while len(self.by_submission) > MAX_REMEMBERED_SUBMISSIONS:
            del self.by_submission[next(iter(self.by_submission))]

    def forget_from(self, phase: int) -> None:
        """Answers about phases from ``phase`` on would now be wrong (a rollback undid them)."""
        self.by_submission = {
            k: r for k, r in self.by_submission.items() if r.current_phase < phase
        }

    def compact(self, keep: int = 100, problems: int = 3) -> None:
        kept = list(self.by_submission.items())[-keep:]
        self.by_submission = {k: compact_result(r, problems) for k, r in kept}

    def clear(self) -> None:
        self.by_submission = {}


_LEDGER = ("current", "past", "completed", "artifacts", "superseded", "pending")
_BOOK = {
    "approver_keys": "approver_keys",
    "unsigned_approvals": "unsigned_approvals",
    "operator_keys": "operator_keys",
    "unsigned_controls": "unsigned_controls",
    "signs_evidence": "signs_evidence",
    "approvals": "records",
    "approval_due_at": "due_at",
    "used_nonces": "used_nonces",
}
_ATTEMPTS = {"attempts": "current", "attempt_log": "earlier", "attempt_count": "count"}


def nest_flat_state(data: Any) -> Any:
    """Carried state from before the owners (one flat object; histories recorded then
    still hand it over) in the nested shape: the same fields, each under its owner."""
    if not isinstance(data, dict) or "current" not in data or "phases" in data:
        return data
    flat = dict(data)
    nested: dict[str, Any] = {
        "phases": {k: flat.pop(k) for k in _LEDGER if k in flat},
        "book": {new: flat.pop(old) for old, new in _BOOK.items() if old in flat},
        "attempts": {new: flat.pop(old) for old, new in _ATTEMPTS.items() if old in flat},
        "answers": {"by_submission": flat.pop("processed", {})},
    }
    return {**flat, **nested}
