"""The developer step's decisions (pure): which attempt this is, what its session is
called, how a coding agent's last words are read, and what the session's end means.

``workflows/_developer_step.py`` starts the session and the coding agent and waits;
every judgement it needs is here, so it is unit-tested without a server:

- a step's attempt and its child session's id (``<orchestration>-dev-<replan>-<n>``);
- a ``REPLAN: why`` line the coding agent *ended* with is a request for a new plan
  (the same text anywhere else, e.g. an echoed issue body, is not);
- the step succeeds only when its gated session completed — the agent's exit code or
  its words never complete it — and every other end is a :class:`DeveloperFailed`
  that names what happened and where to look.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from phasegate.domain.errors import DeveloperFailed
from phasegate.domain.orchestration.activities import DevSpecRequest
from phasegate.domain.orchestration.agents import DeveloperResult, PlanOutput

if TYPE_CHECKING:
    from phasegate.domain.orchestration.state import OrchestrationState

__all__ = [
    "MAX_ORCHESTRATION_ID",
    "agent_stopped",
    "attempt_of",
    "id_problems",
    "replan_request",
    "session_id",
    "session_outcome",
    "session_taken",
    "spec_request",
    "superseded",
    "timed_out",
]

MAX_ORCHESTRATION_ID = 200  # its developer sessions are named after it
_REPLAN_LINE = re.compile(r"REPLAN:\s*(.+)")
_TAIL_SHOWN = 600  # characters of the agent's last output quoted in a failure


def attempt_of(key: str) -> int:
    """The developer's pass (1, 2, …) of the output key ``developer_<n>``."""
    return int(key.rsplit("_", 1)[1]) + 1


def spec_request(
    state: OrchestrationState, *, working_dir: str, orchestration_id: str, attempt: int
) -> DevSpecRequest:
    """What ``write_dev_spec`` writes the developer's spec from: the issue, the
    architect's plan (inline, or its file and digest when it travels by reference) and,
    after a rejecting review, its comments (likewise)."""
    architect = state.latest("architect")
    review = state.rejected_review()
    latest_review = state.latest("reviewer")
    inline_plan = architect is not None and bool(architect.output) and not architect.ref
    return DevSpecRequest(
        working_dir=working_dir,
        orchestration_id=orchestration_id,
        attempt=attempt,
        issue=state.issue,
        plan=PlanOutput.model_validate(architect.output) if architect and inline_plan else None,
        plan_ref=architect.ref if architect else None,
        plan_sha256=architect.sha256 if architect and architect.ref else None,
        review_comments=state.review_comments(),
        review_ref=review.ref if review else None,
        review_sha256=latest_review.sha256 if latest_review and latest_review.ref else None,
    )


def id_problems(orchestration_id: str) -> list[str]:
    """Why ``orchestration_id`` cannot name an orchestration ([]: it can)."""
    if len(orchestration_id) <= MAX_ORCHESTRATION_ID:
        return []
    too_long = (
        f"the orchestration id is longer than {MAX_ORCHESTRATION_ID} characters "
        "(its developer sessions are named after it): pick a shorter --id"
    )
    return [too_long]


def session_id(orchestration_id: str, replanned: int, attempt: int) -> str:
    """The child session's id: unique per run of the chain and per pass."""
    return f"{orchestration_id}-dev-{replanned}-{attempt}"


def replan_request(output_tail: str) -> str | None:
    """The reason of a ``REPLAN: why`` line the coding agent ended its output with."""
    lines = [line.strip() for line in output_tail.splitlines() if line.strip()]
    found = _REPLAN_LINE.fullmatch(lines[-1]) if lines else None
    return found.group(1).strip()[:1000] if found else None


def session_outcome(
    child_id: str, status: str, completed: int, total: int, replan: str | None
) -> DeveloperResult:
    """The step's output when the session ended ``completed``.

    Raises:
        DeveloperFailed: it ended any other way (abandoned, failed).
    """
    if status != "completed":
        raise DeveloperFailed(
            f"the developer's gated session {child_id} ended {status} after {completed} of "
            f"{total} phases",
            hint=f"see `phasegate status {child_id}`",
        )
    return DeveloperResult(
        session_id=child_id,
        completed=True,
        phases_completed=completed,
        total_phases=total,
        summary=f"gated session {child_id}: {status}, {completed}/{total} phases passed "
        "their gates",
        confidence=1.0,
        replan_request=replan,
    )


def session_taken(child_id: str) -> DeveloperFailed:
    return DeveloperFailed(
        f"the developer session id {child_id} is already taken by another workflow",
        hint="start the orchestration under another --id",
    )


def timed_out(child_id: str, minutes: float) -> DeveloperFailed:
    return DeveloperFailed(
        f"no agent completed the developer session {child_id} within {minutes:g} minutes "
        "(developer.timeout_minutes)",
        hint=f"see `phasegate status {child_id}`; raise developer.timeout_minutes in the profile",
    )


def superseded(child_id: str) -> DeveloperFailed:
    return DeveloperFailed(f"superseded by a replan while session {child_id} was open")


def agent_stopped(
    child_id: str, *, exit_code: int, timed_out: bool, asked: str | None, output_tail: str
) -> DeveloperFailed:
    """Why the step failed when the coding agent ended and its session had not completed."""
    if asked:
        return DeveloperFailed(f"the coding agent asked for a replan: {asked}")
    tail = output_tail[-_TAIL_SHOWN:].strip()
    stopped = "timed out" if timed_out else f"exited (code {exit_code})"
    return DeveloperFailed(
        f"the coding agent {stopped} but its gated session {child_id} has not completed: "
        f"the session refused to advance (see `phasegate status {child_id}`); the agent's "
        f"last output: {tail or '(none)'}",
    )
