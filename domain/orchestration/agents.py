"""Agents an orchestration runs, their typed outputs, the issue they work on and the profile.

An :class:`Orchestration` (``workflows/orchestration.py``) reads an :class:`Issue`,
asks the planner for a :class:`PlannerDecision` (which agents run, in what order)
and runs each step. Every model output is one of the pydantic models below: the
model is asked for exactly that shape, and an answer that does not validate is sent
back to it with the validation error (pydantic-ai), then fails the step.

Every field is bounded, so an output (or an issue or profile a starter sends) can
never grow history past Temporal's limits: a model that writes more is asked again.

Pure values: imported by workflow code.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from phasegate.domain.limits import MAX_NAME_CHARS, MAX_PATH_CHARS, Name

__all__ = [
    "AGENTS",
    "DEFAULT_PLANNER_MODEL",
    "MAX_ISSUE_BODY_CHARS",
    "MAX_MODEL_RESPONSE_BYTES",
    "MAX_PLAN_STEPS",
    "MODEL_UNREACHABLE",
    "OUTPUT_TOO_LARGE",
    "STEP_AGENTS",
    "AgentName",
    "AgentOutput",
    "AnalysisResult",
    "DeveloperProfile",
    "DeveloperResult",
    "Issue",
    "PlanOutput",
    "PlanStep",
    "PlannerDecision",
    "Profile",
    "ReviewResult",
    "Scope",
    "StepAgent",
    "StepUsage",
]

AgentName = Literal["planner", "analyst", "architect", "developer", "reviewer"]
StepAgent = Literal["analyst", "architect", "developer", "reviewer"]
Scope = Literal["trivial", "simple", "moderate", "complex"]
AGENTS: tuple[AgentName, ...] = ("planner", "analyst", "architect", "developer", "reviewer")
STEP_AGENTS: tuple[StepAgent, ...] = ("analyst", "architect", "developer", "reviewer")

DEFAULT_PLANNER_MODEL = "rules"  # the rules planner: no model call, no API key
MAX_PLAN_STEPS = 12
MAX_ISSUE_BODY_CHARS = 32_000
MAX_OUTPUT_TEXT = 16_000  # one text field of a model output (about 4,000 tokens)
MAX_SHORT_TEXT = 1_000
MAX_ITEMS = 32
# One model answer as the model-request activity returns it (JSON). Every field of an
# output is bounded, but 32 comments of 16,000 characters, each escaped to six bytes
# (\u0000), still make 3 MB: over Temporal's payload limit (2 MB by default, 1.5 MiB on
# the dev server). The largest answer in two-byte characters (about 1.03 MB) fits. A
# larger answer fails its step (the planner may replan) with code OUTPUT_TOO_LARGE.
MAX_MODEL_RESPONSE_BYTES = 1_400_000
OUTPUT_TOO_LARGE = "agent_output_too_large"
# A model's server refused the connection or its host does not resolve: no plan can fix
# that (the worker's provider settings, or the server, must change).
MODEL_UNREACHABLE = "model_unreachable"

_ISSUE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._#/-]{0,127}")

ShortText = Annotated[str, StringConstraints(max_length=MAX_SHORT_TEXT)]
LongText = Annotated[str, StringConstraints(max_length=MAX_OUTPUT_TEXT)]
Confidence = Annotated[float, Field(ge=0.0, le=1.0)]
ReplanRequest = Annotated[
    str | None,
    Field(
        None,
        max_length=MAX_SHORT_TEXT,
        description="Set only to ask the planner for a new plan, saying why; else null.",
    ),
]


class Issue(BaseModel):
    """What an orchestration works on: an issue as a tracker holds it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="The issue's id (e.g. 42 or PROJ-42).")
    title: str = Field(min_length=1, max_length=300)
    body: str = Field("", max_length=MAX_ISSUE_BODY_CHARS)
    labels: list[Name] = Field(default_factory=list, max_length=MAX_ITEMS)

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not _ISSUE_ID.fullmatch(value):
            raise ValueError(
                "issue id must be 1-128 characters of letters, digits and . _ # / -, "
                "starting with a letter or digit"
            )
        return value


class PlanStep(BaseModel):
    """One step of a plan: which agent runs and why."""

    agent: StepAgent
    reason: ShortText = ""


class PlannerDecision(BaseModel):
    """The planner's output: the agents to run, in order, and why."""

    reasoning: LongText
    steps: list[PlanStep] = Field(min_length=1, max_length=MAX_PLAN_STEPS)
    scope: Scope | None = Field(
        None, description="How big the change looks: trivial, simple, moderate or complex."
    )


