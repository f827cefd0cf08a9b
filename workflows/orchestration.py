"""``Orchestration``: a planner-driven pipeline of agents working one issue.

The planner (a model, or the rules planner with no API key) writes the plan as
data: which agents run (analyst, architect, developer, reviewer) and in what
order. The workflow runs it step by step; every decision (next step, approvals,
escalation, review loop, replans) is :class:`~phasegate.domain.orchestration.OrchestrationState`'s.

- LLM agents run through pydantic-ai with Temporal durability: each model request
  is an activity with retries, each output a validated pydantic model. A step is one
  activity: the model request renders the agent's prompt from the state's sections
  and records it once, in its answer (``agent_prompts`` shows them), and the
  architect's plan is checked against the workspace by a local activity.
- The developer works through a child ``GatedSession`` (``spec_execution_v1`` over a
  tasks.md made from the architect's plan): its gates and verify checks decide
  whether the work is done, never the developer's word.
- Every replan is a continue-as-new carrying the issue, the outputs, the compacted
  history and ``replanned_count``.

Queries ``plan``, ``state``, ``history``, ``developer_prompt``, ``agent_prompts``; updates
``decide_approval`` (signed where approvers have keys) and ``request_replan``. The Web
UI shows the plan with the current step marked in the workflow's current details.

A run started with ``check_only`` runs only the worker's checks of the profile and
ends (status ``checked``, its problems as ``failure``): clients run it before they
start an orchestration, so a profile that cannot run starts nothing.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.agent_prompts import render_agent_prompt
    from phasegate.activities.agents import LLM_AGENTS, ask_llm_agent, run_llm_agent
    from phasegate.activities.orchestration import (
        OrchestrationActivities,
        SetupRequest,
        StoreOutputRequest,
    )
    from phasegate.domain.errors import OrchestrationError
    from phasegate.domain.orchestration.agents import (
        AgentOutput,
        DeveloperResult,
        PlannerDecision,
        PlanOutput,
        StepUsage,
    )
    from phasegate.domain.orchestration.context import AgentPrompt, AgentPromptRequest
    from phasegate.domain.orchestration.messages import (
        DeveloperPrompt,
        HistoryEntry,
        OrchestrationDecision,
        OrchestrationView,
        PlanView,
        ReplanRequest,
        StartOrchestration,
        StepRecord,
        VerifyPlanRequest,
    )
    from phasegate.domain.orchestration.state import (
        Finish,
        NeedPlan,
        OrchestrationState,
        Replan,
        RunStep,
        Wait,
    )
    from phasegate.domain.orchestration.views import by_reference, details_markdown
    from phasegate.temporal import application_error

from phasegate.workflows._developer_step import RETRY as _RETRY
from phasegate.workflows._developer_step import SHORT as _SHORT
from phasegate.workflows._developer_step import DeveloperContext, develop
from phasegate.workflows._kit import CarryGate, Publisher, check, not_ready

__all__ = ["Orchestration"]


_WORKFLOW_TYPE = "orchestration"
_PUBLISH_ON_CHANGE = "orchestration-publish-on-change"  # workflow.patched id
_PLANNER_CONFIGURATION = "orchestration-planner-configuration-fails"  # workflow.patched id
# Runs recorded before rendered each prompt in an activity of its own, stored it, and
# sent it again in the model request; and checked plans with a regular activity.
_ONE_ACTIVITY_STEP = "orchestration-one-activity-step"  # workflow.patched id
_DEV_WORKFLOW = "spec_execution_v1"
_EXIT_GRACE = timedelta(seconds=10)  # for the session's last answer after the agent exits


def _innermost(err: BaseException) -> tuple[str, str]:
    """``(message, type)`` of the innermost application failure under ``err``."""
    cause: BaseException | None = err
    message, code = str(err), ""
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.message:
            message, code = cause.message, cause.type or ""
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return message, code


# An input that fails its model fails the run with the reason (never a wedged task).
@workflow.defn(failure_exception_types=[ValidationError])
class Orchestration:
    """One issue worked by a planned pipeline of agents (see the module docstring)."""

    __pydantic_ai_agents__ = tuple(LLM_AGENTS.values())

    @workflow.init
    def __init__(self, start: StartOrchestration) -> None:
        # Only the orchestration's own replan carries state, as the server records it
        # (workflows._kit); the carry must also name the chain's first run.
        self._carry = CarryGate(start.carried)
        self._state: OrchestrationState | None = None
        self._issue = start.issue
        self._failure = ""  # why the run was refused before it had a state
        self._publisher = Publisher()
        # What each agent of this run was told, as its model request recorded it (by
        # step key; "planner" for the plan): the agent_prompts query.
        self._prompts: dict[str, AgentPrompt] = {}

    @workflow.run
    async def run(self, start: StartOrchestration) -> OrchestrationView:
        # Runs recorded before the kit upserted search attributes on every publish.
        self._publisher = Publisher(on_change=workflow.patched(_PUBLISH_ON_CHANGE))
        if start.carried is not None:
            await self._carry.proven()
            if start.carried.first_run_id != workflow.info().first_execution_run_id:
                self._carry.refusal = self._carry.refusal or "it names another chain's first run"
        if self._carry.refusal:
            raise application_error(
                OrchestrationError(
                    "an orchestration cannot be started with carried state: only its own "
                    f"replan (continue-as-new) hands state from one run to the next "
                    f"({self._carry.refusal})",
                    where="carried",
                    hint="start orchestrations with `phasegate orchestrate ISSUE.md`",
                )
            )
        setup = await workflow.execute_activity_method(
            OrchestrationActivities.orchestration_setup,
            SetupRequest(profile=start.profile),
            start_to_close_timeout=_SHORT,
            retry_policy=_RETRY,
        )
        if start.check_only:  # a client's check before it starts the orchestration
            return OrchestrationView(
                orchestration_id=workflow.info().workflow_id,
                issue=start.issue,
                status="checked",
                failure="; ".join(setup.problems),
                plan=PlanView(),
            )
        if problems := OrchestrationState.setup_problems(setup, workflow.info().workflow_id):
            self._failure = "the profile cannot run: " + "; ".join(problems)
            raise application_error(
                OrchestrationError(
                    self._failure,
                    where="profile",
                    hint="fix the profile (phasegate orchestrate ISSUE.md --profile P) and "
                    "start again",
                )
            )
        info = workflow.info()
        self._state = state = OrchestrationState(
            orchestration_id=info.workflow_id,
            run_id=info.run_id,
            issue=start.issue,
            profile=start.profile,
            setup=setup,
            carried=start.carried,
            now=workflow.now(),
        )
        self._working_dir = setup.working_dir
        self._setup = setup
        while True:
            action = state.advance(workflow.now())
            self._publish()
            if isinstance(action, NeedPlan):
                await self._plan()
            elif isinstance(action, RunStep):
                await self._run_step(action.step, action.key)
            elif isinstance(action, Wait):
                await workflow.wait_condition(
                    lambda: state.awaiting is None or state.status == "failed"
                )
            elif isinstance(action, Replan):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    StartOrchestration(
                        issue=start.issue, profile=start.profile, carried=action.carry
                    )
                )
            elif isinstance(action, Finish):
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._publish()
                if not action.completed:
                    raise application_error(
                        OrchestrationError(
                            action.reason,
                            where=f"orchestration {info.workflow_id}",
                            hint=f"see `phasegate plan show {info.workflow_id}` for the history",
                        )
                    )
                return state.view()

    # ------------------------------------------------------------------ planning
    async def _plan(self) -> None:
        state = self._ready()
        model = state.planner()
        usage = StepUsage()
        try:
            if model in ("fixed", "rules"):
                decision = state.planned_without_model()
            else:
                output, usage = await self._ask_model("planner", model, None)
                assert isinstance(output, PlannerDecision)
                decision = output
        except (ActivityError, ApplicationError) as err:
            message, code = _innermost(err)
            # Runs recorded before: a planner that cannot run here asked for a replan.
            code = code if workflow.patched(_PLANNER_CONFIGURATION) else ""
            state.refuse_plan(
                [f"the planner ({model}) failed: {message}"], workflow.now(), code=code
            )
            return
        if state.status == "failed":  # a person's replan with none left, while planning
            return
        if problems := state.plan_problems(decision):
            state.refuse_plan(problems, workflow.now())
            return
        problems = await self._check_plan(
            VerifyPlanRequest(
                working_dir=self._working_dir,
                goal=state.issue.title,
                text="\n".join([decision.reasoning, *(s.reason for s in decision.steps)]),
                claimed_files=state.claimed_files(),
            )
        )
        if problems:
            state.refuse_plan(problems, workflow.now())
            return
        state.set_plan(decision, workflow.now(), model=model, usage=usage)

    # ------------------------------------------------------------------- steps
    async def _run_step(self, step: StepRecord, key: str) -> None:
        state = self._ready()
        model = "gated-session" if step.agent == "developer" else state.models[step.agent]
        state.start_step(step, key, workflow.now(), model=model)
        self._publish()
        output: AgentOutput
        try:
            if step.agent == "developer":
                output, usage = await self._develop(step, key)
            else:
                output, usage = await self._ask_model(step.agent, model, step)
        except (ActivityError, ApplicationError, ChildWorkflowError) as err:
            message, code = _innermost(err)
            state.record_failure(step, message, workflow.now(), code=code)
            return
        if isinstance(output, PlanOutput) and (problems := await self._verify(output)):
            state.record_failure(
                step,
                "the architect's plan failed verification: " + "; ".join(problems),
                workflow.now(),
            )
            return
        ref = await self._store_if_large(key, output)
        state.record_output(step, key, output, usage, workflow.now(), model=model, ref=ref)

    async def _ask_model(
        self, agent: str, model: str, step: StepRecord | None
    ) -> tuple[AgentOutput, StepUsage]:
        state = self._ready()
        req = AgentPromptRequest(
            agent=agent, sections=state.context(step), working_dir=self._working_dir
        )
        max_tokens = state.profile.max_agent_output_tokens
        if workflow.patched(_ONE_ACTIVITY_STEP):
            answer = await ask_llm_agent(req, model=model, max_tokens=max_tokens)
            if answer.prompt is not None:
                self._prompts[step.key if step is not None else "planner"] = answer.prompt
            return answer.output, answer.usage
        prompt = await workflow.execute_activity(
            render_agent_prompt, req, start_to_close_timeout=_SHORT, retry_policy=_RETRY
        )
        return await run_llm_agent(
            agent,
            model=model,
            instructions=prompt.instructions,
            prompt=prompt.prompt,
            max_tokens=max_tokens,
        )

    async def _verify(self, plan: PlanOutput) -> list[str]:
        """What is wrong with the architect's plan against the workspace ([]: nothing)."""
        return await self._check_plan(
            VerifyPlanRequest(
                working_dir=self._working_dir, goal=plan.goal, text=plan.plan_markdown
            )
        )

    async def _check_plan(self, req: VerifyPlanRequest) -> list[str]:
        """The worker's verdict on a plan: a local activity (no task-queue round trip, and
        no foreign workflow can ask for one); runs recorded before used a regular one."""
        if workflow.patched(_ONE_ACTIVITY_STEP):
            verdict = await workflow.execute_local_activity_method(
                OrchestrationActivities.verify_plan,
                req,
                start_to_close_timeout=_SHORT,
                retry_policy=_RETRY,
            )
        else:
            verdict = await workflow.execute_activity_method(
                OrchestrationActivities.verify_plan,
                req,
                start_to_close_timeout=_SHORT,
                retry_policy=_RETRY,
            )
        return list(verdict.problems)

    async def _store_if_large(self, key: str, output: AgentOutput) -> str | None:
        if not by_reference(output):
            return None
        return await workflow.execute_activity_method(
            OrchestrationActivities.store_output,
            StoreOutputRequest(
                working_dir=self._working_dir,
                orchestration_id=workflow.info().workflow_id,
                key=key,
                output=output.model_dump(mode="json"),
            ),
            start_to_close_timeout=_SHORT,
            retry_policy=_RETRY,
        )

    # --------------------------------------------------------------- developer
    async def _develop(self, step: StepRecord, key: str) -> tuple[DeveloperResult, StepUsage]:
        return await develop(
            DeveloperContext(
                state=self._ready(),
                working_dir=self._working_dir,
                temporal_address=self._setup.temporal_address,
                developer_command=self._setup.developer_command,
                publish=self._publish,
            ),
            step,
            key,
        )

    # -------------------------------------------------------------- messages
    @workflow.query
    def plan(self) -> PlanView:
        """The plan with the current step marked."""
        return self._state.plan_view() if self._state else PlanView()

    @workflow.query
    def state(self) -> OrchestrationView:
        """Status, plan, outputs, what the run waits for, usage."""
        if self._state is None:  # the worker's checks have not answered yet
            return OrchestrationView(
                orchestration_id=workflow.info().workflow_id,
                issue=self._issue,
                status="failed" if self._failure else "planning",
                failure=self._failure,
                plan=PlanView(),
            )
        return self._state.view()

    @workflow.query
    def developer_prompt(self) -> DeveloperPrompt:
        """The open developer session, its spec and what its coding agent is told."""
        return self._state.sessions.prompt() if self._state else DeveloperPrompt()

    @workflow.query
    def agent_prompts(self) -> dict[str, AgentPrompt]:
        """What each LLM agent of this run was told (instructions and user message), by
        step key (``planner`` for the plan), as its model request recorded it."""
        return dict(self._prompts)

    @workflow.query
    def history(self) -> list[HistoryEntry]:
        """The append-only history (plans, decisions, steps, replans)."""
        return list(self._state.history) if self._state else []

    @workflow.update
    async def decide_approval(self, decision: OrchestrationDecision) -> OrchestrationView:
        """A person's decision on the open gate (approval of a step or an escalation)."""
        state = self._ready()
        state.apply_decision(
            approver=decision.approver,
            decision=decision.decision,
            comment=decision.comment,
            nonce=decision.nonce,
            now=workflow.now(),
        )
        self._publish()
        return state.view()

    @decide_approval.validator
    def _validate_decision(self, decision: OrchestrationDecision) -> None:
        check(
            self._ready().check_decision(
                gate=decision.gate,
                approver=decision.approver,
                decision=decision.decision,
                comment=decision.comment,
                nonce=decision.nonce,
                signature=decision.signature,
            )
        )

    @workflow.update
    async def request_replan(self, request: ReplanRequest) -> OrchestrationView:
        """A person asks for a new plan; it runs after the current step, as a new run."""
        state = self._ready()
        state.apply_replan(request.reason, request.requested_by, workflow.now(), request.nonce)
        self._publish()
        return state.view()

    @request_replan.validator
    def _validate_replan(self, request: ReplanRequest) -> None:
        check(
            self._ready().check_replan(
                actor=request.requested_by,
                reason=request.reason,
                nonce=request.nonce,
                signature=request.signature,
            )
        )

    # ----------------------------------------------------------------- helpers
    def _ready(self) -> OrchestrationState:
        """The state, or the not-ready refusal for a message that came too early."""
        if self._state is None:
            raise not_ready(
                OrchestrationError(
                    "the orchestration is still starting; try again in a moment",
                    hint="`phasegate orchestrate watch ID` shows when it runs",
                )
            )
        return self._state

    def _publish(self) -> None:
        state = self._state
        if state is None:
            return
        self._publisher.details(details_markdown(state))
        self._publisher.attributes(
            _WORKFLOW_TYPE, min(state.cursor, len(state.steps)), state.status
        )
