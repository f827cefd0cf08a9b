"""Who wrote an input: the server's record of a run, never the input's own word.

Temporal authorises connections, not workflows. Any client (threat level 2) can run
a worker on a task queue of its own, and a workflow there can

- schedule phasegate's activities on phasegate's task queues with inputs it made up
  (``run_coding_agent`` with a shell command, ``render_phase`` of a future phase), and
- continue-as-new into ``GatedSession`` or ``Orchestration`` on phasegate's queue with
  carried state it made up; the new run has a ``continued_run_id``, no cron and no
  retry policy, and a first-run id its author knows.

Nothing a workflow puts in an input proves who it is. What the server records of a
run does: its workflow type and the task queue its workflow tasks go to, which only
the run's starter chose and only phasegate's worker polls. So a caller is trusted
when the server says it is one of phasegate's workflow types on phasegate's task
queue (``caller_verdict``); a carry is trusted when the server started this run as
the continue-as-new of a run of the same workflow type on the same queue, not as a
cron or retry run re-using a starter's input (``carry_verdict``). A rogue *worker* polling
phasegate's own queue is beyond this check (the README's threat model).

Pure: the activities in ``phasegate.activities.provenance`` ask the server and hand
the answers here.
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel, Field

from phasegate.domain.limits import MAX_ID_CHARS

__all__ = ["CarryCheck", "Provenance", "RunRecord", "caller_verdict", "carry_verdict"]


class RunRecord(BaseModel):
    """What the server records of one workflow run."""

    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str


class CarryCheck(BaseModel):
    """Input of ``ProvenanceActivities.check_carry`` (a local activity)."""

    workflow_type: str = Field(max_length=MAX_ID_CHARS)


class Provenance(BaseModel):
    """A verdict on an input's origin: trusted, or refused with the reason."""

    trusted: bool
    reason: str = ""


def caller_verdict(
    run: RunRecord | None, *, workflow_types: Collection[str], task_queue: str
) -> Provenance:
    """Whether the run that scheduled an activity is one of phasegate's own.

    Args:
        run: The server's record of the scheduling run (None: no such run, or the
            activity was not scheduled by a workflow at all).
        workflow_types: phasegate's workflow type names on this worker.
        task_queue: phasegate's main task queue (its workflows' queue).
    """
    if run is None:
        return Provenance(
            trusted=False, reason="it was not scheduled by a workflow run the server knows"
        )
    if run.workflow_type not in workflow_types or run.task_queue != task_queue:
        return Provenance(
            trusted=False,
            reason=f"it was scheduled by run {run.run_id} of workflow {run.workflow_id!r}, "
            f"a {run.workflow_type!r} on task queue {run.task_queue!r}; phasegate runs its "
            f"activities only for its own workflows ({', '.join(sorted(workflow_types))}) "
            f"on task queue {task_queue!r}",
        )
    return Provenance(trusted=True)


def carry_verdict(
    predecessor: RunRecord | None,
    *,
    workflow_type: str,
    task_queue: str,
    continued_as_new: bool,
) -> Provenance:
    """Whether carried state handed to a run came from that workflow's own chain.

    Args:
        predecessor: The server's record of the run this one continues (None: none).
        workflow_type: This run's workflow type.
        task_queue: This run's task queue (phasegate's).
        continued_as_new: The server started this run because its predecessor
            continued-as-new (not a cron or retry run, which re-use a starter's input,
            and not a first run).
    """
    if not continued_as_new:
        return Provenance(
            trusted=False,
            reason="the run is not a continue-as-new (a first, cron or retried run re-uses "
            "its starter's input)",
        )
    if predecessor is None:
        return Provenance(trusted=False, reason="the run continues no run the server knows")
    if predecessor.workflow_type != workflow_type or predecessor.task_queue != task_queue:
        return Provenance(
            trusted=False,
            reason=f"the run it continues ({predecessor.run_id}) is a "
            f"{predecessor.workflow_type!r} on task queue {predecessor.task_queue!r}, not a "
            f"{workflow_type!r} on {task_queue!r}: only a run's own continue-as-new hands "
            "state to the next",
        )
    return Provenance(trusted=True)
