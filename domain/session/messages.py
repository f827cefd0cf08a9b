"""The public Temporal contract of ``GatedSession``: one model per message.

Field names are snake_case and stable; external SDK clients (any language)
send and read these as JSON. See ARCHITECTURE.md, "Temporal contract".
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from phasegate.domain.commands import SessionCommands
from phasegate.domain.gates import GateDefinition, Problem
from phasegate.domain.limits import (
    DEFAULT_MAX_EVIDENCE_BYTES,
    MAX_EVIDENCE_BYTES_LIMIT,
    MAX_ID_CHARS,
    MAX_LIST_ITEMS,
    MAX_OPTIONS_BYTES,
    MAX_PATH_CHARS,
    MAX_PHASE,
    MAX_TEXT_CHARS,
    Name,
    shallow,
)
from phasegate.domain.signing import ApproverKey
from phasegate.domain.tasks.model import TaskSpec
from phasegate.domain.verify import VerifyResult

__all__ = [
    "ApprovalDecision",
    "ApprovalRecord",
    "Attempt",
    "AuditEntry",
    "CheckpointResult",
    "CheckpointSubmission",
    "CompletedPhase",
    "ControlRequest",
    "ControlResult",
    "CurrentView",
    "DefinitionRef",
    "GateField",
    "GateView",
    "PhaseArtifact",
    "PhaseContent",
    "PhaseDefinition",
    "PhaseQuery",
    "PhaseView",
    "RenderedTask",
    "SequenceViolation",
    "SessionOptions",
    "SessionStatus",
    "SessionSummary",
    "SessionView",
    "StartSession",
    "TaskQuery",
    "TaskSummary",
    "TaskView",
]

SessionStatus = Literal[
    "starting",
    "active",
    "awaiting_approval",
    "approval_overdue",
    "paused",
    "completed",
    "abandoned",
]


class SessionOptions(BaseModel):
    """Per-session options given at start (extra keys are kept for custom workflows)."""

    model_config = ConfigDict(extra="allow")

    spec_path: str | None = Field(
        None,
        max_length=MAX_PATH_CHARS,
        description="Dynamic workflows: the spec's tasks.md or its directory.",
    )
    approvers: list[Name] | None = Field(
        None,
        max_length=MAX_LIST_ITEMS,
        description="Narrows who may approve in this session: where a gate names approvers, "
        "only those also named here; where it names none, only these. Never widens a gate.",
    )
    max_evidence_bytes: int = Field(
        DEFAULT_MAX_EVIDENCE_BYTES,
        gt=0,
        le=MAX_EVIDENCE_BYTES_LIMIT,
        description="Evidence larger than this is rejected.",
    )
    continue_as_new_after_events: int | None = Field(
        None, gt=0, description="Continue-as-new once history reaches this many events."
    )
    notify_url: str | None = Field(
        None,
        max_length=2048,
        description="Webhook for overdue approvals where the gate names none (the gate's "
        "approval.notify_url always wins: a starter cannot redirect the lead's notices).",
    )
    approver_keys: list[ApproverKey] | None = Field(
        None,
        max_length=MAX_LIST_ITEMS,
        description="Signed approvers (name + Ed25519 public key). They can only add "
        "constraints: where the deployment or the definition names keys, these must be among "
        "them (choosing who of them approves); where none are named, they require signatures "
        "only if the deployment accepts unsigned approvals.",
    )
    test_command: str | None = Field(
        None,
        max_length=4000,
        description="The project's test command (e.g. 'python -m pytest -q'), run at every "
        "phase whose gate backs tests_passing; else the project's phasegate.toml, the "
        "deployment's PHASEGATE_TEST_COMMAND, or one found in the project. Listed in phase 0 "
        "and bound by the lead's approval of it; a deployment may allow only some commands.",
    )
    interface: Literal["cli", "mcp", "sdk"] | None = Field(
        None,
        description="How the agent drives the session: phase text names that interface's "
        "commands (phasegate submit, the submit_checkpoint tool, PhasegateClient.submit); "
        "unset: all three.",
    )
    task_layout: Literal["per_task", "stages"] = Field(
        "per_task",
        description="A .workflow task folder as --spec: a phase per top-level task in "
        "dependency order, or the stages PLAN / IMPLEMENT (every task) / REVIEW.",
    )
    complexity: Literal["simple", "medium", "complex"] | None = Field(
        None,
        description="The task board's complexity, at least this (it is raised as tasks "
        "are added, never lowered: simple < 5 tasks, medium 5-15, complex > 15).",
    )
    task_files: bool | None = Field(
        None,
        description="Project the task board to .workflow/WFS-<slug>/ files in the target "
        "(on by default for a session imported from a task folder).",
    )
    prefetch: bool = Field(
        True,
        description="Render the next phase in the background while the agent works, so an "
        "advance answers without an activity round trip. The prefetched content is in the "
        "workflow's history (never in any query, update result or error); set false to keep "
        "a future phase out of history entirely, at the cost of a slower advance.",
    )

    @model_validator(mode="after")
    def _bounded(self) -> SessionOptions:
        size = len(self.model_dump_json())
        if size > MAX_OPTIONS_BYTES:
            raise ValueError(f"options are {size} bytes as JSON; the limit is {MAX_OPTIONS_BYTES}")
        return self


# -- internal to the workflow, but plain data (it is carried across continue-as-new) --


class RenderedTask(BaseModel):
    id: str
    number: int = Field(description="1-based position in the phase.")
    name: str
    content: str
    status: str = "todo"
    optional: bool = False
    context: list[dict[str, Any]] = Field(default_factory=list)
    task: TaskSpec | None = Field(
        None, description="The task as its definition gives it (for the task board)."
    )


class PhaseDefinition(BaseModel):
    """One phase as rendered for a session: content, tasks and gate."""

    index: int = Field(description="Session phase number, consecutive from 0.")
    label: str = Field(description="Number as written in the source (spec or metadata).")
    name: str
    content: str
    tasks: list[RenderedTask] = Field(default_factory=list)
    gate: GateDefinition = Field(default_factory=GateDefinition)
    requires_approval: bool = False
    approvers: list[str] = Field(default_factory=list)
    example_evidence: str | None = Field(
        None, description="A valid evidence example from the phase's docs, shown on failure."
    )
    context: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Retrieved standards/docs for this phase (never from a later phase).",
    )


class DefinitionRef(BaseModel):
    """How activities find a session's definition again: ids and paths, never content."""

    workflow_type: str
    target: str = ""
    total_phases: int
    static_phase_count: int
    snapshot_id: str | None = Field(None, description="sha256 of the spec snapshot, if dynamic.")
    spec_source: str | None = None
    base_commit: str | None = Field(
        None, description="git HEAD of the target when the session started (for git_changed)."
    )
    commands: SessionCommands | None = Field(
        None, description="The commands the session runs, fixed at start (domain.commands)."
    )
    interface: str | None = Field(None, description="SessionOptions.interface, for phase text.")


