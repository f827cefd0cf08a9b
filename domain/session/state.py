"""The gated session as a pure state machine.

``GatedSession`` (the Temporal workflow) owns one ``SessionState`` and calls
these methods; everything that decides (which phase is readable, whether
evidence passes, who may approve) lives here so it can be unit-tested without
a server and replays identically. Time comes in as an argument
(``workflow.now()``), never from a clock.

The workflow's part is mechanics: it runs the activities (verify, render, the
webhook) and the approval timer and hands their outcomes back here. Approval
rules live in ``session_approvals``, controls in ``session_controls``, the
read-side views in ``session_views``; ``SessionState`` is the one surface the
workflow calls.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from phasegate.domain import trust
from phasegate.domain.errors import (
    PayloadTooLarge,
    PhaseSequenceViolation,
    SessionError,
    SessionNotActive,
)
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import GateEvaluation, Problem
from phasegate.domain.session import approvals as session_approvals
from phasegate.domain.session import bounds as session_bounds
from phasegate.domain.session import controls as session_controls
from phasegate.domain.session import views as session_views
from phasegate.domain.session.approvals import DEADLINE_ACTOR, ApprovalExpiry
from phasegate.domain.session.messages import (
    ApprovalDecision,
    ApprovalRecord,
    Attempt,
    AuditEntry,
    CheckpointResult,
    CheckpointSubmission,
    CompletedPhase,
    ControlRequest,
    DefinitionRef,
    PhaseArtifact,
    PhaseContent,
    PhaseDefinition,
    PhaseView,
    SequenceViolation,
    SessionOptions,
    SessionStatus,
    SessionSummary,
    SessionView,
    TaskView,
)
from phasegate.domain.signing import ApproverKey
from phasegate.domain.verify import VerifyRequest, VerifyResult, budget_seconds

__all__ = [
    "DEADLINE_ACTOR",
    "MAX_REMEMBERED_SUBMISSIONS",
    "VERIFY_SLACK_SECONDS",
    "ApprovalExpiry",
    "SessionState",
    "evidence_size",
]

MAX_REMEMBERED_SUBMISSIONS = session_bounds.MAX_REMEMBERED_SUBMISSIONS
MAX_ATTEMPTS_WITH_EVIDENCE = 10  # current phase; older attempts keep digest and problems
VERIFY_SLACK_SECONDS = 60.0
# Temporal refuses the 2,001st update of a run; leave room for in-flight ones
# (signals count too: a conservative, simple bound).
UPDATES_BEFORE_CONTINUE = 1800  # verify activity: start-up, file and git checks, reporting


def evidence_size(evidence: dict[str, Any]) -> int:
    """Bytes of the evidence as compact JSON (what the cap is measured on)."""
    return len(json.dumps(evidence, separators=(",", ":"), default=str).encode())


class SessionState(BaseModel):
    """Everything a session knows; carried whole across continue-as-new."""

    workflow_type: str
    name: str = ""
    description: str = ""
    target: str = ""
    options: SessionOptions = Field(default_factory=SessionOptions)
    ref: DefinitionRef
    status: SessionStatus = "active"
    paused_from: SessionStatus | None = None
    current: PhaseDefinition
    past: dict[int, PhaseDefinition] = Field(default_factory=dict)
    completed: list[CompletedPhase] = Field(default_factory=list)
    artifacts: dict[int, PhaseArtifact] = Field(default_factory=dict)
    superseded: list[PhaseArtifact] = Field(default_factory=list)
    pending: PhaseArtifact | None = Field(None, description="Passed, awaiting approval.")
    approval_due_at: datetime | None = None
    attempts: list[Attempt] = Field(default_factory=list, description="Current phase.")
    attempt_log: list[Attempt] = Field(
        default_factory=list, description="Attempts of earlier phases (and undone ones), compacted."
    )
    attempt_count: int = Field(0, ge=0)
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    processed: dict[str, CheckpointResult] = Field(default_factory=dict)
    feedback: str = ""
    audit: list[AuditEntry] = Field(default_factory=list)
    last_signal_error: str | None = None
    started_at: datetime | None = None
    updated_at: datetime | None = None
    runs: int = Field(1, ge=1)
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
    run_chain: list[str] = Field(
        default_factory=list, description="Run ids of this session, first to current (bounded)."
    )
    signs_evidence: bool = False  # approvals are version 2 (bind evidence and first run)
    used_nonces: list[str] = Field(
        default_factory=list, description="Nonces of accepted decisions (replays are refused)."
    )

    # ---- reading -------------------------------------------------------

    @property
    def total_phases(self) -> int:
        return self.ref.total_phases

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "abandoned")

    @property
    def awaiting_approval(self) -> bool:
        return self.status in ("awaiting_approval", "approval_overdue")

    def allowed_approvers(self) -> list[str]:
        """Who may decide the current phase's approval: the gate's allowlist narrowed by
        the session's ``approvers`` ([] means any named person; see ``domain.trust``)."""
        gate = self.current.approvers or self.current.gate.approval.approvers
        return trust.allowed_approvers(gate, self.options.approvers)

    def nobody_may_approve(self) -> bool:
        """Whether the session's ``approvers`` leave none of the gate's names."""
        gate = self.current.approvers or self.current.gate.approval.approvers
        return trust.narrowed_to_nobody(gate, self.options.approvers)

    def requires_approval(self) -> bool:
        return self.current.requires_approval or self.current.gate.approval.required

    def readable(self, index: int) -> PhaseDefinition | None:
        """The phase if the agent may read it (current or completed), else None."""
        if index == self.current.index and not self.finished:
            return self.current
        if index in self.past:
            return self.past[index]
        if index == self.current.index:
            return self.current
        return None

    def violation(self, requested: int, what: str = "phase") -> SequenceViolation:
        """The refusal any read of a not-yet-reached phase gets (no future content)."""
        return session_views.violation(self, requested, what)

    def status_view(self) -> SessionView:
        return session_views.status_view(self)

    def phase_view(self, index: int, tasks_offset: int = 0) -> PhaseView | SequenceViolation:
        return session_views.phase_view(self, index, tasks_offset)

    def artifact(self, index: int) -> PhaseArtifact | SequenceViolation:
        return session_views.artifact(self, index)

    def task_view(self, index: int, task: str) -> TaskView | SequenceViolation:
        return session_views.task_view(self, index, task)

    def content(self) -> PhaseContent:
        return session_views.content(self)

    def summary(self) -> SessionSummary:
        return session_views.summary(self)

    # ---- checking ------------------------------------------------------

    def check_submission(self, sub: CheckpointSubmission) -> SessionError | None:
        """Why a submission must be refused before it touches history, or None."""
        if sub.submission_id and sub.submission_id in self.processed:
            return None  # a repeat: answered with the original result
        if self.status == "paused":
            return SessionNotActive(
                f"session is paused; checkpoints are refused until it is resumed "
                f"(phase {self.current.index})",
                hint="ask a person to resume it: phasegate control SESSION resume",
            )
        if self.finished:
            return SessionNotActive(
                f"session is {self.status}; it takes no more checkpoints",
                hint="start a new session",
            )
        if self.awaiting_approval:
            who = ", ".join(self.allowed_approvers()) or "an approver"
            return SessionNotActive(
                f"phase {self.current.index} passed its checkpoint and awaits approval by {who}",
                hint="wait for the decision; a rejection reopens the phase with feedback",
            )
        if sub.phase != self.current.index:
            done = sub.phase in self.past
            return PhaseSequenceViolation(
                f"phase {sub.phase} is {'already completed' if done else 'not reached yet'}; "
                f"the session is on phase {self.current.index} ({self.current.name})",
                where="phase",
                hint=f"submit evidence for phase {self.current.index}",
            )
        size = evidence_size(sub.evidence)
        if size > self.options.max_evidence_bytes:
            return PayloadTooLarge(
                f"evidence is {size} bytes; the limit is {self.options.max_evidence_bytes}",
                where="evidence",
                hint="submit paths or summaries instead of whole files",
            )
        return None

    def check_decision(
        self, decision: ApprovalDecision, session_id: str = ""
    ) -> SessionError | None:
        """Why an approval decision must be refused, or None (see ``session_approvals``)."""
        return session_approvals.check_decision(self, decision, session_id)

    # ---- changing ------------------------------------------------------

    def evaluate(self, sub: CheckpointSubmission) -> GateEvaluation:
        """The gate's verdict on the evidence alone (no workspace checks); changes nothing."""
        return evaluate_gate(self.current.gate, sub.evidence)

    def needs_verify(self, evaluation: GateEvaluation) -> bool:
        """Workspace checks run only for evidence that passes everything else."""
        return evaluation.passed and bool(self.current.gate.verify)

    def verify_request(self, sub: CheckpointSubmission, session_id: str) -> VerifyRequest:
        """The verify activity's input: the current gate's typed checks and the evidence."""
        return VerifyRequest(
            workspace=self.target,
            checks=self.current.gate.verify,
            evidence=sub.evidence,
            base_commit=self.ref.base_commit,
            session_id=session_id,
            target=self.target,
        )

    def verify_timeout(self) -> timedelta:
        """The verify activity's start-to-close budget: every command check's own
        ``timeout_seconds`` plus a fixed slack for the checks that only read."""
        return timedelta(seconds=budget_seconds(self.current.gate.verify) + VERIFY_SLACK_SECONDS)

    @staticmethod
    def verify_unavailable(cause: str) -> list[VerifyResult]:
        """The verdict when the checks could not run at all: one failed check (it blocks)."""
        return [
            VerifyResult(
                name="verify",
                kind="activity",
                passed=False,
                message=f"the workspace checks could not run: {cause}",
            )
        ]

    def record_checkpoint(
        self,
        sub: CheckpointSubmission,
        now: datetime,
        via: Literal["update", "signal"],
        evaluation: GateEvaluation | None = None,
        verify: list[VerifyResult] | None = None,
    ) -> tuple[CheckpointResult, bool]:
        """Record the attempt with its gate verdict and workspace checks.

        Returns (result, advance_now). A failed verify check blocks even under
        ``strict: false``. A passing checkpoint on a phase that needs approval
        parks the session in ``awaiting_approval``; otherwise (advance_now) the
        caller renders the next phase. Either way the caller then calls
        :meth:`finish_checkpoint` for the final answer.
        """
        evaluation = evaluation or self.evaluate(sub)
        verify = list(verify or [])
        failed = [
            Problem(
                field=f"verify:{r.name}",
                rule=f"verify:{r.kind}",
                message=r.message,
                expected="check passes",
                got=_tail(r.excerpt),
            )
            for r in verify
            if not r.passed
        ]
        if failed:
            evaluation = evaluation.model_copy(
                update={"passed": False, "problems": [*evaluation.problems, *failed]}
            )
        if via == "signal":
            self.last_signal_error = None
        self.attempt_count += 1
        sha, size = session_bounds.evidence_digest(sub.evidence)
        self.attempts.append(
            Attempt(
                phase=self.current.index,
                number=self.attempt_count,
                at=now,
                passed=evaluation.passed,
                problems=evaluation.problems,
                warnings=evaluation.warnings,
                submission_id=sub.submission_id,
                via=via,
                evidence=sub.evidence,
                evidence_sha256=sha,
                evidence_bytes=size,
                verify=verify,
            )
        )
        session_bounds.trim_attempts(self, MAX_ATTEMPTS_WITH_EVIDENCE)
        self.updated_at = now
        result = CheckpointResult(
            passed=evaluation.passed,
            problems=evaluation.problems,
            warnings=evaluation.warnings,
            current_phase=self.current.index,
            attempt=self.attempt_count,
            submission_id=sub.submission_id,
            verify=verify,
        )
        if not evaluation.passed:
            result.example_evidence = self.current.example_evidence
            return result, False
        self.feedback = ""
        self.pending = PhaseArtifact(
            phase=self.current.index,
            label=self.current.label,
            name=self.current.name,
            evidence=sub.evidence,
            outputs={
                "warnings": [w.model_dump() for w in evaluation.warnings],
                "gate_source": self.current.gate.source,
                "verify": [r.model_dump() for r in verify],
            },
            submitted_at=now,
            submission_id=sub.submission_id,
            attempt=self.attempt_count,
            evidence_sha256=sha,
            evidence_bytes=size,
            recorded_in_run=self.run_chain[-1] if self.run_chain else None,
        )
        if self.requires_approval():
            self.status = "awaiting_approval"
            timeout = self.current.gate.approval.timeout_seconds()
            self.approval_due_at = now + timedelta(seconds=timeout) if timeout else None
            result.awaiting_approval = True
            return result, False
        return result, True

    def finish_checkpoint(
        self,
        sub: CheckpointSubmission,
        result: CheckpointResult,
        next_phase: PhaseDefinition | None,
        now: datetime,
    ) -> CheckpointResult:
        """The final answer to a checkpoint :meth:`record_checkpoint` recorded.

        When it advances (passed, no approval needed) the phase is completed and
        ``next_phase`` entered (None only after the last phase); the answer then
        names the new current phase, the next phase's content, and whether the
        session is complete. The answer is remembered for repeats of its
        submission id.
        """
        if result.passed and not result.awaiting_approval:
            self.advance(next_phase, now)
            completed = self.status == "completed"
            result = result.model_copy(
                update={
                    "completed": completed,
                    "current_phase": self.current.index,
                    "next_phase": None if completed else self.next_view(),
                }
            )
        self.remember(sub.submission_id, result)
        return result

    def is_last_phase(self) -> bool:
        return self.current.index + 1 >= self.total_phases

    def advance(self, next_phase: PhaseDefinition | None, now: datetime) -> None:
        """Complete the current phase (its pending artifact) and enter ``next_phase``.

        ``next_phase`` is None only when the current phase is the last one.
        """
        assert self.pending is not None, "advance without a passed checkpoint"
        done = self.current
        self.artifacts[done.index] = self.pending
        self.pending = None
        self.completed.append(
            CompletedPhase(
                phase=done.index,
                label=done.label,
                name=done.name,
                completed_at=now,
                attempts=self.attempt_count,
            )
        )
        self.past[done.index] = done
        self.log_attempts()
        self.attempt_count = 0
        self.updated_at = now
        if next_phase is None:
            self.status = "completed"
            return
        self.current = next_phase
        self.status = "active"

    def record_decision(self, decision: ApprovalDecision, now: datetime) -> bool:
        """Record a checked decision. Returns True if the phase should now advance."""
        return session_approvals.record_decision(self, decision, now)

    def decide(
        self, decision: ApprovalDecision, next_phase: PhaseDefinition | None, now: datetime
    ) -> bool:
        """Record a checked decision; an approval completes the phase and enters
        ``next_phase`` (rendered beforehand; None after the last phase). Returns
        whether the session advanced."""
        if not self.record_decision(decision, now):
            return False
        self.advance(next_phase, now)
        return True

    # ---- approval deadlines ----------------------------------------------

    def approval_deadline(self) -> tuple[int, datetime] | None:
        """(phase, due_at) of the deadline a timer should now run for, or None.

        Only while awaiting approval: a paused session's deadline waits for resume.
        """
        if self.status != "awaiting_approval" or self.approval_due_at is None:
            return None
        return self.current.index, self.approval_due_at

    def approval_pending(self, phase: int, due_at: datetime) -> bool:
        """Whether the approval with deadline ``due_at`` on ``phase`` is still undecided."""
        return (
            self.awaiting_approval
            and self.current.index == phase
            and self.approval_due_at == due_at
        )

    def expire_approval(
        self, phase: int, due_at: datetime, now: datetime, session_id: str = ""
    ) -> ApprovalExpiry | None:
        """The deadline ``due_at`` of ``phase`` passed: reject or escalate as the gate says.

        Returns what was done (and, for an escalation with a webhook, the call to
        make), or None when that deadline no longer applies.
        """
        return session_approvals.expire_approval(self, phase, due_at, now, session_id)

    def record_notification(
        self, phase: int, url: str, now: datetime, error: str | None = None
    ) -> None:
        """Audit the escalation webhook: delivered (``error`` None) or why not."""
        session_approvals.record_notification(self, phase, url, now, error)

    # ---- controls --------------------------------------------------------

    def check_control(self, req: ControlRequest, session_id: str = "") -> SessionError | None:
        """Why a control request must be refused (unauthorised, or not applicable), or None."""
        return session_controls.check_control(self, req, session_id)

    def apply_control(self, req: ControlRequest, now: datetime) -> None:
        """Carry out a checked control request and audit it (see ``session_controls``)."""
        session_controls.apply_control(self, req, now)

    # ---- bookkeeping -----------------------------------------------------

    def log_attempts(self) -> None:
        """Move the current phase's attempts, compacted, to the (bounded) attempt log."""
        session_bounds.log_attempts(self)

    def next_view(self) -> PhaseView | None:
        """The current phase as an advance's answer carries it: whole, gate schema included,
        without earlier phases' artifacts (the agent just sent them)."""
        view = self.phase_view(self.current.index)
        return view.model_copy(update={"artifacts": {}}) if isinstance(view, PhaseView) else None

    def repeat(self, submission_id: str) -> CheckpointResult:
        """The answer to a repeated submission: the original; after an advance, with the
        view of the phase it advanced to, only while that phase is still readable (never a
        future one: a rollback may have undone it)."""
        result = self.processed[submission_id]
        if not result.passed or result.awaiting_approval or result.completed:
            return result
        # The view only while that phase is still the one to work on: an agent following
        # next_phase must never be sent to a completed (or undone) phase.
        current = result.current_phase == self.current.index and not self.finished
        return result.model_copy(update={"next_phase": self.next_view() if current else None})

    @classmethod
    def from_carry(cls, carried: object, run_id: str) -> SessionState:
        """The state a continue-as-new handed to run ``run_id`` (only ever called once the
        server has vouched for where it came from: ``workflows._kit.CarryGate``)."""
        state = cls.model_validate(carried)
        state.runs += 1
        state.note_run(run_id)
        return state

    def continue_as_new_due(self, *, suggested: bool, events: int, messages: int) -> bool:
        """Whether this run should hand over to a new one: Temporal suggests it, the
        session's ``continue_as_new_after_events`` is reached once this run handled a
        message (a low limit never makes runs continue back to back on their own), or
        the run nears Temporal's 2,000 updates."""
        limit = self.options.continue_as_new_after_events
        return (
            suggested
            or (limit is not None and messages > 0 and events >= limit)
            or messages >= UPDATES_BEFORE_CONTINUE
        )

    def carry(self) -> dict[str, Any]:
        """The state as continue-as-new input, compacted until it fits the payload limit."""
        return session_bounds.carry(self)

    def remember(self, submission_id: str | None, result: CheckpointResult) -> None:
        """Keep a result for idempotent repeats (bounded; see ``session_bounds``)."""
        session_bounds.remember(self, submission_id, result)

    def note_run(self, run_id: str) -> None:
        """Record the run now holding the session (its run chain shows in ``status``)."""
        session_bounds.note_run(self, run_id)


def _tail(text: str, limit: int = 160) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]
