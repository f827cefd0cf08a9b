"""Task state's mechanics inside ``GatedSession``: the activities its messages need.

The board decides (``domain.tasks.board``, through ``SessionState``); this desk runs:

- a claim's **pre-analysis** steps, after the claim (atomic, in the update's first
  workflow task), as command checks on the verify queue, one after another so a later
  step can use an earlier one's output;
- a completion's **acceptance checks** (reading checks on the session worker where it
  sees the workspace, commands on the verify queue), then records the verdict once the
  task is checked again (a rollback or a block may have come in between);
- the **projection** of the board to ``.workflow/`` files: after every change, one at a
  time, by the ``project_task_files`` activity, which reads the board itself (the
  ``task_files`` query) so history keeps no copy of it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.task_files import TaskFileActivities
    from phasegate.domain.errors import SessionError, VerifyInvalid
    from phasegate.domain.session import tasking
    from phasegate.domain.session.state import SessionState
    from phasegate.domain.settings import verify_task_queue
    from phasegate.domain.tasks import steps
    from phasegate.domain.tasks.board import Projection
    from phasegate.domain.tasks.files import ProjectRequest, ProjectResult
    from phasegate.domain.tasks.messages import (
        AddSubtask,
        BlockTask,
        CompleteTask,
        StartTask,
        StepOutput,
        TaskResult,
    )
    from phasegate.domain.verify import CommandCheck, VerifyCheck, VerifyRequest, VerifyResult
    from phasegate.temporal import application_error
    from phasegate.workflows._checks import run_checks

__all__ = ["TaskDesk"]

_RETRY = RetryPolicy(maximum_attempts=2, non_retryable_error_types=[VerifyInvalid.code])
_PROJECT_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=30))
_STEP_TIMEOUT_SECONDS = 300.0

FLUSH_TIMEOUT = timedelta(minutes=2)


class Host(Protocol):
    """What the desk needs of the session workflow."""

    def _ready(self) -> SessionState: ...

    def _publish(self, *, defer_search_attributes: bool = False) -> None: ...

    _checks_here: bool


class TaskDesk:
    def __init__(self, host: Host) -> None:
        self._host = host
        self._force = False
        self._projecting = False

    # ---- messages --------------------------------------------------------

    async def start(self, msg: StartTask) -> TaskResult:
        state = self._host._ready()
        _raise(state.check_task(msg))
        phase = state.current.index
        result = state.tasks.apply_start(msg, phase, workflow.now(), [])
        state.updated_at = workflow.now()
        task = state.tasks.tasks[result.task.id]
        if not task.spec.pre_analysis or task.context:
            self._host._publish()
            return result
        task.preparing = True  # a completion or a second start waits for the steps
        try:
            outputs, failure, person = await self._pre_analysis(state, result.task.id)
        finally:
            task.preparing = False
        task = state.tasks.tasks[result.task.id]
        if task.status != "active" or task.claimed_by != msg.agent:
            return result  # blocked or rolled back meanwhile; the board says so
        if failure is None:
            task.context = outputs
            state.tasks.version += 1
            self._host._publish()
            return result.model_copy(update={"context": outputs})
        block = BlockTask(agent=msg.agent, task=task.spec.id, reason=failure[:2000])
        blocked = state.tasks.apply_block(block, phase, workflow.now(), needs_person=person)
        state.tasks.tasks[task.spec.id].context = outputs
        self._host._publish()
        return blocked.model_copy(
            update={"ok": False, "context": outputs, "note": f"not started: {failure}"}
        )

    async def complete(self, msg: CompleteTask) -> TaskResult:
        state = self._host._ready()
        _raise(state.check_task(msg))
        checks, lines = state.tasks.completion_checks(msg, state.ref.commands)
        verify = await self._checks(state, checks, f"task {msg.task}") if checks else []
        _raise(state.check_task(msg))  # a block, rollback or pause may have come meanwhile
        result = state.tasks.apply_complete(msg, state.current.index, workflow.now(), lines, verify)
        parent = state.tasks.tasks[msg.task].spec.parent
        if result.ok and parent is not None and state.tasks.container_due(parent):
            # The last subtask is done: the container's own criteria run now.
            summary = f"every subtask of {parent} is complete"
            whole = await self.complete(CompleteTask(agent=msg.agent, task=parent, summary=summary))
            note = f"{parent}: " + ("its criteria passed" if whole.ok else "its criteria failed")
            result = result.model_copy(
                update={
                    "note": note,
                    "criteria": [*result.criteria, *whole.criteria],
                    "verify": [*result.verify, *whole.verify],
                    "problems": whole.problems,
                    "phase_ready": whole.phase_ready,
                    "next_task": whole.next_task,
                }
            )
        state.updated_at = workflow.now()
        self._host._publish()
        return result

    def block(self, msg: BlockTask) -> TaskResult:
        state = self._host._ready()
        _raise(state.check_task(msg))
        result = state.tasks.apply_block(msg, state.current.index, workflow.now())
        self._host._publish()
        return result

    def add_subtask(self, msg: AddSubtask) -> TaskResult:
        state = self._host._ready()
        _raise(state.check_task(msg))
        result = state.tasks.apply_add_subtask(msg, state.current.index, workflow.now())
        self._host._publish()
        return result

    # ---- activities ------------------------------------------------------

    async def _checks(
        self, state: SessionState, checks: list[VerifyCheck], summary: str
    ) -> list[VerifyResult]:
        request = VerifyRequest(
            workspace=state.target,
            checks=checks,
            base_commit=state.ref.base_commit,
            session_id=workflow.info().workflow_id,
            target=state.target,
        )
        results, self._host._checks_here = await run_checks(
            request, here=self._host._checks_here, retry=_RETRY, summary=summary
        )
        return results

    async def _pre_analysis(
        self, state: SessionState, task_id: str
    ) -> tuple[list[StepOutput], str | None, bool]:
        """Run the task's steps in order. Returns (outputs, why it cannot start or None,
        whether that waits for a person)."""
        task = state.tasks.tasks[task_id].spec
        values = steps.task_values(task)
        outputs: list[StepOutput] = []
        for step in task.pre_analysis:
            if not step.command:  # an instruction for the agent, not a command
                outputs.append(StepOutput(step=step.step, ok=True, output=step.action[:4000]))
                continue
            ran: VerifyResult | None = None
            try:
                argv = steps.fill(steps.bound_argv(task, step, state.ref.commands), values)
            except steps.StepRefused as exc:
                note = str(exc)
            else:
                check = CommandCheck(
                    name=f"{task_id}:{step.step}"[:100],
                    kind="command",
                    argv=argv,
                    timeout_seconds=_STEP_TIMEOUT_SECONDS,
                )
                tries = 2 if step.on_error == "retry_once" else 1
                for _ in range(tries):
                    [ran] = await self._checks(state, [check], f"pre-analysis {step.step}")
                    if ran.passed:
                        break
                assert ran is not None
                note = "" if ran.passed else ran.message
            if ran is not None and ran.passed:
                if step.output_to:
                    values[step.output_to] = ran.excerpt
                outputs.append(
                    StepOutput(
                        step=step.step, output_to=step.output_to, ok=True, output=ran.excerpt
                    )
                )
                continue
            outputs.append(
                StepOutput(step=step.step, output_to=step.output_to, ok=False, note=note)
            )
            if step.on_error == "skip_optional":
                if step.output_to:
                    values[step.output_to] = ""
                continue
            person = step.on_error == "manual_intervention"
            return outputs, f"pre-analysis step '{step.step}' failed: {note}", person
        return outputs, None, False

    # ---- projection ------------------------------------------------------

    def projects(self) -> bool:
        return bool(self._host._ready().tasks.projection.folder)

    def force(self) -> None:
        self._force = True

    def pending(self) -> bool:
        board = self._host._ready().tasks
        return self._force or board.projection.version < board.version

    async def run(self) -> None:
        """Project after every change, one projection at a time (runs for the session)."""
        while True:
            await workflow.wait_condition(self.pending)
            await self.project_once()

    async def project_once(self) -> ProjectResult | None:
        state = self._host._ready()
        board = state.tasks
        self._force = False
        self._projecting = True
        first = not board.projection.hashes  # an imported folder's own files are replaced
        request = ProjectRequest(
            session_id=workflow.info().workflow_id,
            target=state.target,
            folder=board.projection.folder,
            version=board.version,
            hashes=dict(board.projection.hashes),
        )
        try:
            result = await workflow.execute_activity_method(
                TaskFileActivities.project,
                request,
                task_queue=verify_task_queue(workflow.info().task_queue),
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_PROJECT_RETRY,
                summary=f"project tasks to {board.projection.folder}",
            )
        except ActivityError as exc:
            board.projection.error = _cause(exc)[:2000]
            board.projection.version = request.version  # wait for the next change
            return None
        finally:
            self._projecting = False
        board.projection = Projection(
            folder=result.folder,
            version=max(result.version, request.version),
            hashes=result.hashes,
            edits=result.edits,
            projected_at=workflow.now(),
        )
        if result.edits or result.rebuilt:
            tasking.note_projection(state, result, workflow.now(), first=first)
        return result

    async def flush(self) -> None:
        """Wait (bounded) for the files to show the final state."""
        if not self.projects():
            return
        try:
            await workflow.wait_condition(
                lambda: not self.pending() and not self._projecting, timeout=FLUSH_TIMEOUT
            )
        except TimeoutError:
            pass


def _raise(problem: SessionError | None) -> None:
    """A refusal as the update's typed failure (the client shows message and hint)."""
    if problem is not None:
        raise application_error(problem, non_retryable=False)


def _cause(exc: ActivityError) -> str:
    cause = exc.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
