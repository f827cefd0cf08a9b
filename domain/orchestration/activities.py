"""Inputs and outputs of the orchestration's activities (its developer step included).

One model per activity message (STYLE.md 2, ARCHITECTURE.md "every activity input
model lives here"): the workflow builds them, the worker validates them, and their
bounds hold whoever scheduled the activity (any workflow with a Temporal client can).
The other orchestration activities' messages (:class:`OrchestrationSetup`,
:class:`VerifyPlanRequest`, :class:`VerifyPlanResult`) are in :mod:`.messages`, the
agents' prompt request in :mod:`.context`. Pure values: imported by workflow code.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from phasegate.domain.limits import MAX_PATH_CHARS
from phasegate.domain.orchestration.agents import Issue, PlanOutput, Profile

__all__ = [
    "MAX_DEV_TASKS",
    "CodingAgentRequest",
    "CodingAgentRun",
    "DevSpec",
    "DevSpecRequest",
    "SetupRequest",
    "StoreOutputRequest",
]

MAX_DEV_TASKS = 50
"""Tasks of the developer spec's fallback phase, and review comments taken as tasks."""


class SetupRequest(BaseModel):
    """Input of activity ``orchestration_setup``."""

    profile: Profile


class StoreOutputRequest(BaseModel):
    """Input of activity ``store_output``."""

    working_dir: str
    orchestration_id: str
    key: str
    output: dict


class DevSpecRequest(BaseModel):
    """Input of activity ``write_dev_spec`` (``DeveloperActivities.write_dev_spec``)."""

    working_dir: str = Field(max_length=MAX_PATH_CHARS)
    orchestration_id: str = Field(min_length=1, max_length=255)
    attempt: int = Field(1, ge=1, description="The developer's pass: 1, then 2 after a rejection.")
    issue: Issue
    plan: PlanOutput | None = None
    plan_ref: str | None = Field(
        None, max_length=MAX_PATH_CHARS, description="The plan's file when it is kept by reference."
    )
    plan_sha256: str | None = Field(
        None, max_length=64, description="The digest the orchestration recorded for that plan."
    )
    review_ref: str | None = Field(
        None, max_length=MAX_PATH_CHARS, description="The review's file, kept by reference."
    )
    review_sha256: str | None = Field(None, max_length=64)
    review_comments: list[str] = Field(default_factory=list, max_length=MAX_DEV_TASKS)


class DevSpec(BaseModel):
    """Output of activity ``write_dev_spec``: the tasks.md to start
    ``spec_execution_v1`` with."""

    spec_path: str
    phases: int
    tasks: int
    from_plan: bool = Field(
        False, description="True when the plan's markdown is the tasks.md as written."
    )


class CodingAgentRequest(BaseModel):
    """Input of activity ``run_coding_agent``: which of the worker's coding agents to
    run, for which session. Never a command: the worker's list says what runs (a
    ``command`` in the input is ignored)."""

    agent: str = Field(
        min_length=1,
        max_length=80,
        description="A coding agent the worker lists (Settings.coding_agents), by name, or "
        "command_ref() of its command (a profile that spells the command out).",
    )
    working_dir: str = Field(max_length=MAX_PATH_CHARS)
    session_id: str = Field(min_length=1, max_length=255)
    prompt: str = Field("", max_length=256 * 1024)
    timeout_minutes: float = Field(60, gt=0, le=24 * 60)
    task_queue: str = Field(min_length=1, max_length=255)


class CodingAgentRun(BaseModel):
    """Output of activity ``run_coding_agent``. Says how the process ended, not whether
    the work is done: the session's status says that."""

    exit_code: int = Field(description="The exit status; -N when killed by signal N.")
    output_tail: str = Field(description="The last 16 KiB of stdout and stderr, redacted.")
    seconds: float
    timed_out: bool = False
