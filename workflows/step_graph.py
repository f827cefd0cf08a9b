"""``StepGraph``: one run of an explicit outcome graph (see ``domain/graph``).

Thin on purpose: :class:`~phasegate.domain.graph.state.GraphState` decides every
step; this class runs what its ``advance`` asks for (render a step, run its handler,
wait for a report or for answers, continue-as-new, finish) and maps messages onto
its ``check_<message>`` / ``apply_<message>``, with the workflow kit (``_kit``).

Contract (README, "StepGraph"): run input ``StartGraph``; update ``report_step``
(``StepReport`` → ``ReportResult``); update ``answer`` (``GraphAnswer`` →
``GraphView``); queries ``status`` (``GraphView``) and ``step`` (``StepView`` or
None: never a step the run is not on); result ``GraphSummary``; a failed run ends
with a ``graph_failed`` error.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.agents import LLM_AGENTS, run_llm_agent
    from phasegate.activities.step_handlers import (
        StepHandlerActivities,
        render_actions,
        renders_inline,
    )
    from phasegate.domain.errors import GraphFailed, GraphInvalid, SessionError, SessionNotActive
    from phasegate.domain.graph.activities import (
        FunctionRequest,
        GraphPrepare,
        RenderStepRequest,
        StepContext,
    )
    from phasegate.domain.graph.agents import agent_outcome, agent_prompt
    from phasegate.domain.graph.messages import (
        GraphAnswer,
        GraphSummary,
        GraphView,
        ReportResult,
        StartGraph,
        StepReport,
        StepView,
    )
    from phasegate.domain.graph.state import (
        ContinueAsNew,
        Finish,
        GraphState,
        HandlerOutcome,
        RenderStep,
        RunHandler,
    )
    from phasegate.domain.graph.views import details_markdown
    from phasegate.domain.session.messages import SessionOptions, SessionSummary, StartSession
    from phasegate.domain.verify import (
        VerifyRequest,
        VerifyResult,
    )
    from phasegate.temporal import application_error
    from phasegate.workflows._checks import run_checks
    from phasegate.workflows._kit import CarryGate, Publisher, check, not_ready, refuse
    from phasegate.workflows.gated_session import GatedSession

__all__ = ["StepGraph"]

_RETRY = RetryPolicy(maximum_attempts=3)
CHILD_IDS = "graph-child-ids"
"""Patch id: child runs' workflow ids carry a random part (no client can take them first)."""
RENDER_INLINE = "graph-render-inline"
"""Patch id: steps read by no one are not rendered; substitution-only actions are
rendered by the workflow itself; PhasegatePhase is the current step's place in the
graph (was: the path's length, an upsert every step)."""
CONTINUE_WHEN_SUGGESTED = "graph-continue-when-suggested"
"""Patch id: a run waiting for a report or an answer continues as new when the server
suggests it (was: it spun on the suggestion; no recorded run got there and went on)."""
# A function handler heartbeats every 2 s: a worker that died mid-step is noticed in 10.
_HANDLER_HEARTBEAT = timedelta(seconds=10)