class AnalysisResult(BaseModel):
    """The analyst's output: what the issue is really about and how big it is."""

    findings: list[LongText] = Field(max_length=MAX_ITEMS)
    scope: Scope
    recommended_agents: list[StepAgent] = Field(default_factory=list, max_length=MAX_PLAN_STEPS)
    relevant_files: list[Annotated[str, StringConstraints(max_length=MAX_PATH_CHARS)]] = Field(
        default_factory=list, max_length=MAX_ITEMS * 2
    )
    confidence: Confidence
    uncertainty_factors: list[ShortText] = Field(default_factory=list, max_length=MAX_ITEMS)
    replan_request: ReplanRequest


class PlanOutput(BaseModel):
    """The architect's output: the goal and a plan the developer follows.

    ``plan_markdown`` is written as a tasks.md (``## Phase 1: Name`` headings with
    ``- [ ] 1.1 task`` lines) so the developer's gated session can run it phase by phase.
    """

    goal: ShortText = Field(min_length=1)
    plan_markdown: LongText = Field(min_length=1)
    confidence: Confidence
    replan_request: ReplanRequest


class ReviewResult(BaseModel):
    """The reviewer's output: approve the change or send it back with comments."""

    approved: bool
    comments: list[LongText] = Field(default_factory=list, max_length=MAX_ITEMS)
    severity: Literal["none", "minor", "major", "critical"] = "none"
    confidence: Confidence
    replan_request: ReplanRequest


class DeveloperResult(BaseModel):
    """What the developer step produced: a gated session that completed (or not).

    Its confidence is 1.0 only when every phase of the session passed its gate: the
    gates and verify checks decide, never the coding agent's own report.
    """

    session_id: str
    completed: bool
    phases_completed: int = 0
    total_phases: int = 0
    summary: LongText = ""
    confidence: Confidence = 1.0
    replan_request: ReplanRequest


AgentOutput = PlannerDecision | AnalysisResult | PlanOutput | ReviewResult | DeveloperResult


class DeveloperProfile(BaseModel):
    """How the developer step works.

    ``mcp``: an outside agent (or a person) drives the developer's gated session over
    MCP or the CLI; the step waits until that session completes. ``command``: the
    worker runs one of ITS coding agents (``agent``: a name from the worker's
    ``PHASEGATE_DEVELOPER_COMMANDS``, e.g. ``claude``, ``codex``, ``scripted``) in the
    working directory, with ``PHASEGATE_SESSION`` set to the session it must complete.
    ``command`` may spell out one of those commands instead; a program the worker does
    not list is refused, so whoever starts an orchestration cannot run code on it.
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["mcp", "command"] = "mcp"
    agent: str = Field("", max_length=32, description="A coding agent the worker lists.")
    command: list[Annotated[str, StringConstraints(max_length=MAX_PATH_CHARS)]] = Field(
        default_factory=list, max_length=64
    )
    timeout_minutes: int = Field(60, ge=1, le=24 * 60)

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: list[str]) -> list[str]:
        if value and not value[0].strip():
            raise ValueError("command[0] must name the program to run (e.g. claude)")
        return value


class Profile(BaseModel):
    """How an orchestration runs: models per agent, mode, approvals and limits.

    A field left out takes its default; ``models`` falls back to the worker's
    settings (``PHASEGATE_MODELS``), and the planner to the rules planner.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field("default", max_length=MAX_NAME_CHARS)
    models: dict[AgentName, Annotated[str, StringConstraints(min_length=1, max_length=200)]] = (
        Field(
            default_factory=dict,
            description="Model per agent: openai:NAME, anthropic:NAME, PROVIDER:NAME for an "
            "OpenAI-compatible provider named in PHASEGATE_MODEL_PROVIDERS, demo (offline), "
            "or rules (planner only).",
        )
    )
    orchestration_mode: Literal["fixed", "dynamic"] = "dynamic"
    approval_required: list[StepAgent] = Field(default_factory=list, max_length=4)
    auto_approve_trivial: bool = False
    max_replans: int = Field(3, ge=0, le=10)
    escalation_threshold: float = Field(0.7, ge=0.0, le=1.0)
    max_review_passes: int = Field(3, ge=1, le=10)
    max_agent_output_tokens: int = Field(2000, ge=100, le=16_000)
    working_dir: str = Field("", max_length=MAX_PATH_CHARS)
    approvers: list[Name] = Field(
        default_factory=list,
        max_length=64,
        description="Narrows who may approve to these of the deployment's approvers.",
    )
    developer: DeveloperProfile = Field(default_factory=DeveloperProfile)


class StepUsage(BaseModel):
    """Tokens and model requests one step used (summed over its model requests)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
