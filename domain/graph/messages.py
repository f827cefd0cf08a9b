"""The messages of a ``StepGraph`` run (its public Temporal contract) and what its
queries answer. Every input a client can send is bounded here; a message that breaks
a bound is refused by the SDK before any handler runs."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from phasegate.domain.gates import Problem
from phasegate.domain.graph.model import Finding, Graph, OutcomeName, StepId
from phasegate.domain.limits import MAX_ID_CHARS, MAX_NAME_CHARS, MAX_TEXT_CHARS
from phasegate.domain.signing import ApproverKey

__all__ = [
    "MAX_STATE_BYTES",
    "GraphAnswer",
    "GraphSetup",
    "GraphStatus",
    "GraphSummary",
    "GraphView",
    "PathEntry",
    "Question",
    "ReportResult",
    "StartGraph",
    "StepReport",
    "StepView",
]

MAX_STATE_BYTES = 64 * 1024  # a step state update, as compact JSON
MAX_EVIDENCE_BYTES = 256 * 1024
MAX_QUESTIONS = 3

GraphStatus = Literal["starting", "running", "awaiting_input", "completed", "failed"]
_Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)]
_Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


class StartGraph(BaseModel):
    """Run input: the whole graph (pinned by its SHA-256), the run's parameters, and the
    workspace its handlers work in. ``carried`` is set only by the run's own
    continue-as-new (the kit proves it)."""

    model_config = ConfigDict(extra="forbid")

    graph: Graph
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    params: dict[str, Any] = Field(default_factory=dict)
    target: str = Field("", max_length=4096, description="the workspace handlers work in")
    approvers: list[Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)]] | None = Field(
        None, max_length=64, description="narrow who may answer questions (never widen)"
    )
    carried: dict[str, Any] | None = None

    @field_validator("params")
    @classmethod
    def _small(cls, value: dict[str, Any]) -> dict[str, Any]:
        if _json_bytes(value) > MAX_STATE_BYTES:
            raise ValueError(f"params are over {MAX_STATE_BYTES} bytes as JSON")
        return value


class GraphSetup(BaseModel):
    """What the worker says at start (activity ``GraphActivities.prepare``): who may
    answer questions and whether unsigned answers are accepted (the deployment's call,
    never the starter's)."""

    approver_keys: list[ApproverKey] = Field(default_factory=list)
    unsigned_answers: bool = True
    models: dict[str, str] = Field(
        default_factory=dict, description="agent steps: step id → the model id it runs on"
    )
    agent_prompts: dict[str, str] = Field(
        default_factory=dict, description="agent → its instructions (the library's prompt)"
    )
    subgraphs: dict[str, Graph] = Field(
        default_factory=dict, description="graph steps: child graph name → the graph, pinned"
    )
    problems: list[str] = Field(default_factory=list, description="why the run cannot start")


class Question(BaseModel):
    """One question a step asks a person: pick one of 2–3 options, or free text where
    the step allows it (``options`` empty)."""

    model_config = ConfigDict(extra="forbid")

    id: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,39}$")]
    text: str = Field(min_length=1, max_length=1000)
    options: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=3
    )