@workflow.defn
class StepGraph:
    # The LLM agents a step may dispatch to: the worker registers their model activities.
    __pydantic_ai_agents__ = tuple(LLM_AGENTS.values())

    @workflow.init
    def __init__(self, start: StartGraph) -> None:
        self._carry = CarryGate(start.carried)
        self._state: GraphState | None = None
        self._changes = 0
        self._publisher = Publisher()
        self._inline = False
        self._verifying = False

    @workflow.run
    async def run(self, start: StartGraph) -> GraphSummary:
        state = await self._begin(start)
        while True:
            self._publish()
            action = state.advance(workflow.now())
            if isinstance(action, Finish):
                if state.status == "failed":
                    raise application_error(GraphFailed(state.failure, hint=_SHOW))
                return state.summary()
            if isinstance(action, ContinueAsNew):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(start.model_copy(update={"carried": state.carry()}))
            if isinstance(action, RenderStep):
                await self._render(state, action)
            elif isinstance(action, RunHandler):
                await self._run_handler(state, action)
            else:  # WaitReport, WaitAnswer: an update moves the run on
                if workflow.info().is_continue_as_new_suggested() and workflow.patched(
                    CONTINUE_WHEN_SUGGESTED
                ):
                    # Reports the gate refuses still fill history (an agent can send
                    # many, evidence up to 256 KB each); waiting on would spin on the
                    # server's suggestion (the wait's condition stays true) and wedge.
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    workflow.continue_as_new(start.model_copy(update={"carried": state.carry()}))
                await self._next_change()

    async def _next_change(self) -> None:
        seen = self._changes
        await workflow.wait_condition(
            lambda: self._changes != seen or workflow.info().is_continue_as_new_suggested()
        )

    async def _begin(self, start: StartGraph) -> GraphState:
        # Runs recorded before it rendered every step as a local activity (and steps
        # no one reads, too): they replay as recorded.
        self._inline = workflow.patched(RENDER_INLINE)
        carried = await self._carry.proven()
        if self._carry.refusal:
            raise application_error(
                SessionError(
                    "a graph run cannot be started with carried state: only its own "
                    f"continue-as-new hands state on ({self._carry.refusal})",
                    where="carried",
                    hint="start graphs with `phasegate graph run`",
                )
            )
        if carried is not None:
            self._state = GraphState.from_carry(carried)
            return self._state
        if problems := GraphState.start_problems(start):
            raise application_error(GraphInvalid("; ".join(problems), hint=_CHECK))
        setup = await workflow.execute_activity_method(
            StepHandlerActivities.prepare,
            GraphPrepare(graph=start.graph, sha256=start.sha256),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_RETRY,
        )
        if setup.problems:
            raise application_error(GraphInvalid("; ".join(setup.problems), hint=_CHECK))
        info = workflow.info()
        self._state = GraphState.begin(start, setup, info.first_execution_run_id, workflow.now())
        self._state.render_all = not self._inline
        return self._state

    async def _render(self, state: GraphState, action: RenderStep) -> None:
        req = RenderStepRequest(
            actions=action.step.actions,
            step_id=action.step.id,
            visit=action.visit,
            params=state.params,
            state=state.values,
            answers=state.answers,
        )
        if self._inline and renders_inline(req.actions):
            # Substitutions only: rendered here, so a report's answer waits for no
            # local activity (and history keeps no copy of the text).
            # Jinja2 compiles under a lock and imports its compiler lazily: both as on
            # the host (the render itself is pure string work).
            with workflow.unsafe.sandbox_unrestricted(), workflow.unsafe.imports_passed_through():
                text = render_actions(req)
        else:
            text = await workflow.execute_local_activity_method(
                StepHandlerActivities.render_step,
                req,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=_RETRY,
                summary=f"render step {action.step.id}",
            )
        state.apply_rendered(action.step.id, action.visit, text)
        self._changed()

    async def _run_handler(self, state: GraphState, action: RunHandler) -> None:
        step, visit, now = action.step, action.visit, workflow.now
        try:
            if step.handler.kind == "function":
                done = await workflow.execute_activity_method(
                    StepHandlerActivities.run_function,
                    FunctionRequest(
                        target=step.handler.target, context=self._context(state, action)
                    ),
                    start_to_close_timeout=timedelta(minutes=30),
                    heartbeat_timeout=_HANDLER_HEARTBEAT,
                    retry_policy=_RETRY,
                    summary=f"step {step.id}: {step.handler.target}",
                )
            elif step.handler.kind == "agent":
                done = await self._agent(state, action)
            elif step.handler.kind == "graph":
                done = await self._child_graph(state, action)
            else:  # session (prepare refuses the kinds this worker cannot run)
                done = await self._child_session(state, action)
        except (ActivityError, ChildWorkflowError, ApplicationError) as exc:
            cause = exc.cause or exc
            state.apply_handler_failure(
                step.id, visit, str(getattr(cause, "message", cause)), now()
            )
        else:
            state.apply_handler(step.id, visit, done, now())
        self._changed()

    async def _agent(self, state: GraphState, action: RunHandler) -> HandlerOutcome:
        """An LLM agent works the step (each model request an activity); its typed
        output's ``outcome_field`` is the outcome (see ``domain.graph.agent_outcome``)."""
        handler = action.step.handler
        output, _usage = await run_llm_agent(
            handler.target,
            model=state.setup.models[action.step.id],
            instructions=state.setup.agent_prompts.get(handler.target, ""),
            prompt=agent_prompt(state, action.step),
            max_tokens=4000,
        )
        return agent_outcome(action.step, output.model_dump(mode="json"))

    def _child_id(self, state: GraphState, action: RunHandler) -> str:
        """The child run's workflow id, recorded in the state (``status`` shows it). A
        random part, so no client can start a workflow under it first and make the step
        fail; runs recorded before used ``RUN--STEP-VISIT``."""
        child = f"{workflow.info().workflow_id}--{action.step.id}-{action.visit}"
        if workflow.patched(CHILD_IDS):
            child += f"-{workflow.uuid4().hex[:12]}"
        state.apply_child(action.step.id, action.visit, child)
        self._changed()
        return child

    async def _child_graph(self, state: GraphState, action: RunHandler) -> HandlerOutcome:
        """A child run of the graph the step names (pinned when this run started); its
        final outcome is the step's, its failure the step's ``fail``."""
        graph = state.setup.subgraphs[action.step.handler.target]
        result: GraphSummary = await workflow.execute_child_workflow(
            StepGraph.run,
            StartGraph(
                graph=graph,
                sha256=graph.sha256(),
                target=state.target,
                approvers=state.approvers,
            ),
            id=self._child_id(state, action),
            task_queue=workflow.info().task_queue,
        )
        return HandlerOutcome(
            outcome=result.outcome or "ok",
            summary=f"child graph {graph.name} ended {result.outcome or result.status}",
        )

    async def _child_session(self, state: GraphState, action: RunHandler) -> HandlerOutcome:
        result: SessionSummary = await workflow.execute_child_workflow(
            GatedSession.run,
            StartSession(
                workflow_type=action.step.handler.target,
                target=state.target,
                options=SessionOptions(approvers=state.approvers),
            ),
            id=self._child_id(state, action),
            task_queue=workflow.info().task_queue,
        )
        ok = result.status == "completed"
        return HandlerOutcome(
            outcome="ok" if ok else "fail",
            summary=f"session {result.status}: {len(result.completed_phases)} phases completed",
        )

    def _context(self, state: GraphState, action: RunHandler) -> StepContext:
        return StepContext(
            graph=state.graph.name,
            step_id=action.step.id,
            visit=action.visit,
            params=state.params,
            state=state.values,
            answers=state.answers,
            workspace=state.target,
        )

    # ---- messages ------------------------------------------------------------

    @workflow.update
    async def report_step(self, report: StepReport) -> ReportResult:
        """An outside agent ends the step it is on (or asks a person); a gate with
        workspace checks runs them first (they must pass, like its fields)."""
        state = self._ready()
        request = state.verify_request(report, workflow.info().workflow_id)
        verify = await self._verify(request) if request is not None else []
        result = state.apply_report(report, workflow.now(), verify=verify)
        self._changed()
        return result

    @report_step.validator
    def _validate_report(self, report: StepReport) -> None:
        state = self._ready()
        check(state.check_report(report))
        if self._verifying:  # refused, not queued: the step may end meanwhile
            raise refuse(
                SessionNotActive(
                    "a report of this step is being checked against the workspace; wait "
                    "for its result",
                    hint="report again once `phasegate graph show RUN` shows the step",
                )
            )

    async def _verify(self, request: VerifyRequest) -> list[VerifyResult]:
        """The gate's workspace checks, as a session runs them: reading checks on this
        worker where it runs them (a local activity), commands on the verify queue; a
        check that cannot run is a failed check."""
        self._verifying = True
        try:
            # A step graph has no sealed mode of its own: it tries this worker each time.
            results, _ = await run_checks(
                request, here=True, retry=_RETRY, summary="check the step's evidence"
            )
        finally:
            self._verifying = False
        return results

    @workflow.update
    async def answer(self, ans: GraphAnswer) -> GraphView:
        """A person answers the questions the step asked; the step runs again."""
        state = self._ready()
        state.apply_answer(ans, workflow.now())
        self._changed()
        return state.view()

    @answer.validator
    def _validate_answer(self, ans: GraphAnswer) -> None:
        check(self._ready().check_answer(ans, workflow.info().workflow_id))

    @workflow.query
    def status(self) -> GraphView:
        return self._ready().view()

    @workflow.query
    def step(self) -> StepView | None:
        """The step the run is on, as its worker reads it; None when it is on none."""
        return self._ready().step_view()

    # ---- internals -----------------------------------------------------------------

    def _ready(self) -> GraphState:
        if self._state is None:
            raise not_ready(SessionNotActive("the graph run is starting", hint="retry in a moment"))
        return self._state

    def _changed(self) -> None:
        self._changes += 1
        self._publish()

    def _publish(self) -> None:
        state = self._state
        if state is None:
            return
        # PhasegatePhase: the current step's place in the graph (an upsert only when the
        # run moves to another step; a loop on one step writes nothing).
        ids = [s.id for s in state.graph.steps]
        place = ids.index(state.current) if state.current in ids else len(ids)
        if not self._inline:  # runs recorded before: the path's length
            place = state.path_total
        self._publisher.attributes(state.graph.name, place, state.status)
        self._publisher.details(details_markdown(state))


_SHOW = "see the path it took: phasegate graph show RUN"
_CHECK = "check the graph with `phasegate graph check FILE`"
