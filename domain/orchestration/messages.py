"""Messages of the ``Orchestration`` workflow: its input, what it carries across a
replan (continue-as-new), its records and the views its queries answer.

One model per message (STYLE.md 2). Every input a client can send is bounded by
its model, so a message that breaks a bound is refused before any handler runs.
Pure values: imported by workflow code.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from phasegate.domain.limits import MAX_TEXT_CHARS
from phasegate.domain.orchestration.agents import Issue, Profile, Scope, StepAgent, StepUsage
from phasegate.domain.signing import ApproverKey
from phasegate.domain.trust import ActorName

__all__ = [
    "AwaitingDecision",
    "DeveloperPrompt",
    "DeveloperSession",
    "HistoryEntry",
    "OrchestrationCarry",
    "OrchestrationDecision",
    "OrchestrationSetup",
    "OrchestrationView",
    "OutputRecord",
    "PlanView",
    "ReplanRequest",
    "StartOrchestration",
    "StepRecord",
    "VerifyPlanRequest",
    "VerifyPlanResult",
]

StepStatus = Literal["pending", "awaiting_approval", "running", "done", "failed"]
OrchestrationStatus = Literal["planning", "running", "awaiting", "completed", "failed", "checked"]
SessionStatus = Literal["open", "completed", "failed", "replaced"]
HistoryKind = Literal[
    "started",
    "plan",
    "plan_refused",
    "approval",
    "escalation",
    "step_started",
    "step_done",
    "step_failed",
    "review_rejected",
    "replan_requested",
    "replan",
    "completed",
    "failed",
]


class OutputRecord(BaseModel):
    """One agent's output, keyed ``<agent>_<n>`` (the n-th time that agent ran)."""

    key: str
    agent: str
    step: int = Field(description="The plan step it answered (in the run that made it).")
    output: dict[str, Any] = Field(
        default_factory=dict, description="The validated output as JSON; empty when compacted."
    )
    usage: StepUsage = Field(default_factory=StepUsage)
    model: str = ""
    sha256: str = ""
    ref: str | None = Field(None, description="File in the workspace holding the whole output.")
    at: datetime


class HistoryEntry(BaseModel):
    """One append-only entry of what happened: plans, decisions, steps, replans."""

    seq: int
    at: datetime
    kind: HistoryKind
    agent: str = ""
    key: str = ""
    actor: str = ""
    detail: str = ""


class StepRecord(BaseModel):
    """A plan step as it stands: pending, waiting for a person, running, done or failed."""

    index: int
    agent: StepAgent
    reason: str = ""
    status: StepStatus = "pending"
    approved_by: str = ""
    key: str = ""
    child_session: str = ""


class DeveloperSession(BaseModel):
    """A developer step's gated session, as the orchestration knows it.

    ``open`` while its step waits on it; ``completed`` when its step got the session's
    completion; ``failed`` when its step failed; ``replaced`` once a replan started a new
    run (the run that owned it is over: nothing waits on it any more, whatever the
    session itself still says).
    """

    session_id: str
    mode: str = Field(description="The profile's developer.mode: command or mcp.")
    spec_path: str = ""
    status: SessionStatus = "open"


class DeveloperPrompt(BaseModel):
    """Answer of query ``developer_prompt``: what the open developer session's coding
    agent is told (empty fields when no session is open, or the run predates it)."""

    session_id: str = ""
    mode: str = ""
    spec_path: str = ""
    prompt: str = ""


class AwaitingDecision(BaseModel):
    """A person's decision the run is waiting for.

    ``gate`` plays the part a phase number plays in a session: it is what a signed
    decision names, and it never repeats within an orchestration. ``subject_sha256``
    binds what is decided (the step about to run, or the output being escalated).
    """

    gate: int
    kind: Literal["approval", "escalation"]
    step: int
    agent: str
    reason: str
    subject_sha256: str
    since: datetime