class StepReport(BaseModel):
    """An outside agent's report of the step it is on (update ``report_step``).

    ``visit`` names which visit of the step the report is for (the step view shows it):
    a report for an earlier visit is stale and refused. A repeated ``report_id`` is
    answered with its first result."""

    model_config = ConfigDict(extra="forbid")

    step_id: StepId
    outcome: OutcomeName | Literal["needs_input"]
    visit: int | None = Field(None, ge=1, le=1_000_000)
    state: dict[str, Any] = Field(default_factory=dict, description="step state changes")
    evidence: dict[str, Any] | None = None
    questions: list[Question] = Field(default_factory=list, max_length=MAX_QUESTIONS)
    findings: list[Finding] = Field(
        default_factory=list, max_length=100, description="a review step's findings"
    )
    report_id: _Id | None = None
    summary: _Text = ""

    @field_validator("state")
    @classmethod
    def _state_small(cls, value: dict[str, Any]) -> dict[str, Any]:
        if _json_bytes(value) > MAX_STATE_BYTES:
            raise ValueError(f"state is over {MAX_STATE_BYTES} bytes as JSON")
        return value

    @field_validator("evidence")
    @classmethod
    def _evidence_small(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and _json_bytes(value) > MAX_EVIDENCE_BYTES:
            raise ValueError(f"evidence is over {MAX_EVIDENCE_BYTES} bytes as JSON")
        return value


class GraphAnswer(BaseModel):
    """A person's answers to the open questions (update ``answer``). Where the deployment
    has approver keys it is signed like an approval (``phasegate graph answer --as``):
    the comment the signature binds is :meth:`comment` (the answers as canonical JSON),
    the gate is the question round."""

    model_config = ConfigDict(extra="forbid")

    step_id: StepId
    round: int = Field(ge=1, le=1_000_000)
    answers: dict[
        Annotated[str, StringConstraints(max_length=40)],
        Annotated[str, StringConstraints(max_length=2000)],
    ] = Field(max_length=3)
    approver: Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)] = ""
    nonce: Annotated[str, StringConstraints(max_length=MAX_ID_CHARS)] | None = None
    signature: Annotated[str, StringConstraints(max_length=512)] | None = None

    def comment(self) -> str:
        """What a signature binds besides the round: the answers, as canonical JSON."""
        return answers_comment(self.answers)


def answers_comment(answers: dict[str, str]) -> str:
    return json.dumps(answers, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class PathEntry(BaseModel):
    """One step the run took: which visit, how it ended, who ended it, where it went."""

    step: str
    visit: int
    outcome: str
    to: str | None = None
    by: str = ""
    at: datetime
    summary: str = ""


class ReportResult(BaseModel):
    """The answer to ``report_step``: accepted (the run moved on, or asks a person) or
    not (the evidence failed the step's gate; the step stays, try again)."""

    accepted: bool
    step_id: str
    outcome: str
    problems: list[Problem] = Field(default_factory=list)
    warnings: list[Problem] = Field(default_factory=list)
    next_step: str | None = None
    status: GraphStatus = "running"
    report_id: str | None = None


class StepView(BaseModel):
    """What the agent on a step reads (query ``step``): never a step it is not on."""

    graph: str
    step_id: str
    title: str
    actions: str
    visit: int
    outcomes: list[str]
    handler: str
    state: dict[str, Any]
    params: dict[str, Any]
    gate: dict[str, Any] | None = None
    questions: list[Question] = Field(default_factory=list)
    answers: dict[str, str] = Field(default_factory=dict)
    may_ask: bool = False
    findings: list[Finding] = Field(
        default_factory=list, description="the last review's blocking findings, to fix"
    )
    rendered: bool = Field(True, description="False while the visit's actions render")
    status: GraphStatus


class GraphView(BaseModel):
    """The run as a whole (query ``status``): where it is and the path it took."""

    graph: str
    sha256: str
    status: GraphStatus
    current_step: str | None
    visit: int
    path: list[PathEntry]
    path_total: int
    state: dict[str, Any]
    params: dict[str, Any]
    questions: list[Question] = Field(default_factory=list)
    question_round: int = 0
    awaiting_input_from: list[str] = Field(default_factory=list)
    answer_binding: dict[str, str] | None = Field(
        None, description="what a signed answer binds besides the answers (while asking)"
    )
    outcome: str | None = None
    failure: str = ""
    children: dict[str, str] = Field(
        default_factory=dict, description="'step#visit' → the workflow id of its child run"
    )
    runs: int = 1
    started_at: datetime | None = None
    updated_at: datetime | None = None


class GraphSummary(BaseModel):
    """The result of a finished run."""

    graph: str
    status: GraphStatus
    outcome: str | None
    failure: str = ""
    path: list[PathEntry]
    state: dict[str, Any]
