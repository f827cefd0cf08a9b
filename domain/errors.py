"""Errors phasegate raises, each with a stable ``code`` and an actionable message.

Hierarchy::

    PhasegateError                     code: "phasegate_error"
    ├── DefinitionError                a workflow definition on disk is wrong
    │   ├── WorkflowNotFound           "workflow_not_found"
    │   ├── TemplateNotFound           "template_not_found"
    │   └── GateDefinitionError        "gate_definition_invalid"
    ├── SpecParseError                 "source_parse_failed" (tasks.md)
    ├── ExpressionError                "expression_invalid" (restricted evaluator)
    ├── TemporalUnreachable            "temporal_unreachable" (no server at the address)
    └── SessionError                   a request a session refuses
        ├── PhaseSequenceViolation     "phase_sequence_violation"
        ├── SessionNotActive           "session_not_active"
        ├── PayloadTooLarge            "payload_too_large"
        ├── ApprovalRefused            "approval_refused"
        └── SessionNotFound            "session_not_found" (no such session id)
    OrchestrationError                 "orchestration_failed": a run cannot go on
    └── ReplanRefused                  "replan_refused": no replan can be asked now
    CallerRefused                      "caller_refused": an activity scheduled by a workflow
                                       that is not phasegate's own (threat level 2)

Every error carries ``where`` (``file:line`` or a field path, when known) and
``hint`` (what to do next). ``str(err)`` renders all three on one line, which is
what the CLI prints. ``phasegate.temporal.application_error`` turns one into a
non-retryable ``ApplicationError`` with ``type=code`` (workflows and activities),
and ``phasegate.temporal.phasegate_error`` turns a Temporal failure back into the
error it carries (clients), so callers branch on ``err.code``.
"""

from __future__ import annotations

__all__ = [
    "ERROR_TYPES",
    "ApprovalRefused",
    "CallerRefused",
    "DefinitionError",
    "ExpressionError",
    "GateDefinitionError",
    "OrchestrationError",
    "PayloadTooLarge",
    "PhaseSequenceViolation",
    "PhasegateError",
    "ReplanRefused",
    "SessionError",
    "SessionNotActive",
    "SessionNotFound",
    "SpecParseError",
    "TemplateNotFound",
    "TemporalUnreachable",
    "WorkflowNotFound",
]


class PhasegateError(Exception):
    """Base of every phasegate error.

    Args:
        message: What was wrong, in one sentence.
        where: ``path:line`` or a field path, when known.
        hint: What the reader should do next.
    """

    code = "phasegate_error"

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f" (hint: {self.hint})"
        return text

    def details(self) -> dict[str, str | None]:
        """The error as plain data, for ``ApplicationError.details``."""
        return {"code": self.code, "message": self.message, "where": self.where, "hint": self.hint}


class DefinitionError(PhasegateError):
    code = "definition_invalid"


class WorkflowNotFound(DefinitionError):
    code = "workflow_not_found"


class TemplateNotFound(DefinitionError):
    code = "template_not_found"


class GateDefinitionError(DefinitionError):
    code = "gate_definition_invalid"


class SpecParseError(PhasegateError):
    """tasks.md could not be turned into phases. ``line`` is 1-based when known."""

    code = "source_parse_failed"

    def __init__(
        self,
        message: str,
        *,
        source: str = "tasks.md",
        line: int | None = None,
        hint: str | None = None,
        where: str | None = None,
    ):
        if where is None:
            where = f"{source}:{line}" if line is not None else source
        super().__init__(message, where=where, hint=hint)
        self.source = source
        self.line = line


class ExpressionError(PhasegateError):
    code = "expression_invalid"


class TemporalUnreachable(PhasegateError):
    """No Temporal server answers at the configured address (CLI, MCP and API alike)."""

    code = "temporal_unreachable"


class SessionError(PhasegateError):
    code = "session_error"


class PhaseSequenceViolation(SessionError):
    code = "phase_sequence_violation"


class SessionNotActive(SessionError):
    code = "session_not_active"


class PayloadTooLarge(SessionError):
    code = "payload_too_large"


class ApprovalRefused(SessionError):
    code = "approval_refused"


class SessionNotFound(SessionError):
    code = "session_not_found"


class OrchestrationError(PhasegateError):
    """An orchestration cannot go on: a bad profile, a step out of replans, a rejection."""

    code = "orchestration_failed"


class ReplanRefused(OrchestrationError):
    """A person's replan request the orchestration cannot take now (finished, one
    already pending, none left)."""

    code = "replan_refused"


class CallerRefused(PhasegateError):
    """An activity was scheduled by a workflow run that is not one of phasegate's own
    workflow types on phasegate's own task queue (any client can run a worker of its own
    whose workflows schedule phasegate's activities)."""

    code = "caller_refused"


ERROR_TYPES: dict[str, type[PhasegateError]] = {
    cls.code: cls
    for cls in (
        PhasegateError,
        DefinitionError,
        WorkflowNotFound,
        TemplateNotFound,
        GateDefinitionError,
        SpecParseError,
        ExpressionError,
        TemporalUnreachable,
        SessionError,
        PhaseSequenceViolation,
        SessionNotActive,
        PayloadTooLarge,
        ApprovalRefused,
        SessionNotFound,
        OrchestrationError,
        ReplanRefused,
        CallerRefused,
    )
}
