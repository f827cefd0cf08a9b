"""The gated session as a pure state machine.

``GatedSession`` (the Temporal workflow) owns one ``SessionState`` and calls
these methods; everything that decides (which phase is readable, whether
evidence passes, who may approve) lives here so it can be unit-tested without
a server and replays identically. Time comes in as an argument
(``workflow.now()``), never from a clock.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from phasegate.domain.errors import (
    ApprovalRefused,
    PayloadTooLarge,
    PhaseSequenceViolation,
    SessionError,
    SessionNotActive,
)
from phasegate.domain.gates import GateEvaluation, Problem, evaluate_gate
from phasegate.domain.messages import (
    ApprovalDecision,
    ApprovalRecord,
    Attempt,
    AuditEntry,
    CheckpointResult,
    CheckpointSubmission,
    CompletedPhase,
    ControlRequest,
    DefinitionRef,
    GateField,
    GateView,
    PhaseArtifact,
    PhaseContent,
    PhaseDefinition,
    PhaseView,
    SequenceViolation,
    SessionOptions,
    SessionStatus,
    SessionSummary,
    SessionView,
    TaskSummary,
    TaskView,
)
from phasegate.domain.signing import ApproverKey, check_signed_decision
from phasegate.domain.verify import VerifyResult

__all__ = ["MAX_REMEMBERED_SUBMISSIONS", "SessionState", "evidence_size"]

MAX_REMEMBERED_SUBMISSIONS = 500
MAX_ATTEMPTS_WITH_EVIDENCE = 10  # current phase; older attempts keep digest and problems
MAX_ATTEMPT_LOG = 500  # attempts of earlier phases, compacted
CARRY_LIMIT_BYTES = 1_500_000  # continue-as-new input must stay under Temporal's 2 MB


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
    attempt_count: int = 0
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    processed: dict[str, CheckpointResult] = Field(default_factory=dict)
    feedback: str = ""
    audit: list[AuditEntry] = Field(default_factory=list)
    last_signal_error: str | None = None
    started_at: datetime | None = None
    updated_at: datetime | None = None
    runs: int = 1
    approver_keys: list[ApproverKey] = Field(
        default_factory=list, description="Signed approvers; non-empty means signatures required."
    )
    unsigned_approvals: bool = Field(
        True, description="Name-only approvals accepted when no approver keys are named."
    )
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
        """Who may decide the current phase's approval ([] means any named person)."""
        if self.options.approvers is not None:
            return list(self.options.approvers)
        return list(self.current.approvers or self.current.gate.approval.approvers)

    def requires_approval(self) -> bool:
        return self.current.requires_approval or self.current.gate.approval.required

    def violation(self, requested: int, what: str = "phase") -> SequenceViolation:
        """The refusal any read of a not-yet-reached phase gets (no future content)."""
        return SequenceViolation(
            message=(
                f"{what} {requested} is not available: the session is on phase "
                f"{self.current.index} of {self.total_phases}. Complete the current phase "
                "(submit_checkpoint) to unlock the next one."
            ),
            requested_phase=requested,
            current_phase=self.current.index,
            total_phases=self.total_phases,
            completed_phases=[c.phase for c in self.completed],
            current_content=self.current.content,
        )

    def readable(self, index: int) -> PhaseDefinition | None:
        """The phase if the agent may read it (current or completed), else None."""
        if index == self.current.index and not self.finished:
            return self.current
        if index in self.past:
            return self.past[index]
        if index == self.current.index:
            return self.current
        return None

    def status_view(self) -> SessionView:
        last = self.attempts[-1] if self.attempts else None
        return SessionView(
            workflow_type=self.workflow_type,
            name=self.name,
            target=self.target,
            status=self.status,
            current_phase=self.current.index,
            current_phase_name=self.current.name,
            total_phases=self.total_phases,
            completed_phases=list(self.completed),
            attempts=self.attempt_count,
            last_problems=list(last.problems) if last and not last.passed else [],
            approvals=list(self.approvals),
            awaiting_approval_from=(
                self.allowed_approvers() or ["any approver"] if self.awaiting_approval else []
            ),
            approval_due_at=self.approval_due_at if self.awaiting_approval else None,
            audit=list(self.audit),
            superseded=list(self.superseded),
            attempt_log=self.attempt_log[-50:],
            feedback=self.feedback,
            artifacts={str(k): sorted(a.evidence) for k, a in sorted(self.artifacts.items())},
            last_signal_error=self.last_signal_error,
            started_at=self.started_at,
            updated_at=self.updated_at,
        )

    def phase_view(self, index: int) -> PhaseView | SequenceViolation:
        phase = self.readable(index)
        if phase is None:
            return self.violation(index)
        state: Literal["current", "completed"] = "completed" if index in self.past else "current"
        # Artifacts of earlier phases (and, for a completed phase, its own).
        earlier = {
            str(k): a
            for k, a in sorted(self.artifacts.items())
            if k < index or (state == "completed" and k == index)
        }
        return PhaseView(
            phase=phase.index,
            label=phase.label,
            name=phase.name,
            state=state,
            content=phase.content,
            tasks=_task_summaries(phase),
            gate=_gate_view(phase, self.allowed_approvers() if state == "current" else []),
            artifacts=earlier,
            context=phase.context,
        )

    def task_view(self, index: int, task: str) -> TaskView | SequenceViolation:
        phase = self.readable(index)
        if phase is None:
            return self.violation(index, "task of phase")
        for t in phase.tasks:
            if task in (t.id, str(t.number)):
                summary = TaskSummary(
                    id=t.id, number=t.number, name=t.name, status=t.status, optional=t.optional
                )
                return TaskView(phase=index, task=summary, content=t.content, context=t.context)
        known = ", ".join(f"{t.number} ({t.id})" for t in phase.tasks) or "none"
        raise SessionError(
            f"phase {index} has no task {task!r}",
            hint=f"tasks of this phase: {known}",
        )

    def content(self) -> PhaseContent:
        p = self.current
        return PhaseContent(
            phase=p.index, label=p.label, name=p.name, content=p.content, tasks=_task_summaries(p)
        )

    def summary(self) -> SessionSummary:
        return SessionSummary(
            workflow_type=self.workflow_type,
            status=self.status,
            completed_phases=[c.phase for c in self.completed],
            total_phases=self.total_phases,
            artifacts={str(k): a for k, a in sorted(self.artifacts.items())},
        )

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
        if not self.awaiting_approval:
            return ApprovalRefused(
                f"nothing awaits approval: session is {self.status} on phase {self.current.index}",
                hint="approvals are decided after the phase's checkpoint passes",
            )
        if decision.phase != self.current.index:
            return ApprovalRefused(
                f"phase {decision.phase} is not awaiting approval; phase {self.current.index} is",
                where="phase",
            )
        allowed = self.allowed_approvers()
        if not decision.approver.strip():
            return ApprovalRefused("an approval must name its approver", where="approver")
        if allowed and decision.approver not in allowed:
            return ApprovalRefused(
                f"{decision.approver!r} may not approve phase {self.current.index}",
                where="approver",
                hint=f"allowed approvers: {', '.join(allowed)}",
            )
        if not self.approver_keys and not self.unsigned_approvals:
            return ApprovalRefused(
                "this deployment accepts only signed approvals and this session names no "
                "approver keys, so no decision can be accepted",
                where="approver_keys",
                hint="name signed approvers (PHASEGATE_APPROVER_KEYS on the worker, approver_keys "
                "in metadata.json, or `phasegate start --approver-key NAME`), or set "
                "PHASEGATE_ALLOW_UNSIGNED_APPROVALS=1 where agents cannot reach Temporal",
            )
        if self.approver_keys:
            reason = check_signed_decision(
                keys=self.approver_keys,
                session_id=session_id,
                phase=decision.phase,
                decision=decision.decision,
                approver=decision.approver,
                comment=decision.comment,
                nonce=decision.nonce,
                signature=decision.signature,
                used_nonces=frozenset(self.used_nonces),
            )
            if reason is not None:
                return ApprovalRefused(reason, where="signature")
        return None

    # ---- changing ------------------------------------------------------

    def evaluate(self, sub: CheckpointSubmission) -> GateEvaluation:
        """The gate's verdict on the evidence alone (no workspace checks); changes nothing."""
        return evaluate_gate(self.current.gate, sub.evidence)

    def needs_verify(self, evaluation: GateEvaluation) -> bool:
        """Workspace checks run only for evidence that passes everything else."""
        return evaluation.passed and bool(self.current.gate.verify)

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
        parks the session in ``awaiting_approval``; otherwise the caller renders
        the next phase and calls :meth:`advance`.
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
        self.attempt_count += 1
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
                evidence_sha256=hashlib.sha256(_canonical(sub.evidence)).hexdigest(),
                evidence_bytes=evidence_size(sub.evidence),
                verify=verify,
            )
        )
        older = len(self.attempts) - MAX_ATTEMPTS_WITH_EVIDENCE
        for i in range(max(older, 0)):
            self.attempts[i] = self.attempts[i].compacted()
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
        )
        if self.requires_approval():
            self.status = "awaiting_approval"
            timeout = self.current.gate.approval.timeout_seconds()
            self.approval_due_at = now + timedelta(seconds=timeout) if timeout else None
            result.awaiting_approval = True
            return result, False
        return result, True

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
        self._log_attempts()
        self.attempt_count = 0
        self.updated_at = now
        if next_phase is None:
            self.status = "completed"
            return
        self.current = next_phase
        self.status = "active"

    def record_decision(self, decision: ApprovalDecision, now: datetime) -> bool:
        """Record an approval decision. Returns True if the phase should now advance."""
        self.approvals.append(
            ApprovalRecord(
                phase=decision.phase,
                approver=decision.approver,
                decision=decision.decision,
                comment=decision.comment,
                at=now,
            )
        )
        self.updated_at = now
        self.approval_due_at = None
        if decision.nonce:
            self.used_nonces.append(decision.nonce)
        self.audit.append(
            AuditEntry(
                at=now,
                action=decision.decision,
                actor=decision.approver,
                phase=decision.phase,
                detail=decision.comment,
            )
        )
        if decision.decision == "approve":
            assert self.pending is not None
            self.pending.approved_by = decision.approver
            return True
        self.pending = None
        self.status = "active"
        self.feedback = decision.comment or f"rejected by {decision.approver}"
        return False

    # ---- controls --------------------------------------------------------

    def check_control(self, req: ControlRequest) -> SessionError | None:
        """Why a control request must be refused, or None. Nothing here moves forward."""
        if self.finished:
            return SessionNotActive(f"session is {self.status}; controls no longer apply")
        if req.action == "pause" and self.status == "paused":
            return SessionNotActive("session is already paused")
        if req.action == "resume" and self.status != "paused":
            return SessionNotActive("session is not paused", hint="only a paused session resumes")
        if req.action == "abandon" and not req.reason.strip():
            return SessionError("abandon needs a reason", where="reason")
        if req.action == "rollback":
            done = sorted(self.past)
            if req.to_phase is None or req.to_phase not in self.past:
                return PhaseSequenceViolation(
                    f"rollback goes back to a completed phase; {req.to_phase} is not one",
                    where="to_phase",
                    hint=f"completed phases: {', '.join(map(str, done)) or 'none'}",
                )
        return None

    def apply_control(self, req: ControlRequest, now: datetime) -> None:
        """Carry out a checked control request and audit it."""
        phase = self.current.index
        if req.action == "pause":
            self.paused_from, self.status = self.status, "paused"
        elif req.action == "resume":
            self.status, self.paused_from = self.paused_from or "active", None
        elif req.action == "abandon":
            self.status = "abandoned"
        elif req.action == "retry_phase":
            self._log_attempts()
            self.attempt_count = 0
            self.feedback = ""
        elif req.action == "rollback":
            assert req.to_phase is not None
            self._rollback(req.to_phase)
        self.audit.append(
            AuditEntry(at=now, action=req.action, actor=req.actor, phase=phase, detail=req.reason)
        )
        self.updated_at = now

    def _rollback(self, to_phase: int) -> None:
        """Reopen completed phase ``to_phase``; later artifacts are kept as superseded."""
        undone = [k for k in self.artifacts if k >= to_phase]
        for k in sorted(undone):
            self.superseded.append(self.artifacts.pop(k).model_copy(update={"superseded": True}))
        if self.pending is not None:
            self.superseded.append(self.pending.model_copy(update={"superseded": True}))
            self.pending = None
        self.current = self.past[to_phase]
        for k in [k for k in self.past if k >= to_phase]:
            del self.past[k]
        self.completed = [c for c in self.completed if c.phase < to_phase]
        self._log_attempts()
        self.attempt_count = 0
        # Remembered answers about undone phases would now be wrong: forget them.
        self.processed = {k: r for k, r in self.processed.items() if r.current_phase < to_phase}
        self.approval_due_at = None
        self.paused_from = None
        self.status = "active"

    def _log_attempts(self) -> None:
        self.attempt_log.extend(a.compacted() for a in self.attempts)
        del self.attempt_log[:-MAX_ATTEMPT_LOG]
        self.attempts = []

    def repeat(self, submission_id: str) -> CheckpointResult:
        """The answer to a repeated submission: the original, with the next phase's content
        filled in only while that phase is still readable (never a future one)."""
        result = self.processed[submission_id]
        if result.next_phase is None:
            return result
        phase = self.readable(result.next_phase.phase)
        if phase is None:
            return result.model_copy(update={"next_phase": None})
        return result.model_copy(
            update={"next_phase": result.next_phase.model_copy(update={"content": phase.content})}
        )

    def carry(self) -> dict[str, Any]:
        """The state as continue-as-new input, compacted until it fits the payload limit."""
        data = self.model_dump(mode="json")
        if len(_canonical(data)) <= CARRY_LIMIT_BYTES:
            return data
        self.attempts = [a.compacted() for a in self.attempts]
        for index in sorted(self.past)[:-3]:  # oldest completed phases: keep name and tasks
            self.past[index] = self.past[index].model_copy(
                update={
                    "content": "(content of this completed phase is in an earlier run's history)",
                    "tasks": [
                        t.model_copy(update={"content": "", "context": []})
                        for t in self.past[index].tasks
                    ],
                    "context": [],
                }
            )
        return self.model_dump(mode="json")

    def remember(self, submission_id: str | None, result: CheckpointResult) -> None:
        """Keep a result for idempotent repeats (bounded, oldest dropped first); the next
        phase's content is not stored twice — :meth:`repeat` fills it back in."""
        if not submission_id:
            return
        if result.next_phase is not None:
            result = result.model_copy(
                update={"next_phase": result.next_phase.model_copy(update={"content": ""})}
            )
        self.processed[submission_id] = result
        while len(self.processed) > MAX_REMEMBERED_SUBMISSIONS:
            del self.processed[next(iter(self.processed))]


def _canonical(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True, default=str).encode()


def _tail(text: str, limit: int = 160) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _task_summaries(phase: PhaseDefinition) -> list[TaskSummary]:
    return [
        TaskSummary(id=t.id, number=t.number, name=t.name, status=t.status, optional=t.optional)
        for t in phase.tasks
    ]


def _gate_view(phase: PhaseDefinition, approvers: list[str]) -> GateView:
    gate = phase.gate
    return GateView(
        fields={
            name: GateField(type=spec.type, required=spec.required, description=spec.description)
            for name, spec in gate.fields.items()
        },
        requires_approval=phase.requires_approval or gate.approval.required,
        approvers=approvers or list(phase.approvers or gate.approval.approvers),
        strict=gate.strict,
    )
