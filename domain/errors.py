"""Errors phasegate raises, each with a stable ``code`` and an actionable message.

Hierarchy::

    PhasegateError                     code: "phasegate_error"
    ├── DefinitionError                a workflow definition on disk is wrong
    │   ├── WorkflowNotFound           "workflow_not_found"
    │   ├── TemplateNotFound           "template_not_found"
    │   ├── GateDefinitionError        "gate_definition_invalid"
    │   ├── GraphInvalid               "graph_invalid" (a step graph that cannot run)
    │   └── TaskFileInvalid            "task_file_invalid" (a .workflow task folder)
    ├── SpecParseError                 "source_parse_failed" (tasks.md)
    ├── ExpressionError                "expression_invalid" (restricted evaluator)
    ├── TemporalUnreachable            "temporal_unreachable" (no server at the address)
    └── SessionError                   a request a session refuses
        ├── PhaseSequenceViolation     "phase_sequence_violation"
        ├── SessionNotActive           "session_not_active"
        ├── PayloadTooLarge            "payload_too_large"
        ├── ApprovalRefused            "approval_refused"
        ├── SessionNotFound            "session_not_found" (no such session id)
        ├── StepSequenceViolation      "step_sequence_violation" (a graph's stale/foreign step)
        └── TaskRefused                "task_refused" (a task claim, completion, block, split)
    │   └── VerifyInvalid              "verify_invalid": a gate's checks cannot run as written
    OrchestrationError                 "orchestration_failed": a run cannot go on
    ├── ReplanRefused                  "replan_refused": no replan can be asked now
    ├── DeveloperInvalid               "developer_invalid": the worker cannot run the developer
    ├── DeveloperFailed                "developer_failed": the developer's session did not complete
    └── ModelError                     "model_call_failed": a model request failed
        ├── ModelUnusable              "model_unusable": the model cannot be used as configured
        ├── ModelAuth                  "model_auth": the provider refused the API key
        ├── ModelNotFound              "model_not_found": the provider has no such model
        ├── ModelQuota                 "model_quota": the provider's quota is used up
        ├── ModelUnreachable           "model_unreachable": the provider's server cannot be reached
        ├── AgentOutputInvalid         "agent_output_invalid": no valid answer after retries
        └── AgentOutputTooLarge        "agent_output_too_large": an answer over the size cap
    NotifyFailed                       "notify_failed": a webhook did not answer (retried)
    └── NotifyInvalid                  "notify_invalid": not a URL phasegate calls
    WorkspaceRefused                   "workspace_refused": a file phasegate would not write
    CallerRefused                      "caller_refused": an activity scheduled by a workflow
                                       that is not phasegate's own (threat level 2)
    GraphFailed                        "graph_failed": a step graph run ended failed
    ProvenanceUnavailable              "provenance_unavailable": the server could not say who
                                       asked (retried)

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
    "AgentOutputInvalid",
    "AgentOutputTooLarge",
    "ApprovalRefused",
    "CallerRefused",
    "DefinitionError",
    "DeveloperFailed",
    "DeveloperInvalid",
    "ExpressionError",
    "GateDefinitionError",
    "GraphFailed",
    "GraphInvalid",
    "ModelAuth",
    "ModelError",
    "ModelNotFound",
    "ModelQuota",
    "ModelUnreachable",
    "ModelUnusable",
    "NotifyFailed",
    "NotifyInvalid",
    "OrchestrationError",
    "PayloadTooLarge",
    "PhaseSequenceViolation",
    "PhasegateError",
    "ProvenanceUnavailable",
    "ReplanRefused",
    "SessionError",
    "SessionNotActive",
    "SessionNotFound",
    "SpecParseError",
    "StepSequenceViolation",
    "TaskFileInvalid",
    "TaskRefused",
    "TemplateNotFound",
    "TemporalUnreachable",
    "VerifyInvalid",
    "WorkflowNotFound",
    "WorkspaceRefused",
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


class StepSequenceViolation(SessionError):
    """A step graph was sent a report for a step it is not on (stale or foreign)."""

    code = "step_sequence_violation"


class TaskRefused(SessionError):
    """A task message the session refuses: claimed by someone else, dependencies not
    complete, a container, not in the current phase (``phasegate task list`` shows why)."""

    code = "task_refused"


class TaskFileInvalid(DefinitionError):
    """A ``.workflow/WFS-*`` folder or task JSON that breaks the format's rules."""

    code = "task_file_invalid"


class GraphFailed(PhasegateError):
    """A step graph run ended failed: an outcome with no edge, a cap reached, a handler
    result the step cannot take. ``phasegate graph show RUN`` shows the path."""

    code = "graph_failed"


class GraphInvalid(DefinitionError):
    """A step graph that cannot run as written (see ``phasegate graph check``)."""

    code = "graph_invalid"


class OrchestrationError(PhasegateError):
    """An orchestration cannot go on: a bad profile, a step out of replans, a rejection."""

    code = "orchestration_failed"


class ReplanRefused(OrchestrationError):
    """A person's replan request the orchestration cannot take now (finished, one
    already pending, none left)."""

    code = "replan_refused"


class VerifyInvalid(DefinitionError):
    """A gate's verify checks cannot run as written (a bad path, an unknown field)."""

    code = "verify_invalid"


class DeveloperInvalid(OrchestrationError):
    """The worker cannot run the developer step as configured (no such coding agent, no
    working directory): no plan can fix it."""

    code = "developer_invalid"


class DeveloperFailed(OrchestrationError):
    """The developer's gated session did not complete (the agent stopped, timed out, asked
    for a replan, or the id was taken): the planner may try again."""

    code = "developer_failed"


class ModelError(OrchestrationError):
    """A model request failed (the provider answered with an error, or not at all)."""

    code = "model_call_failed"


class ModelUnusable(ModelError):
    code = "model_unusable"


class ModelAuth(ModelError):
    code = "model_auth"


class ModelNotFound(ModelError):
    code = "model_not_found"


class ModelQuota(ModelError):
    code = "model_quota"


class ModelUnreachable(ModelError):
    """The model provider's server refused the connection or its host does not resolve:
    no plan can fix that, so the run ends at once, naming the URL."""

    code = "model_unreachable"


class AgentOutputInvalid(ModelError):
    code = "agent_output_invalid"


class AgentOutputTooLarge(ModelError):
    code = "agent_output_too_large"


class NotifyFailed(PhasegateError):
    """A webhook did not answer, or answered with an error (Temporal retries it)."""

    code = "notify_failed"


class NotifyInvalid(NotifyFailed):
    """Not a URL phasegate calls (only http and https)."""

    code = "notify_invalid"


class WorkspaceRefused(PhasegateError):
    """A file phasegate would not write or read: outside the working directory, through a
    link, not a regular file, or too large."""

    code = "workspace_refused"


class ProvenanceUnavailable(PhasegateError):
    """The server could not say which run asked (retried until it can)."""

    code = "provenance_unavailable"


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
        StepSequenceViolation,
        TaskRefused,
        TaskFileInvalid,
        GraphInvalid,
        GraphFailed,
        OrchestrationError,
        ReplanRefused,
        CallerRefused,
        VerifyInvalid,
        DeveloperInvalid,
        DeveloperFailed,
        ModelError,
        ModelUnusable,
        ModelAuth,
        ModelNotFound,
        ModelQuota,
        ModelUnreachable,
        AgentOutputInvalid,
        AgentOutputTooLarge,
        NotifyFailed,
        NotifyInvalid,
        WorkspaceRefused,
        ProvenanceUnavailable,
    )
}
