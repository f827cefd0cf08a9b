"""Read-side views of a :class:`~phasegate.domain.session.SessionState`.

What the ``status``, ``phase`` and ``task`` queries and a checkpoint's answer
show. Every function only reads the state; which phase is readable at all is
decided by ``SessionState.readable`` (a future phase gets a
:class:`SequenceViolation`, never its content).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from phasegate.domain.errors import SessionError
from phasegate.domain.evidence_schema import field_json_schema, gate_json_schema
from phasegate.domain.session import approvals as session_approvals
from phasegate.domain.session.bounds import TASKS_PAGE, VIEW_EVIDENCE_BYTES, bounded_artifacts
from phasegate.domain.session.messages import (
    GateField,
    GateView,
    PhaseArtifact,
    PhaseContent,
    PhaseDefinition,
    PhaseView,
    SequenceViolation,
    SessionSummary,
    SessionView,
    TaskSummary,
    TaskView,
)

if TYPE_CHECKING:
    from phasegate.domain.session.state import SessionState

AUDIT_IN_VIEW = 100  # latest audit entries (and superseded artifacts) a status shows

__all__ = [
    "artifact",
    "content",
    "details_markdown",
    "phase_view",
    "status_view",
    "summary",
    "task_summaries",
    "task_view",
    "violation",
]


def violation(state: SessionState, requested: int, what: str = "phase") -> SequenceViolation:
    """The refusal any read of a not-yet-reached phase gets (no future content)."""
    return SequenceViolation(
        message=(
            f"{what} {requested} is not available: the session is on phase "
            f"{state.current.index} ({state.current.index + 1} of {state.total_phases}). "
            "Complete the current phase (submit its evidence: `phasegate submit`, or the "
            "submit_checkpoint tool) to unlock the next one."
        ),
        requested_phase=requested,
        current_phase=state.current.index,
        total_phases=state.total_phases,
        completed_phases=[c.phase for c in state.phases.completed],
        current_content=state.current.content,
    )


def status_view(state: SessionState) -> SessionView:
    """The answer to the ``status`` query."""
    last = state.attempts.current[-1] if state.attempts.current else None
    return SessionView(
        workflow_type=state.workflow_type,
        name=state.name,
        target=state.target,
        status=state.status,
        current_phase=state.current.index,
        current_phase_name=state.current.name,
        total_phases=state.total_phases,
        completed_phases=list(state.phases.completed),
        attempts=state.attempts.count,
        last_problems=list(last.problems) if last and not last.passed else [],
        approvals=state.book.records[-AUDIT_IN_VIEW:],
        awaiting_approval_from=(
            state.allowed_approvers() or ["any approver"] if state.awaiting_approval else []
        ),
        approval_due_at=state.book.due_at if state.awaiting_approval else None,
        audit=state.audit[-AUDIT_IN_VIEW:],
        audit_total=len(state.audit) if len(state.audit) > AUDIT_IN_VIEW else None,
        superseded=list(
            bounded_artifacts(
                {str(n): a for n, a in enumerate(state.phases.superseded[-AUDIT_IN_VIEW:])},
                VIEW_EVIDENCE_BYTES // 2,
            ).values()
        ),
        attempt_log=state.attempts.earlier[-50:],
        feedback=state.feedback,
        artifacts={str(k): sorted(a.evidence) for k, a in sorted(state.phases.artifacts.items())},
        last_signal_error=state.last_signal_error,
        started_at=state.started_at,
        updated_at=state.updated_at,
        run_chain=list(state.run_chain),
        approval_binding=session_approvals.approval_binding(state),
    )


def phase_view(
    state: SessionState, index: int, tasks_offset: int = 0
) -> PhaseView | SequenceViolation:
    """The answer to the ``phase`` query: the current or a completed phase, with one
    page of its tasks and earlier artifacts' evidence within the view budget."""
    phase = state.readable(index)
    if phase is None:
        return violation(state, index)
    which: Literal["current", "completed"] = (
        "completed" if index in state.phases.past else "current"
    )
    # Artifacts of earlier phases (and, for a completed phase, its own).
    earlier = {
        str(k): a
        for k, a in sorted(state.phases.artifacts.items())
        if k < index or (which == "completed" and k == index)
    }
    return PhaseView(
        phase=phase.index,
        label=phase.label,
        name=phase.name,
        state=which,
        content=phase.content,
        tasks=task_summaries(phase)[tasks_offset : tasks_offset + TASKS_PAGE],
        tasks_total=len(phase.tasks) if len(phase.tasks) > TASKS_PAGE else None,
        gate=_gate_view(phase, state.allowed_approvers() if which == "current" else []),
        artifacts=bounded_artifacts(earlier),
        context=phase.context,
        example_evidence=_example(phase),
    )