# -- start --


class StartSession(BaseModel):
    """Run input of ``GatedSession``. ``carried`` is set only by continue-as-new."""

    workflow_type: str = Field(max_length=MAX_ID_CHARS)
    target: str = Field("", max_length=MAX_PATH_CHARS)
    options: SessionOptions = Field(default_factory=SessionOptions)
    carried: dict[str, Any] | None = Field(
        None, description="Internal: the session state carried across continue-as-new."
    )


# -- checkpoint --


class CheckpointSubmission(BaseModel):
    """Input of update ``submit_checkpoint``."""

    phase: int = Field(le=MAX_PHASE)
    evidence: Annotated[dict[str, Any], AfterValidator(shallow)] = Field(default_factory=dict)
    submission_id: str | None = Field(
        None,
        max_length=MAX_ID_CHARS,
        description="Idempotency key: a repeat returns the original result.",
    )


class PhaseContent(BaseModel):
    phase: int
    label: str
    name: str
    content: str
    tasks: list[TaskSummary] = Field(default_factory=list)


class CheckpointResult(BaseModel):
    passed: bool
    problems: list[Problem] = Field(default_factory=list)
    warnings: list[Problem] = Field(default_factory=list)
    current_phase: int
    next_phase: PhaseView | None = Field(
        None,
        description="After an advance: the new current phase's whole view (content, tasks, "
        "gate with its JSON Schema, context), so the agent needs no query before working on "
        "it. Earlier phases' artifacts are left out (query `phase` for them).",
    )
    awaiting_approval: bool = False
    completed: bool = False
    attempt: int = 0
    submission_id: str | None = None
    verify: list[VerifyResult] = Field(
        default_factory=list, description="Workspace checks run for this attempt."
    )
    example_evidence: str | None = Field(
        None, description="On failure: valid evidence as the phase's docs show it."
    )


