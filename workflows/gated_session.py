"""``GatedSession``: one gated session, one workflow.

Thin on purpose: every decision is made by ``domain.session.SessionState``;
this class maps Temporal messages onto it, runs the two definition activities,
keeps search attributes and Web UI details current, and continues-as-new when
history grows. The public contract is in ARCHITECTURE.md.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from phasegate.activities._verify_local import LocalChecks
    from phasegate.activities.definitions import DefinitionActivities
    from phasegate.activities.verify import VerifyActivities
    from phasegate.domain.errors import (
        PhasegateError,
        SessionError,
        SessionNotActive,
        VerifyInvalid,
    )
    from phasegate.domain.session.messages import (
        ApprovalDecision,
        CheckpointResult,
        CheckpointSubmission,
        ControlRequest,
        ControlResult,
        CurrentView,
        PhaseArtifact,
        PhaseDefinition,
        PhaseQuery,
        PhaseView,
        SequenceViolation,
        SessionSummary,
        SessionView,
        StartSession,
        TaskQuery,
        TaskView,
    )
    from phasegate.domain.session.plan import (
        SESSION_ENGINE,
        ChecksHereRequest,
        LoadSessionRequest,
        RenderPhaseRequest,
        SessionPlan,
    )
    from phasegate.domain.session.state import (
        DEADLINE_ACTOR,
        ApprovalBook,
        PhaseLedger,
        SessionState,
    )
    from phasegate.domain.session.tasking import files_source
    from phasegate.domain.settings import verify_task_queue
    from phasegate.domain.tasks.files import ProjectResult, TaskFilesSource
    from phasegate.domain.tasks.messages import (
        AddSubtask,
        BlockTask,
        BoardQuery,
        BoardView,
        CompleteTask,
        StartTask,
        TaskResult,
    )
    from phasegate.domain.verify import VerifyReport, VerifyResult
    from phasegate.domain.verify_contain import checked_report
    from phasegate.temporal import application_error
    from phasegate.workflows._kit import CarryGate, check, not_ready, refuse
    from phasegate.workflows._metrics import advanced
    from phasegate.workflows._session_deadlines import Deadlines
    from phasegate.workflows._session_patches import (
        CHECKS_HERE,
        FIRST_PREFETCH_HERE,
        LOAD_HERE,
        RENDER_WITH_CHECKS,
        RENDER_WITH_CHECKS_UNPREFETCHED,
        SIGNAL_RETIRED,
        SIGNS_EVIDENCE,
        patched,
    )
    from phasegate.workflows._session_prefetch import Prefetch, render_now
    from phasegate.workflows._session_tasks import TaskDesk
    from phasegate.workflows._session_visibility import SessionVisibility

__all__ = ["DEADLINE_ACTOR", "GatedSession"]

_VERIFY_RETRY = RetryPolicy(maximum_attempts=2, non_retryable_error_types=[VerifyInvalid.code])
_RENDER_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=["definition_invalid"])


# A start input that fails validation (e.g. an oversized option) fails the session with
# the reason, instead of failing its workflow task again every few seconds.
@workflow.defn(failure_exception_types=[ValidationError])
class GatedSession:
    @workflow.init
    def __init__(self, start: StartSession) -> None:
        # Restored here, not in run(): after continue-as-new, updates that arrive in
        # the first workflow task are validated before run() starts.
        self._state: SessionState | None = None
        # Carried state is trusted only from this workflow's own continue-as-new, as the
        # server records it (workflows._kit): a client or a foreign workflow handing a
        # session made-up `carried` state gets a failed start.
        self._carry = CarryGate(start.carried)
        if self._carry.legacy is not None:  # a history from before the proof replays
            self._restore(self._carry.legacy)
        self._lock = asyncio.Lock()
        self._messages_this_run = 0
        # Background render of the next phase (see SessionOptions.prefetch). Private:
        # no query, result or error ever reads it.
        self._prefetch = Prefetch()
        self._visibility = SessionVisibility(self)
        self._deadlines = Deadlines(self)
        self._tasks = TaskDesk(self)
        self._verifying = False
        # Until this run's worker answers that it runs no reading checks itself.
        self._checks_here = True
        # The phase the checks' local activity rendered, once they passed.
        self._checked_next: PhaseDefinition | None = None

    # ---- run -----------------------------------------------------------

    async def _load(self, start: StartSession) -> SessionPlan:
        """The session's plan, loaded on this worker (a local activity: no task-queue round
        trip and no second workflow task before the session is ready, and no other poller
        of the task queue can answer it), or on the task queue in histories from before."""
        req = LoadSessionRequest(
            workflow_type=start.workflow_type, target=start.target, options=start.options
        )
        if workflow.patched(LOAD_HERE):
            return await workflow.execute_local_activity_method(
                DefinitionActivities.load_session,
                req,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=_RENDER_RETRY,
            )
        return await workflow.execute_activity_method(
            DefinitionActivities.load_session,
            req,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=_RENDER_RETRY,
        )

    def _restore(self, carried: object) -> None:
        self._state = SessionState.from_carry(carried, workflow.info().run_id)

    def _refuse_newer_engine(self) -> None:
        """A run carried from a newer worker (its engine above this code's) fails its
        workflow task on this worker, retried until a worker that knows its engine takes
        it: replaying it here would not give the commands it recorded."""
        if self._state is not None and self._state.engine > SESSION_ENGINE:
            raise RuntimeError(
                f"this session runs engine {self._state.engine}, this worker only knows up "
                f"to {SESSION_ENGINE}: upgrade phasegate on this worker (`phasegate worker`) "
                "or stop it; a newer worker takes the session"
            )

    @workflow.run
    async def run(self, start: StartSession) -> SessionSummary:
        carried = await self._carry.proven()
        if carried is not None:
            self._restore(carried)
        if self._carry.refusal:
            raise application_error(
                SessionError(
                    "a session cannot be started with carried state: only its own "
                    f"continue-as-new hands state from one run to the next ({self._carry.refusal})",
                    where="carried",
                    hint="start sessions with `phasegate start` (or StartSession without "
                    "`carried`)",
                )
            )
        self._refuse_newer_engine()
        if self._state is None:
            plan = await self._load(start)
            now = workflow.now()
            self._state = SessionState(
                workflow_type=start.workflow_type,
                name=plan.name,
                description=plan.description,
                target=start.target,
                options=plan.options_for(start.options),
                sealed_prefetch=plan.sealed_prefetch,
                ahead_bytes=plan.ahead_bytes,
                engine=plan.engine,
                ref=plan.ref,
                phases=PhaseLedger(current=plan.first_phase),
                started_at=now,
                updated_at=now,
                # Who may approve and control is the deployment's and the definition's
                # call; the starter's options can only narrow it (domain.trust).
                book=ApprovalBook(
                    approver_keys=plan.approver_keys,
                    unsigned_approvals=plan.unsigned_approvals,
                    operator_keys=plan.operator_keys,
                    unsigned_controls=plan.unsigned_controls,
                    signs_evidence=plan.engine >= 1 or workflow.patched(SIGNS_EVIDENCE),
                ),
            )
            self._state.note_run(workflow.info().run_id)
            self._state.enter_current_tasks(now)
            self._state.tasks.projection.folder = plan.task_folder or ""
        self._publish()
        self._start_prefetch(first=True)
        self._deadlines.arm()
        state = self._state
        if self._tasks.projects():
            asyncio.create_task(self._tasks.run())
        while True:
            await workflow.wait_condition(
                lambda: state.finished or self._should_continue_as_new() or self._visibility.due()
            )
            if state.finished or self._should_continue_as_new():
                break
            self._publish()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if state.finished:  # a continued run projects what this one did not get to
            await self._tasks.flush()
        await self._visibility.close(state)
        if not state.finished:
            workflow.continue_as_new(
                StartSession(
                    workflow_type=start.workflow_type,
                    target=start.target,
                    options=start.options,
                    carried=state.carry(),
                )
            )
        return state.summary()

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return self._ready().continue_as_new_due(
            suggested=info.is_continue_as_new_suggested(),
            events=info.get_current_history_length(),
            messages=self._messages_this_run,
        )

    # ---- checkpoint ----------------------------------------------------

    @workflow.update
    async def submit_checkpoint(self, sub: CheckpointSubmission) -> CheckpointResult:
        self._messages_this_run += 1
        try:
            return await self._checkpoint(sub, "update")
        except PhasegateError as exc:
            raise application_error(exc, non_retryable=False) from None

    @submit_checkpoint.validator
    def _validate_checkpoint(self, sub: CheckpointSubmission) -> None:
        check(self._ready().check_submission(sub))
        if self._verifying and sub.submission_id not in self._ready().answers:
            # Refused, not queued: waiting submissions would hold Temporal's few in-flight
            # update slots for the length of a test run and lock out a person's controls.
            raise refuse(
                SessionNotActive(
                    "a checkpoint of this phase is being verified against the workspace; "
                    "wait for its result",
                    hint="submit again once `phasegate status SESSION` shows the result",
                )
            )

    @workflow.signal
    async def checkpoint(self, sub: CheckpointSubmission) -> None:
        """Retired (a signal lands in history before anything can refuse it): dropped, with
        a note, except in sessions from before (their histories replay). Fire-and-forget
        clients use the update, waiting only for acceptance (``submit_nowait``)."""
        self._messages_this_run += 1
        if patched(self._state, SIGNAL_RETIRED):
            if self._state is not None:
                self._state.last_signal_error = (
                    "checkpoint signals are not accepted: submit with `phasegate submit` "
                    "(MCP: the submit_checkpoint tool)"
                )
            return
        try:
            await self._checkpoint(sub, "signal")
        except PhasegateError as exc:
            assert self._state is not None
            self._state.last_signal_error = str(exc)
            self._publish()

    async def _checkpoint(
        self, sub: CheckpointSubmission, via: Literal["update", "signal"]
    ) -> CheckpointResult:
        if self._state is None:  # an update that raced the definition load
            await workflow.wait_condition(lambda: self._state is not None)
        state = self._state
        assert state is not None
        async with self._lock:
            if sub.submission_id and sub.submission_id in state.answers:
                return state.repeat(sub.submission_id)
            # Re-check under the lock: a concurrent submission may have advanced.
            problem = state.check_submission(sub)
            if problem is not None:
                raise problem
            evaluation = state.evaluate(sub)
            verify = await self._verify(sub) if state.needs_verify(evaluation) else []
            result, advance = state.apply_submission(sub, workflow.now(), via, evaluation, verify)
            next_phase = await self._next_phase() if advance else None
            result = state.finish_submission(sub, result, next_phase, workflow.now())
            if advance:
                advanced("checkpoint")
                self._start_prefetch()
            self._deadlines.arm()
            # After an advance the search attributes ride on the prefetch's workflow task,
            # keeping the advance's own task (and so its answer) one command lighter.
            self._publish(defer_search_attributes=advance)
            return result

    async def _verify(self, sub: CheckpointSubmission) -> list[VerifyResult]:
        """Run the gate's workspace checks; a check that cannot run is a failed check.

        Checks that only read the workspace run as a local activity of this worker when
        it runs them (``LocalChecks``: it sees the workspace as the verify worker does);
        commands, and every check where it does not, go to the verify task queue.
        """
        state = self._state
        assert state is not None
        request = state.verify_request(sub, workflow.info().workflow_id)
        summary = f"verify phase {state.current.index}"
        self._verifying = True
        self._checked_next = None
        try:
            report: VerifyReport | None = None
            if self._checks_here and self._renders_with_checks():
                done = await workflow.execute_local_activity_method(
                    LocalChecks.check_and_render_here,
                    ChecksHereRequest(
                        checks=request,
                        render=RenderPhaseRequest(ref=state.ref, index=state.current.index + 1),
                    ),
                    start_to_close_timeout=state.verify_timeout(),
                    retry_policy=_VERIFY_RETRY,
                    summary=summary,
                )
                self._checks_here = done is not None
                if done is not None:
                    report, self._checked_next = done.report, done.next_phase
            elif self._checks_here and state.verify_reads_only() and patched(state, CHECKS_HERE):
                report = await workflow.execute_local_activity_method(
                    LocalChecks.run_checks_here,
                    request,
                    start_to_close_timeout=state.verify_timeout(),
                    retry_policy=_VERIFY_RETRY,
                    summary=summary,
                )
                self._checks_here = report is not None
            if report is None:
                report = await workflow.execute_activity_method(
                    VerifyActivities.run_verify_checks,
                    request,
                    task_queue=verify_task_queue(workflow.info().task_queue),
                    start_to_close_timeout=state.verify_timeout(),
                    heartbeat_timeout=timedelta(seconds=10),
                    retry_policy=_VERIFY_RETRY,
                    summary=summary,
                )
        except ActivityError as exc:
            cause = (
                exc.cause.message
                if isinstance(exc.cause, ApplicationError)
                else str(exc.cause or exc)
            )
            return state.verify_unavailable(cause)
        finally:
            self._verifying = False
        results = checked_report(state.current.gate.verify, report.results)
        if results is None:  # e.g. answered by a worker that did not run this gate's checks
            return state.verify_unavailable(
                f"the verify report does not answer the gate's {len(state.current.gate.verify)} "
                "checks"
            )
        return results

    async def _next_phase(self) -> PhaseDefinition | None:
        """The phase after the current one, rendered (None after the last phase).

        Raises:
            SessionError: it could not be rendered; nothing has changed yet.
        """
        state = self._state
        assert state is not None
        next_phase: PhaseDefinition | None = None
        index = state.current.index + 1
        checked, self._checked_next = self._checked_next, None
        if checked is not None and checked.index == index:
            return checked  # rendered by the checks' local activity
        if not state.is_last_phase():
            # None: none, failed, or sealed and not opened; rendered below (errors reported)
            next_phase = await self._prefetch.take(index)
        if not state.is_last_phase() and next_phase is None:
            next_phase = await render_now(state, index)
        return next_phase

    def _start_prefetch(self, *, first: bool = False) -> None:
        """Start rendering the phase after the current one, unless off or already going
        (``first``: the run's first, made ready in this workflow task)."""
        state = self._state
        assert state is not None
        index = state.current.index + 1
        if not state.options.prefetch or state.finished or index >= state.total_phases:
            return
        if self._prefetch.covers(index):
            return
        if self._checks_here and self._renders_with_checks():
            return  # rendered with the checks, once they pass (see _verify)
        self._prefetch.start(state, index, here=first and patched(state, FIRST_PREFETCH_HERE))

    def _renders_with_checks(self) -> bool:
        """The checks' local activity renders the phase a passing checkpoint enters."""
        state = self._ready()
        if not state.renders_with_checks():
            return False
        if patched(state, RENDER_WITH_CHECKS_UNPREFETCHED):
            return not state.options.prefetch
        return workflow.patched(RENDER_WITH_CHECKS)  # histories of v1

    # ---- approvals -----------------------------------------------------

    @workflow.update
    async def decide_approval(self, decision: ApprovalDecision) -> SessionView:
        self._messages_this_run += 1
        state = self._state
        assert state is not None
        async with self._lock:
            problem = state.check_decision(decision, workflow.info().workflow_id)
            if problem is not None:
                raise application_error(problem, non_retryable=False)
            next_phase = None
            if decision.decision == "approve":
                try:  # render first: a failure leaves the decision unrecorded, to retry
                    next_phase = await self._next_phase()
                except PhasegateError as exc:
                    raise application_error(exc, non_retryable=False) from None
            if state.apply_decision(decision, next_phase, workflow.now()):
                advanced("approval")
                self._start_prefetch()
            self._publish()
            return state.status_view()

    @decide_approval.validator
    def _validate_decision(self, decision: ApprovalDecision) -> None:
        check(self._ready().check_decision(decision, workflow.info().workflow_id))

    # ---- controls ------------------------------------------------------

    @workflow.update
    async def control(self, req: ControlRequest) -> ControlResult:
        """pause / resume / retry_phase / rollback (only backwards) / abandon; all audited."""
        self._messages_this_run += 1
        state = self._state
        assert state is not None
        async with self._lock:
            problem = state.check_control(req, workflow.info().workflow_id)
            if problem is not None:
                raise application_error(problem, non_retryable=False)
            state.apply_control(req, workflow.now())
            if req.action == "rollback":
                self._start_prefetch()
            self._deadlines.arm()  # e.g. resume: the approval's deadline applies again
            self._publish()
            return ControlResult(
                action=req.action, status=state.status, current_phase=state.current.index
            )

    @control.validator
    def _validate_control(self, req: ControlRequest) -> None:
        check(self._ready().check_control(req, workflow.info().workflow_id))

    # ---- tasks (domain.tasks.board; mechanics in _session_tasks) ----------

    @workflow.update
    async def start_task(self, msg: StartTask) -> TaskResult:
        """Claim a task (``task`` None: the next ready one) and run its pre-analysis."""
        self._messages_this_run += 1
        return await self._tasks.start(msg)

    @start_task.validator
    def _validate_start_task(self, msg: StartTask) -> None:
        check(self._ready().check_task(msg))

    @workflow.update
    async def complete_task(self, msg: CompleteTask) -> TaskResult:
        self._messages_this_run += 1
        return await self._tasks.complete(msg)

    @complete_task.validator
    def _validate_complete_task(self, msg: CompleteTask) -> None:
        check(self._ready().check_task(msg))

    @workflow.update
    def block_task(self, msg: BlockTask) -> TaskResult:
        self._messages_this_run += 1
        return self._tasks.block(msg)

    @block_task.validator
    def _validate_block_task(self, msg: BlockTask) -> None:
        check(self._ready().check_task(msg))

    @workflow.update
    def add_subtask(self, msg: AddSubtask) -> TaskResult:
        self._messages_this_run += 1
        return self._tasks.add_subtask(msg)

    @add_subtask.validator
    def _validate_add_subtask(self, msg: AddSubtask) -> None:
        check(self._ready().check_task(msg))

    @workflow.update
    async def project_task_files(self) -> ProjectResult | None:
        """Write the ``.workflow/`` files again now (``phasegate doctor --fix``)."""
        self._messages_this_run += 1
        if not self._tasks.projects():
            return None
        await workflow.wait_condition(lambda: not self._tasks._projecting)
        return await self._tasks.project_once()

    @project_task_files.validator
    def _validate_project(self) -> None:
        self._ready()

    @workflow.query
    def tasks(self, q: BoardQuery) -> BoardView:
        """The board: the current phase's tasks (or one phase's, or all), the next ready one."""
        state = self._ready()
        try:
            return state.tasks.view(q, state.current.index, workflow.info().workflow_id)
        except PhasegateError as exc:
            raise application_error(exc, non_retryable=False) from None

    @workflow.query
    def task_files(self) -> TaskFilesSource:
        """What the ``.workflow/`` files show (read by the projection activity)."""
        return files_source(self._ready(), workflow.info().workflow_id)

    # ---- queries -------------------------------------------------------

    @workflow.query
    def status(self) -> SessionView:
        return self._ready().status_view()

    @workflow.query
    def phase(self, q: PhaseQuery) -> PhaseView | SequenceViolation:
        return self._ready().phase_view(q.phase, q.tasks_offset)

    @workflow.query
    def artifact(self, q: PhaseQuery) -> PhaseArtifact | SequenceViolation:
        """One completed phase's artifact with its whole evidence (see ``PhaseArtifact``)."""
        try:
            return self._ready().artifact(q.phase)
        except PhasegateError as exc:
            raise application_error(exc, non_retryable=False) from None

    @workflow.query
    def current(self) -> CurrentView:
        """The status and the current phase's view in one answer (an agent's first read)."""
        state = self._ready()
        view = None if state.finished else state.phase_view(state.current.index)
        return CurrentView(
            status=state.status_view(), phase=view if isinstance(view, PhaseView) else None
        )

    @workflow.query
    def task(self, q: TaskQuery) -> TaskView | SequenceViolation:
        try:
            return self._ready().task_view(q.phase, q.task)
        except PhasegateError as exc:
            raise application_error(exc, non_retryable=False) from None

    # ---- visibility (_session_visibility) ---------------------------------

    def _publish(self, *, defer_search_attributes: bool = False) -> None:
        self._visibility.publish(defer_search_attributes=defer_search_attributes)

    def _ready(self) -> SessionState:
        """The state, or the not-ready refusal for a message that came too early."""
        if self._state is None:
            raise not_ready(
                SessionNotActive(
                    "the session is still loading its definition",
                    hint="retry in a moment; `phasegate status SESSION` shows when it is ready",
                )
            )
        return self._state