class OrchestrationCarry(BaseModel):
    """What a replan carries into the next run (continue-as-new)."""

    # Bounded, though only the orchestration's own replan writes it (workflows._kit
    # checks that with the server): a carry is never a way around a limit.
    first_run_id: str = Field(max_length=128)
    replanned_count: int = Field(ge=0, le=10)  # Profile.max_replans <= 10
    replan_reason: str = Field(max_length=64 * 1024)
    outputs: list[OutputRecord] = Field(default_factory=list, max_length=1000)
    history: list[HistoryEntry] = Field(default_factory=list, max_length=5000)
    history_dropped: int = Field(0, ge=0)
    review_passes: int = Field(0, ge=0, le=100)
    gate_seq: int = Field(0, ge=0, le=1_000_000)
    used_nonces: list[str] = Field(default_factory=list, max_length=10_000)
    usage: StepUsage = Field(default_factory=StepUsage)
    scope: Scope | None = None
    child_sessions: list[str] = Field(default_factory=list)
    developer_sessions: list[DeveloperSession] = Field(default_factory=list, max_length=1000)


class StartOrchestration(BaseModel):
    """Run input of ``Orchestration``: the issue and the profile (``carried`` is set
    only by the orchestration's own replan).

    ``check_only``: the run only checks the profile on the worker and ends, status
    ``checked``, its problems in ``failure`` (empty: it can run); a client runs that
    before it starts the orchestration itself, so nothing starts a profile that cannot
    run.
    """

    model_config = ConfigDict(extra="forbid")

    issue: Issue
    profile: Profile = Field(default_factory=Profile)
    carried: OrchestrationCarry | None = None
    check_only: bool = False


class OrchestrationSetup(BaseModel):
    """What the worker decides at the start of every run (activity ``orchestration_setup``)."""

    models: dict[str, str]
    working_dir: str
    approver_keys: list[ApproverKey] = Field(default_factory=list)
    unsigned_approvals: bool = False
    temporal_address: str = Field("", description="Where a coding agent reaches Temporal.")
    developer_command: list[str] = Field(
        default_factory=list, description="The worker's command for the developer (command mode)."
    )
    problems: list[str] = Field(default_factory=list)


class OrchestrationDecision(BaseModel):
    """Input of update ``decide_approval`` on an orchestration.

    ``gate`` is the number ``state`` shows under ``awaiting.gate``. Where approvers
    have keys, ``nonce`` and ``signature`` are required: the Ed25519 signature of
    ``domain.signing.canonical_message`` (version 2) with ``session_id`` = the
    orchestration id, ``phase`` = ``gate`` and ``binding`` = ``state.approval_binding``.
    """

    model_config = ConfigDict(extra="forbid")

    gate: int = Field(ge=0, le=1_000_000)
    approver: ActorName
    decision: Literal["approve", "reject"]
    comment: str = Field("", max_length=MAX_TEXT_CHARS)
    nonce: str | None = Field(None, max_length=64)
    signature: str | None = Field(None, max_length=128)


class ReplanRequest(BaseModel):
    """Input of update ``request_replan``: a person asks the planner for a new plan.

    Signed like a decision where approvers have keys: ``phase`` = the ``gate``
    number ``state`` shows as ``replan_gate``, decision ``"approve"``, the reason as
    the comment.
    """

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    requested_by: ActorName
    nonce: str | None = Field(None, max_length=64)
    signature: str | None = Field(None, max_length=128)


class VerifyPlanRequest(BaseModel):
    """Input of activity ``verify_plan``: the plan's text and the files it names."""

    working_dir: str
    goal: str
    text: str
    claimed_files: list[str] = Field(default_factory=list)


class VerifyPlanResult(BaseModel):
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class PlanView(BaseModel):
    """Answer of query ``plan``: the plan with the current step marked."""

    reasoning: str = ""
    scope: Scope | None = None
    mode: str = "dynamic"
    steps: list[StepRecord] = Field(default_factory=list)
    current: int | None = None
    replanned_count: int = 0
    replan_reason: str = ""


class OrchestrationView(BaseModel):
    """Answer of query ``state``."""

    orchestration_id: str
    issue: Issue
    status: OrchestrationStatus
    plan: PlanView
    awaiting: AwaitingDecision | None = None
    approval_binding: dict[str, str] | None = None
    replan_gate: int = 0
    replan_binding: dict[str, str] | None = None
    pending_replan: str | None = None
    outputs: list[OutputRecord] = Field(default_factory=list)
    usage: StepUsage = Field(default_factory=StepUsage)
    last_decision: str = ""
    failure: str = ""
    child_sessions: list[str] = Field(default_factory=list)
    developer_sessions: list[DeveloperSession] = Field(
        default_factory=list, description="Every developer session of the chain, oldest first."
    )
    approvers: list[str] = Field(default_factory=list)
    run_chain_length: int = 1