# -- approvals and controls --


class ApprovalDecision(BaseModel):
    """Input of update ``decide_approval``. Sessions with signed approvers require
    ``nonce`` and an Ed25519 ``signature`` over ``domain.signing.canonical_message``."""

    phase: int = Field(le=MAX_PHASE)
    approver: Name
    decision: Literal["approve", "reject"]
    comment: str = Field("", max_length=MAX_TEXT_CHARS)
    nonce: str | None = Field(None, max_length=64)
    signature: str | None = Field(None, max_length=128)


class ApprovalRecord(BaseModel):
    phase: int
    approver: str
    decision: Literal["approve", "reject"]
    comment: str = ""
    at: datetime


class AuditEntry(BaseModel):
    """One recorded decision or control action: who, when, what, why."""

    at: datetime
    action: str
    actor: str = ""
    phase: int
    detail: str = ""


class ControlRequest(BaseModel):
    """Input of update ``control``. Sessions that name approver or operator keys require
    ``nonce`` and an Ed25519 ``signature`` by ``actor``'s key over
    ``domain.signing.canonical_control_message``."""

    action: Literal["pause", "resume", "retry_phase", "rollback", "abandon"]
    reason: str = Field("", max_length=MAX_TEXT_CHARS)
    to_phase: int | None = Field(
        None, le=MAX_PHASE, description="rollback: the completed phase to return to."
    )
    actor: Name = ""
    nonce: str | None = Field(None, max_length=64)
    signature: str | None = Field(None, max_length=128)


class ControlResult(BaseModel):
    action: str
    status: SessionStatus
    current_phase: int


# -- queries --


class PhaseQuery(BaseModel):
    phase: int = Field(le=MAX_PHASE)
    tasks_offset: int = Field(0, ge=0, description="First task of the page shown.")


class TaskQuery(BaseModel):
    phase: int = Field(le=MAX_PHASE)
    task: str = Field(
        max_length=MAX_ID_CHARS,
        description="Task id as written ('1.2', 'T003') or its 1-based number.",
    )


class TaskSummary(BaseModel):
    id: str
    number: int
    name: str
    status: str = "todo"
    optional: bool = False


class GateField(BaseModel):
    """One evidence field of the current phase's gate."""

    type: str
    required: bool
    description: str = ""
    json_schema: dict[str, Any] = Field(
        default_factory=dict,
        description="The field as JSON Schema: type, minimum/maximum, length limits, pattern, "
        "enum, description (plus x-phasegate-validator for a lambda validator).",
    )


class GateView(BaseModel):
    """What the phase's gate asks for; ``json_schema`` validates a whole evidence object."""

    fields: dict[str, GateField] = Field(default_factory=dict)
    requires_approval: bool = False
    approvers: list[str] = Field(default_factory=list)
    strict: bool = True
    json_schema: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON Schema (2020-12) of the evidence object: properties, required, and "
        "x-phasegate-rules for cross-field rules. Build evidence from it, submit once.",
    )


class PhaseArtifact(BaseModel):
    """What a passed checkpoint leaves behind."""

    phase: int
    label: str
    name: str
    evidence: dict[str, Any]
    outputs: dict[str, Any] = Field(default_factory=dict)
    submitted_at: datetime
    submission_id: str | None = None
    attempt: int
    approved_by: str | None = None
    superseded: bool = False
    evidence_sha256: str | None = Field(
        None, description="SHA-256 of the evidence as canonical JSON (sorted keys, compact)."
    )
    evidence_bytes: int | None = None
    evidence_elided: bool = Field(
        False, description="Evidence left out to keep this answer small (query `artifact`)."
    )
    recorded_in_run: str | None = Field(None, description="Run whose history holds the submission.")


