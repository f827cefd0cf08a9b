"""The developer step's decisions (pure): which attempt this is, what its session is
called, how a coding agent's last words are read, and what the session's end means.

``workflows/_developer_step.py`` starts the session and the coding agent and waits;
every judgement it needs is here, so it is unit-tested without a server:

- a step's attempt and its child session's id (``<orchestration>-dev-<replan>-<n>``);
- a ``REPLAN: why`` line the coding agent *ended* with is a request for a new plan
  (the same text anywhere else, e.g. an echoed issue body, is not);
- the step succeeds only when its gated session completed — the agent's exit code or
  its words never complete it — and every other end is a :class:`DeveloperFailed`
  that names what happened and where to look;
- :class:`DeveloperSessions`: the chain's sessions, which one is open, and which a
  replan replaced (nothing waits on those, whatever the session itself still says);
- the prompt a coding agent is given (:func:`agent_prompt`), in either mode.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from phasegate.domain.errors import DeveloperFailed
from phasegate.domain.orchestration.activities import DevSpecRequest
from phasegate.domain.orchestration.agents import DeveloperResult, PlanOutput
from phasegate.domain.orchestration.messages import DeveloperPrompt, DeveloperSession

if TYPE_CHECKING:
    from phasegate.domain.orchestration.state import OrchestrationState

__all__ = [
    "MAX_ORCHESTRATION_ID",
    "DeveloperSessions",
    "agent_prompt",
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


def agent_prompt(instructions: str, prompt: str, spec_path: str) -> str:
    """What the developer's coding agent is told: the library's instructions, the
    context, and where its session's spec is."""
    return f"{instructions}\n\n{prompt}\n\nThe spec of your session: {spec_path}\n"


class DeveloperSessions:
    """The developer sessions of an orchestration's chain, oldest first.

    A session is ``open`` while its step waits on it, then ``completed`` or ``failed``
    with its step; a replan ends the run that owned it, so every session not completed
    is ``replaced`` in the carry. The prompt of this run's sessions is kept (never
    carried: the next run's sessions are new).
    """

    def __init__(self, carried: list[DeveloperSession], ids: list[str]) -> None:
        known = {s.session_id: s.model_copy() for s in carried}
        # A carry written before sessions had records names only their ids: every one
        # of them belonged to an earlier run, which a replan ended.
        self.records = [
            known.get(sid) or DeveloperSession(session_id=sid, mode="", status="replaced")
            for sid in ids
        ]
        self.prompts: dict[str, str] = {}

    def open(self, session_id: str, *, mode: str, spec_path: str, prompt: str = "") -> None:
        self.records.append(DeveloperSession(session_id=session_id, mode=mode, spec_path=spec_path))
        if prompt:
            self.prompts[session_id] = prompt

    def set_prompt(self, session_id: str, prompt: str) -> None:
        self.prompts[session_id] = prompt

    def ended(self, session_id: str, *, completed: bool) -> None:
        """The step of ``session_id`` got its output (``completed``) or failed."""
        for record in self.records:
            if record.session_id == session_id and record.status == "open":
                record.status = "completed" if completed else "failed"

    def current(self) -> DeveloperSession | None:
        """The open session, if a developer step waits on one."""
        found = [r for r in self.records if r.status == "open"]
        return found[-1] if found else None

    def prompt(self) -> DeveloperPrompt:
        """The open session's prompt (empty when none is open or it was never rendered)."""
        record = self.current()
        if record is None:
            return DeveloperPrompt()
        return DeveloperPrompt(
            session_id=record.session_id,
            mode=record.mode,
            spec_path=record.spec_path,
            prompt=self.prompts.get(record.session_id, ""),
        )

    def carried(self) -> list[DeveloperSession]:
        """The records a replan carries: what is not completed was replaced."""
        return [
            r.model_copy(update={"status": "replaced"}) if r.status != "completed" else r
            for r in self.records
        ]
