"""What a session's own activities take and return: the load's plan, renders and the
reading checks' local activity. Internal to phasegate's workers (no client sends them),
plain data recorded in the session's history."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from phasegate.domain.limits import MAX_AHEAD_BYTES
from phasegate.domain.session.messages import DefinitionRef, PhaseDefinition, SessionOptions
from phasegate.domain.signing import ApproverKey
from phasegate.domain.verify import VerifyReport, VerifyRequest

__all__ = [
    "PHASE_ATTRIBUTE_SECONDS",
    "SESSION_ENGINE",
    "ChecksHereRequest",
    "ChecksHereResult",
    "LoadSessionRequest",
    "NotifyRequest",
    "PhasesAhead",
    "RenderPhaseRequest",
    "SessionPlan",
]


class LoadSessionRequest(BaseModel):
    workflow_type: str
    target: str = ""
    options: SessionOptions = Field(default_factory=SessionOptions)


class RenderPhaseRequest(BaseModel):
    ref: DefinitionRef
    index: int
    ahead_bytes: int = Field(
        0,
        ge=0,
        le=MAX_AHEAD_BYTES,
        description="Also render the phases after ``index``, in order, while they fit in "
        "this many bytes of JSON with it (0: phase ``index`` only; SessionPlan.ahead_bytes).",
    )


class PhasesAhead(BaseModel):
    """Result of ``render_phases``: phase ``RenderPhaseRequest.index`` and the phases after
    it that fit the request's ``ahead_bytes``, in order (never empty)."""

    phases: list[PhaseDefinition]


class ChecksHereRequest(BaseModel):
    """The session worker's local activity (``check_and_render_here``): a gate's reading
    checks and, when they all pass, the phase the session then enters."""

    checks: VerifyRequest
    render: RenderPhaseRequest | None = Field(
        None, description="Rendered only when every check passed (the checkpoint advances)."
    )


class ChecksHereResult(BaseModel):
    report: VerifyReport
    next_phase: PhaseDefinition | None = None


class NotifyRequest(BaseModel):
    """A webhook call: POST ``payload`` as JSON to ``url``."""

    url: str
    payload: dict[str, Any]


# What a session loaded by this code runs (SessionPlan.engine, kept in SessionState): from
# 1 on, the paths older code reached through ``workflow.patched`` are taken without it;
# from 2 on, a change of the phase alone reaches search attributes at most every
# PHASE_ATTRIBUTE_SECONDS (workflows/_kit.Publisher); from 3 on, always by the timer, with
# no decision reading the clock (Publisher.attributes' ``by_timer``); from 4 on, a write
# that leaves the timer nothing to write cancels it, and the run's close writes what is
# held at once and cancels it first (``cancels``, ``final``): a timer firing during the
# closing workflow task no longer makes the server refuse the close (UnhandledCommand).
SESSION_ENGINE = 4
PHASE_ATTRIBUTE_SECONDS = 10.0  # decides timers in engine-2 histories: change it at engine 3


class SessionPlan(BaseModel):
    name: str
    description: str = ""
    ref: DefinitionRef
    first_phase: PhaseDefinition
    approver_keys: list[ApproverKey] = Field(
        default_factory=list, description="Signed approvers named by the workflow definition."
    )
    unsigned_approvals: bool = Field(
        True, description="Whether this deployment accepts unsigned (name-only) approvals."
    )
    operator_keys: list[ApproverKey] = Field(default_factory=list)  # controls (session_controls)
    unsigned_controls: bool = Field(
        True, description="Whether this deployment accepts unsigned (name-only) controls."
    )
    prefetch: bool = Field(True, description="False: the deployment turns prefetch off.")
    sealed_prefetch: bool = Field(False, description="The worker seals prefetched phases.")
    ahead_bytes: int = Field(
        0,
        ge=0,
        le=MAX_AHEAD_BYTES,
        description="A prefetch also renders the phases after the next while they fit in "
        "this many bytes (0: the next phase only). The deployment's call "
        "(PHASEGATE_PREFETCH_AHEAD): each is in history, sealed where the worker seals.",
    )
    task_folder: str | None = Field(
        None,
        description="The .workflow/WFS-* folder (relative to the target) the task board is "
        "projected to; None: no task files.",
    )
    engine: int = Field(0, description="SESSION_ENGINE of the code that loaded the session.")

    def options_for(self, options: SessionOptions) -> SessionOptions:
        """The session's options as this deployment allows them (prefetch may be off)."""
        return options if self.prefetch else options.model_copy(update={"prefetch": False})