class Attempt(BaseModel):
    phase: int
    number: int
    at: datetime
    passed: bool
    problems: list[Problem] = Field(default_factory=list)
    warnings: list[Problem] = Field(default_factory=list)
    submission_id: str | None = None
    via: Literal["update", "signal"] = "update"
    evidence: dict[str, Any] = Field(
        default_factory=dict, description="Empty once compacted; see evidence_sha256."
    )
    evidence_sha256: str = ""
    evidence_bytes: int = 0
    verify: list[VerifyResult] = Field(default_factory=list)

    def compacted(self) -> Attempt:
        """The attempt without its raw evidence (digest and size kept; the evidence itself
        stays in the update's input in Temporal history)."""
        if not self.evidence:
            return self
        return self.model_copy(
            update={
                "evidence": {},
                "verify": [v.model_copy(update={"excerpt": v.excerpt[-300:]}) for v in self.verify],
            }
        )


class CompletedPhase(BaseModel):
    phase: int
    label: str
    name: str
    completed_at: datetime
    attempts: int


class SessionView(BaseModel):
    """Result of query ``status``."""

    workflow_type: str
    name: str = ""
    target: str = ""
    status: SessionStatus
    current_phase: int
    current_phase_name: str = ""
    total_phases: int
    completed_phases: list[CompletedPhase] = Field(default_factory=list)
    attempts: int = Field(0, description="Attempts on the current phase.")
    last_problems: list[Problem] = Field(default_factory=list)
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    awaiting_approval_from: list[str] = Field(default_factory=list)
    approval_due_at: datetime | None = None
    audit: list[AuditEntry] = Field(default_factory=list)
    superseded: list[PhaseArtifact] = Field(
        default_factory=list, description="Artifacts of phases undone by a rollback (kept)."
    )
    attempt_log: list[Attempt] = Field(
        default_factory=list,
        description="Recent attempts of earlier phases: problems, verify results, evidence "
        "digest (the evidence itself is in the update's input in history).",
    )
    feedback: str = ""
    artifacts: dict[str, list[str]] = Field(
        default_factory=dict, description="Phase number -> evidence field names recorded."
    )
    last_signal_error: str | None = None
    started_at: datetime | None = None
    updated_at: datetime | None = None
    approval_binding: dict[str, str] | None = None  # what a signed decision binds (v2)
    run_chain: list[str] = Field(
        default_factory=list,
        description="Run ids of this session, first to current (continue-as-new links them). "
        "A run of the same session id that is not in this chain is another session.",
    )
    audit_total: int | None = Field(None, description="Entries, when ``audit`` shows the latest.")


class PhaseView(BaseModel):
    """Result of query ``phase`` for the current or a completed phase."""

    phase: int
    label: str
    name: str
    # Defaults let results recorded before the view was carried whole still load.
    state: Literal["current", "completed"] = "current"
    content: str
    tasks: list[TaskSummary] = Field(default_factory=list)
    tasks_total: int | None = Field(None, description="Tasks, when ``tasks`` is one page.")
    gate: GateView = Field(default_factory=GateView)
    artifacts: dict[str, PhaseArtifact] = Field(default_factory=dict)
    context: list[dict[str, Any]] = Field(default_factory=list)
    example_evidence: dict[str, Any] | None = Field(
        None, description="Evidence as the phase's docs show it (a starting point, if any)."
    )


class CurrentView(BaseModel):
    """Result of query ``current``: the status and the current phase's view in one answer
    (one round trip, and no phase moving on between two reads)."""

    status: SessionView
    phase: PhaseView | None = Field(None, description="None once the session has finished.")


class TaskView(BaseModel):
    phase: int
    task: TaskSummary
    content: str
    context: list[dict[str, Any]] = Field(default_factory=list)


class SequenceViolation(BaseModel):
    """What any read of a future phase or task returns instead of content."""

    error: Literal["phase_sequence_violation"] = "phase_sequence_violation"
    message: str
    requested_phase: int
    current_phase: int
    total_phases: int
    completed_phases: list[int] = Field(default_factory=list)
    current_content: str = ""


class SessionSummary(BaseModel):
    """Result of a finished ``GatedSession`` run."""

    workflow_type: str
    status: SessionStatus
    completed_phases: list[int]
    total_phases: int
    artifacts: dict[str, PhaseArtifact] = Field(default_factory=dict)


PhaseContent.model_rebuild()
CheckpointResult.model_rebuild()
