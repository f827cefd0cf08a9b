"""Errors phasegate raises, each with a stable ``code`` and an actionable message.

Hierarchy::

    PhasegateError                     code: "phasegate_error"
    ├── DefinitionError                a workflow definition on disk is wrong
    │   ├── WorkflowNotFound           "workflow_not_found"
    │   ├── TemplateNotFound           "template_not_found"
    │   └── GateDefinitionError        "gate_definition_invalid"
    ├── SpecParseError                 "source_parse_failed" (tasks.md)
    ├── ExpressionError                "expression_invalid" (restricted evaluator)
    └── SessionError                   a request a session refuses
        ├── PhaseSequenceViolation     "phase_sequence_violation"
        ├── SessionNotActive           "session_not_active"
        ├── PayloadTooLarge            "payload_too_large"
        └── ApprovalRefused            "approval_refused"

Every error carries ``where`` (``file:line`` or a field path, when known) and
``hint`` (what to do next). ``str(err)`` renders all three on one line, which is
what the CLI prints. Activities turn these into non-retryable
``ApplicationError`` with ``type=code`` so clients can branch on the code.
"""

from __future__ import annotations

__all__ = [
    "ERROR_TYPES",
    "ApprovalRefused",
    "DefinitionError",
    "ExpressionError",
    "GateDefinitionError",
    "PayloadTooLarge",
    "PhaseSequenceViolation",
    "PhasegateError",
    "SessionError",
    "SessionNotActive",
    "SpecParseError",
    "TemplateNotFound",
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
        SessionError,
        PhaseSequenceViolation,
        SessionNotActive,
        PayloadTooLarge,
        ApprovalRefused,
    )
}
