"""The gated session as a pure state machine.

``GatedSession`` (the Temporal workflow) owns one ``SessionState`` and calls
these methods; everything that decides (which phase is readable, whether
evidence passes, who may approve) lives here so it can be unit-tested without
a server and replays identically. Time comes in as an argument
(``workflow.now()``), never from a clock.

The workflow's part is mechanics: it runs the activities (verify, render, the
webhook) and the approval timer and hands their outcomes back here. Each message
has a ``check_<message>`` (what the update's validator calls; changes nothing)
and an ``apply_<message>``: submission, decision, control, and the approval
deadline and its notification.

The state is built from owners that each keep their own fields and are the only
code changing them (``ledger``): the :class:`PhaseLedger`, the :class:`AttemptLog`,
the :class:`ApprovalBook` and the remembered :class:`Answers`. Rules that span
several live here. Who may approve and control is decided in ``approvals`` and
``controls`` and the read-side views in ``views``, all reading only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from phasegate.domain import trust
from phasegate.domain.errors import (
    SessionError,
)
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import GateEvaluation
from phasegate.domain.limits import MAX_AHEAD_BYTES
from phasegate.domain.session import approvals as session_approvals
from phasegate.domain.session import bounds as session_bounds
from phasegate.domain.session import checking, tasking
from phasegate.domain.session import controls as session_controls
from phasegate.domain.session import views as session_views
from phasegate.domain.session.approvals import DEADLINE_ACTOR, ApprovalExpiry
from phasegate.domain.session.checking import evidence_size
from phasegate.domain.session.ledger import (
    Answers,
    ApprovalBook,
    AttemptLog,
    PhaseLedger,
    nest_flat_state,
)
from phasegate.domain.session.messages import (
    ApprovalDecision,
    Attempt,
    AuditEntry,
    CheckpointResult,
    CheckpointSubmission,
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
from phasegate.domain.tasks.board import TaskBoard
from phasegate.domain.tasks.naming import upgrade
from phasegate.domain.verify import VerifyRequest, VerifyResult, budget_seconds, reads_only

__all__ = [
    "DEADLINE_ACTOR",
    "MAX_REMEMBERED_SUBMISSIONS",
    "VERIFY_SLACK_SECONDS",
    "Answers",
    "ApprovalBook",
    "ApprovalExpiry",
    "AttemptLog",
    "PhaseLedger",
    "SessionState",
    "evidence_size",
]

MAX_REMEMBERED_SUBMISSIONS = session_bounds.MAX_REMEMBERED_SUBMISSIONS
MAX_ATTEMPTS_WITH_EVIDENCE = 10  # current phase; older attempts keep digest and problems
VERIFY_SLACK_SECONDS = 60.0
# Temporal refuses the 2,001st update of a run; leave room for in-flight ones
# (signals count too: a conservative, simple bound).
UPDATES_BEFORE_CONTINUE = 1800  # verify activity: start-up, file and git checks, reporting


class SessionState(BaseModel):
    """Everything a session knows; carried whole across continue-as-new."""

    workflow_type: str
    name: str = ""
    description: str = ""
    target: str = ""
    options: SessionOptions = Field(default_factory=SessionOptions)
    sealed_prefetch: bool = False  # the deployment's seal key ring seals the prefetch
    engine: int = 0  # SessionPlan.engine: which paths run without asking workflow.patched
    ahead_bytes: int = Field(0, ge=0, le=MAX_AHEAD_BYTES)  # SessionPlan.ahead_bytes
    ref: DefinitionRef
    status: SessionStatus = "active"
    paused_from: SessionStatus | None = None
    phases: PhaseLedger
    attempts: AttemptLog = Field(default_factory=AttemptLog)
    book: ApprovalBook = Field(default_factory=ApprovalBook)
    answers: Answers = Field(default_factory=Answers)
    tasks: TaskBoard = Field(default_factory=TaskBoard)
    feedback: str = ""
    audit: list[AuditEntry] = Field(default_factory=list)
    last_signal_error: str | None = None
    started_at: datetime | None = None
    updated_at: datetime | None = None
    runs: int = Field(1, ge=1)
    run_chain: list[str] = Field(
        default_factory=list, description="Run ids of this session, first to current (bounded)."
    )

    _nest_flat_state = model_validator(mode="before")(nest_flat_state)

    # ---- reading -------------------------------------------------------

    @property
    def current(self) -> PhaseDefinition:
        """The phase being worked on (the ledger's)."""
        return self.phases.current

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
        return self.phases.readable(index, finished=self.finished)

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
        return checking.submission_refusal(self, sub)

    def check_task(self, msg: tasking.TaskMessage) -> SessionError | None:
        """Why a task message must be refused, or None (``tasking``, the board)."""
        return tasking.check_task(self, msg)

    def enter_current_tasks(self, now: datetime | None) -> None:
        """Put the current phase's tasks on the board (once); the starter's complexity
        raises the board's, never lowers it."""
        tasking.enter_tasks(self, self.current, now)
        if self.options.complexity is not None:
            self.tasks.complexity = upgrade(self.tasks.complexity, self.options.complexity)

    def check_decision(
        self, decision: ApprovalDecision, session_id: str = ""
    ) -> SessionError | None:
        """Why an approval decision must be refused, or None (see ``approvals``)."""
        return session_approvals.check_decision(self, decision, session_id)

    # ---- changing ------------------------------------------------------

    def evaluate(self, sub: CheckpointSubmission) -> GateEvaluation:
        """The gate's verdict on the evidence alone (no workspace checks) and, where the
        gate asks, on the phase's tasks; changes nothing."""
        evaluation = evaluate_gate(self.current.gate, sub.evidence)
        if self.current.gate.tasks_complete:
            problems = self.tasks.gate_problems(self.current.index)
            if problems:
                update = {"passed": False, "problems": [*evaluation.problems, *problems]}
                evaluation = evaluation.model_copy(update=update)
        return evaluation

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

    def verify_reads_only(self) -> bool:
        """The current gate's checks only read the workspace (no command): they may run on
        the session's own worker where it sees the workspace (``domain.verify.reads_only``)."""
        return reads_only(self.current.gate.verify)

    def renders_with_checks(self) -> bool:
        """A passing checkpoint of the current phase advances at once (no approval, not the
        last phase) and its checks only read: the next phase may be rendered by the
        checks' own local activity, once they pass (the workflow does so in sessions
        without prefetch), instead of rendered apart."""
        advances_at_once = not self.requires_approval() and not self.is_last_phase()
        return advances_at_once and self.verify_reads_only()

    def verify_timeout(self) -> timedelta:
        """The verify activity's start-to-close budget: every command check's own
        ``timeout_seconds`` plus a fixed slack for the checks that only read."""
        return timedelta(seconds=budget_seconds(self.current.gate.verify) + VERIFY_SLACK_SECONDS)

    @staticmethod
    def verify_unavailable(cause: str) -> list[VerifyResult]:
        """The verdict when the checks could not run at all: one failed check (it blocks)."""
        return checking.verify_unavailable(cause)

    def apply_submission(
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
        :meth:`finish_submission` for the final answer.
        """
        evaluation = checking.with_verify(evaluation or self.evaluate(sub), verify or [])
        verify = list(verify or [])
        if via == "signal":
            self.last_signal_error = None
        sha, size = session_bounds.evidence_digest(sub.evidence)
        number = self.attempts.next_number()
        self.attempts.record(
            Attempt(
                phase=self.current.index,
                number=number,
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
            ),
            with_evidence=MAX_ATTEMPTS_WITH_EVIDENCE,
        )
        self.updated_at = now
        result = CheckpointResult(
            passed=evaluation.passed,
            problems=evaluation.problems,
            warnings=evaluation.warnings,
            current_phase=self.current.index,
            attempt=number,
            submission_id=sub.submission_id,
            verify=verify,
        )
        if not evaluation.passed:
            result.example_evidence = self.current.example_evidence
            return result, False
        self.feedback = ""
        self.phases.park(
            PhaseArtifact(
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
                attempt=number,
                evidence_sha256=sha,
                evidence_bytes=size,
                recorded_in_run=self.run_chain[-1] if self.run_chain else None,
            )
        )
        if self.requires_approval():
            self.status = "awaiting_approval"
            self.book.open(now, self.current.gate.approval.timeout_seconds())
            result.awaiting_approval = True
            return result, False
        return result, True

    def finish_submission(
        self,
        sub: CheckpointSubmission,
        result: CheckpointResult,
        next_phase: PhaseDefinition | None,
        now: datetime,
    ) -> CheckpointResult:
        """The final answer to a checkpoint :meth:`apply_submission` recorded.

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
        self.answers.remember(sub.submission_id, result)
        return result

    def is_last_phase(self) -> bool:
        return self.current.index + 1 >= self.total_phases

    def advance(self, next_phase: PhaseDefinition | None, now: datetime) -> None:
        """Complete the current phase (its pending artifact) and enter ``next_phase``.

        ``next_phase`` is None only when the current phase is the last one.
        """
        if not self.current.gate.tasks_complete:
            self.tasks.close_phase(self.current.index, self.current.label, now)
        self.phases.complete(now, attempts=self.attempts.count)
        self.attempts.close_phase()
        self.updated_at = now
        if next_phase is None:
            self.status = "completed"
            return
        self.phases.enter(next_phase)
        tasking.enter_tasks(self, next_phase, now)
        self.status = "active"

    def apply_decision(
        self, decision: ApprovalDecision, next_phase: PhaseDefinition | None, now: datetime
    ) -> bool:
        """Record a checked decision; an approval completes the phase and enters
        ``next_phase`` (rendered beforehand; None after the last phase), a rejection
        drops the pending artifact and reopens the phase with the comment as feedback.
        Returns whether the session advanced."""
        self.book.record(decision, now)
        self.updated_at = now
        self.audit.append(
            AuditEntry(
                at=now,
                action=decision.decision,
                actor=decision.approver,
                phase=decision.phase,
                detail=decision.comment,
            )
        )
        if decision.decision != "approve":
            self.phases.discard()
            self.status = "active"
            self.feedback = decision.comment or f"rejected by {decision.approver}"
            return False
        self.phases.approve(decision.approver)
        self.advance(next_phase, now)
        return True

    # ---- approval deadlines ----------------------------------------------

    def approval_deadline(self) -> tuple[int, datetime] | None:
        """(phase, due_at) of the deadline a timer should now run for, or None.

        Only while awaiting approval: a paused session's deadline waits for resume.
        """
        if self.status != "awaiting_approval" or self.book.due_at is None:
            return None
        return self.current.index, self.book.due_at

    def approval_pending(self, phase: int, due_at: datetime) -> bool:
        """Whether the approval with deadline ``due_at`` on ``phase`` is still undecided."""
        return self.awaiting_approval and self.current.index == phase and self.book.due_at == due_at

    def apply_deadline(
        self, phase: int, due_at: datetime, now: datetime, session_id: str = ""
    ) -> ApprovalExpiry | None:
        """The deadline ``due_at`` of ``phase`` passed: reject (the phase reopens) or
        escalate (``approval_overdue``, audited) as the gate says.

        Returns what was done (and, for an escalation with a webhook, the call to
        make), or None when that deadline no longer applies.
        """
        expiry = session_approvals.expiry(self, phase, due_at, session_id)
        if expiry is None:
            return None
        if expiry.action == "reject":
            comment = f"no decision within {expiry.waited}; the phase is reopened"
            rejection = ApprovalDecision(
                phase=phase, approver=DEADLINE_ACTOR, decision="reject", comment=comment
            )
            self.apply_decision(rejection, None, now)
            return expiry
        self.status = "approval_overdue"
        self.updated_at = now
        self.audit.append(
            AuditEntry(
                at=now,
                action="escalate",
                actor=DEADLINE_ACTOR,
                phase=phase,
                detail=f"no decision within {expiry.waited}",
            )
        )
        return expiry

    def apply_notification(
        self, phase: int, url: str, now: datetime, error: str | None = None
    ) -> None:
        """Audit the webhook call an escalation asked for: delivered (``error`` None) or why not."""
        detail = f"notified {url}" if error is None else f"notify {url} failed: {error}"
        self.audit.append(
            AuditEntry(at=now, action="notify", actor=DEADLINE_ACTOR, phase=phase, detail=detail)
        )

    # ---- controls --------------------------------------------------------

    def check_control(self, req: ControlRequest, session_id: str = "") -> SessionError | None:
        """Why a control request must be refused (unauthorised, or not applicable), or None."""
        return session_controls.check_control(self, req, session_id)

    def apply_control(self, req: ControlRequest, now: datetime) -> None:
        """Carry out a checked control request and audit it (a signed one's nonce is spent)."""
        phase = self.current.index
        if req.action == "pause":
            self.paused_from, self.status = self.status, "paused"
        elif req.action == "resume":
            self.status, self.paused_from = self.paused_from or "active", None
        elif req.action == "abandon":
            self.status = "abandoned"
        elif req.action == "retry_phase":
            self._retry_phase()
            self.tasks.release_person_blocks(phase, now)
        elif req.action == "rollback":
            assert req.to_phase is not None
            self._rollback(req.to_phase)
        self.book.spend(req.nonce)
        self.audit.append(
            AuditEntry(at=now, action=req.action, actor=req.actor, phase=phase, detail=req.reason)
        )
        self.updated_at = now

    def _retry_phase(self) -> None:
        """Reopen the current phase for new evidence: attempts start again from 1, and a
        passed checkpoint awaiting approval is withdrawn (kept as superseded), so the
        session takes a new checkpoint instead of waiting for a decision."""
        self.attempts.close_phase()
        self.feedback = ""
        if self.phases.pending is not None:
            self.phases.withdraw()
            self.book.close()
        if self.awaiting_approval:
            self.status = "active"
        elif self.status == "paused" and self.paused_from in (
            "awaiting_approval",
            "approval_overdue",
        ):
            self.paused_from = "active"

    def _rollback(self, to_phase: int) -> None:
        """Reopen completed phase ``to_phase``; later artifacts are kept as superseded and
        remembered answers about the undone phases are forgotten (they would now be wrong)."""
        self.phases.rollback(to_phase)
        self.attempts.close_phase()
        self.answers.forget_from(to_phase)
        self.book.close()
        self.paused_from = None
        self.status = "active"

    # ---- bookkeeping -----------------------------------------------------

    def next_view(self) -> PhaseView | None:
        """The current phase as an advance's answer carries it: whole, gate schema included,
        without earlier phases' artifacts (the agent just sent them)."""
        view = self.phase_view(self.current.index)
        return view.model_copy(update={"artifacts": {}}) if isinstance(view, PhaseView) else None

    def repeat(self, submission_id: str) -> CheckpointResult:
        """The answer to a repeated submission: the original; after an advance, with the
        view of the phase it advanced to, only while that phase is still readable (never a
        future one: a rollback may have undone it)."""
        result = self.answers[submission_id]
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
        state.enter_current_tasks(None)  # carried from before task state
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

    def note_run(self, run_id: str) -> None:
        """Record the run now holding the session (its run chain shows in ``status``):
        the first runs and the latest are kept."""
        if run_id in self.run_chain:
            return
        self.run_chain.append(run_id)
        if len(self.run_chain) > session_bounds.MAX_RUN_CHAIN:
            del self.run_chain[1 : len(self.run_chain) - session_bounds.MAX_RUN_CHAIN + 1]