def task_view(state: SessionState, index: int, task: str) -> TaskView | SequenceViolation:
    """The answer to the ``task`` query.

    Raises:
        SessionError: the (readable) phase has no such task.
    """
    phase = state.readable(index)
    if phase is None:
        return violation(state, index, "task of phase")
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


def content(state: SessionState) -> PhaseContent:
    """The current phase as a checkpoint's answer carries it."""
    p = state.current
    return PhaseContent(
        phase=p.index, label=p.label, name=p.name, content=p.content, tasks=task_summaries(p)
    )


def summary(state: SessionState) -> SessionSummary:
    """The result of a finished run."""
    return SessionSummary(
        workflow_type=state.workflow_type,
        status=state.status,
        completed_phases=[c.phase for c in state.phases.completed],
        total_phases=state.total_phases,
        artifacts=bounded_artifacts({str(k): a for k, a in sorted(state.phases.artifacts.items())}),
    )


def artifact(state: SessionState, index: int) -> PhaseArtifact | SequenceViolation:
    """The answer to the ``artifact`` query: one completed phase's artifact, whole.

    Its evidence is here unless it was compacted out of a long session's state; then
    ``recorded_in_run`` names the run whose history holds the submission.

    Raises:
        SessionError: the phase is readable but has no artifact (not completed).
    """
    if state.readable(index) is None:
        return violation(state, index, "artifact of phase")
    found = state.phases.artifacts.get(index)
    if found is None:
        raise SessionError(
            f"phase {index} has no artifact: it is not completed",
            hint="artifacts are recorded when a phase's checkpoint passes and it advances",
        )
    return found


def task_summaries(phase: PhaseDefinition) -> list[TaskSummary]:
    return [
        TaskSummary(id=t.id, number=t.number, name=t.name, status=t.status, optional=t.optional)
        for t in phase.tasks
    ]


def _gate_view(phase: PhaseDefinition, approvers: list[str]) -> GateView:
    gate = phase.gate
    return GateView(
        fields={
            name: GateField(
                type=spec.type,
                required=spec.required,
                description=spec.description,
                json_schema=field_json_schema(spec, gate.validators),
            )
            for name, spec in gate.fields.items()
        },
        requires_approval=phase.requires_approval or gate.approval.required,
        approvers=approvers or list(phase.approvers or gate.approval.approvers),
        strict=gate.strict,
        json_schema=gate_json_schema(gate),
    )


def _example(phase: PhaseDefinition) -> dict[str, Any] | None:
    """The phase's documented evidence example as an object (None when it has none)."""
    if not phase.example_evidence:
        return None
    try:
        data = json.loads(phase.example_evidence)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def details_markdown(state: SessionState) -> str:
    """The Web UI's current details of a session (markdown): where it is, what it waits for."""
    p = state.current
    waits = {
        "active": "checkpoint evidence from the agent",
        "awaiting_approval": "approval by "
        + (", ".join(state.allowed_approvers()) or "an approver"),
        "approval_overdue": "an OVERDUE approval by "
        + (", ".join(state.allowed_approvers()) or "an approver"),
        "paused": "a person to resume the session",
        "completed": "nothing: all phases are complete",
        "abandoned": "nothing: the session was abandoned",
        "starting": "the definition to load",
    }[state.status]
    lines = [
        (
            f"**{state.name or state.workflow_type}** — phase {p.index} ({p.index + 1} of "
            f"{state.total_phases}): {p.name}"
        ),
        f"- status: `{state.status}`; waiting for {waits}",
        f"- attempts on this phase: {state.attempts.count}",
    ]
    last = state.attempts.current[-1] if state.attempts.current else None
    if last and not last.passed:
        lines.append("- last problems:")
        lines += [f"  - `{pr.field}`: {pr.message}" for pr in last.problems[:5]]
    if state.feedback:
        lines.append(f"- reviewer feedback: {state.feedback}")
    return "\n".join(lines)
