"""The developer step of an ``Orchestration`` (workflow code, deterministic).

The developer works through a child ``GatedSession`` running ``spec_execution_v1``
over a tasks.md made from the architect's plan (activity ``write_dev_spec``). Its
gates and verify checks decide whether the work is done: a coding agent's exit
code or its own report never completes the step.

- ``command`` mode: the worker runs the profile's coding-agent CLI in the working
  directory (activity ``run_coding_agent``, heartbeating, cancellable) while the
  session runs; when the agent exits, the session has a short grace to answer its
  last submission, then an incomplete session fails the step.
- ``mcp`` mode: an outside agent (or a person) drives the session; the step waits
  until it completes, or until a person asks for a replan. The prompt that agent
  should be given is rendered before the session starts (query ``developer_prompt``,
  ``phasegate orchestrate prompt ID``), as command mode renders its agent's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.agent_prompts import render_agent_prompt
    from phasegate.activities.developer import (
        CodingAgentRequest,
        DeveloperActivities,
        command_ref,
    )
    from phasegate.activities.orchestration import DEVELOPER_WORKFLOW
    from phasegate.domain.errors import DeveloperFailed
    from phasegate.domain.orchestration import developer
    from phasegate.domain.orchestration.agents import DeveloperResult, StepUsage
    from phasegate.domain.orchestration.context import AgentPromptRequest
    from phasegate.domain.orchestration.messages import StepRecord
    from phasegate.domain.orchestration.state import OrchestrationState
    from phasegate.domain.session.messages import SessionOptions, SessionSummary, StartSession
    from phasegate.temporal import application_error

from phasegate.workflows.gated_session import GatedSession

__all__ = ["DEV_WORKFLOW", "RETRY", "SHORT", "DeveloperContext", "develop"]

DEV_WORKFLOW = DEVELOPER_WORKFLOW
SHORT = timedelta(seconds=30)  # the orchestration's own activities (setup, render, files)
RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(seconds=1))
_EXIT_GRACE = timedelta(seconds=10)  # for the session's answer to the agent's last submission
_MCP_PROMPT = "orchestration-mcp-developer-prompt"  # workflow.patched id: mcp renders a prompt


@dataclass
class DeveloperContext:
    """What the developer step needs from its orchestration."""

    state: OrchestrationState
    working_dir: str
    temporal_address: str
    developer_command: list[str]
    publish: Callable[[], None]


async def develop(
    ctx: DeveloperContext, step: StepRecord, key: str
) -> tuple[DeveloperResult, StepUsage]:
    """Run the developer's gated session to completion (or to its refusal)."""
    state = ctx.state
    info = workflow.info()
    attempt = developer.attempt_of(key)
    spec = await workflow.execute_activity_method(
        DeveloperActivities.write_dev_spec,
        developer.spec_request(
            state, working_dir=ctx.working_dir, orchestration_id=info.workflow_id, attempt=attempt
        ),
        start_to_close_timeout=SHORT,
        retry_policy=RETRY,
    )
    child_id = developer.session_id(info.workflow_id, state.replanned_count, attempt)
    profile = state.profile
    prompt = ""  # runs recorded before mcp mode had a prompt render none
    if profile.developer.mode != "command" and workflow.patched(_MCP_PROMPT):
        prompt = await _prompt(ctx, step, child_id, spec.spec_path)
    try:
        handle = await _start_session(ctx, child_id, spec.spec_path)
    except WorkflowAlreadyStartedError:
        raise application_error(developer.session_taken(child_id)) from None
    state.open_session(step, child_id, spec.spec_path, prompt)
    ctx.publish()
    replan: str | None = None
    try:
        if profile.developer.mode == "command":
            summary, replan = await _drive(ctx, handle, step, child_id, spec.spec_path)
        else:  # an outside agent drives the session; a person's replan stops the wait
            minutes = profile.developer.timeout_minutes
            try:
                await workflow.wait_condition(
                    lambda: handle.done() or state.pending_replan is not None,
                    timeout=timedelta(minutes=minutes),
                )
            except TimeoutError:
                raise application_error(developer.timed_out(child_id, minutes)) from None
            if not handle.done():
                raise application_error(developer.superseded(child_id))
            summary = handle.result()
    except BaseException:
        if not handle.done():
            handle.cancel()
        raise
    try:
        result = developer.session_outcome(
            child_id,
            summary.status,
            len(summary.completed_phases),
            summary.total_phases,
            replan,
        )
    except DeveloperFailed as exc:
        raise application_error(exc) from None
    return result, StepUsage()


async def _drive(
    ctx: DeveloperContext,
    handle: workflow.ChildWorkflowHandle[GatedSession, SessionSummary],
    step: StepRecord,
    child_id: str,
    spec_path: str,
) -> tuple[SessionSummary, str | None]:
    """Run the coding-agent CLI against the child session; the session decides."""
    dev = ctx.state.profile.developer
    text = await _prompt(ctx, step, child_id, spec_path)
    ctx.state.sessions.set_prompt(child_id, text)
    agent = workflow.start_activity_method(
        DeveloperActivities.run_coding_agent,
        CodingAgentRequest(
            # A name the worker resolves, never an argv: the profile's developer.agent, or
            # (a profile that spelled the command out) the worker's command setup chose.
            agent=dev.agent or command_ref(ctx.developer_command),
            working_dir=ctx.working_dir,
            session_id=child_id,
            prompt=text,
            timeout_minutes=dev.timeout_minutes,
            task_queue=workflow.info().task_queue,
        ),
        start_to_close_timeout=timedelta(minutes=dev.timeout_minutes + 1),
        heartbeat_timeout=timedelta(seconds=10),
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        retry_policy=RetryPolicy(maximum_attempts=2),
    )
    # A person's replan ends the step at once, as the session's end does.
    replan = asyncio.ensure_future(
        workflow.wait_condition(lambda: ctx.state.pending_replan is not None)
    )
    try:
        waits = cast(list[asyncio.Future[Any]], [agent, handle, replan])
        done, _ = await workflow.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        replan.cancel()
    if handle in done or replan in done:
        agent.cancel()  # stop the agent before anyone reads the workspace
        with contextlib.suppress(BaseException):
            await agent
        if handle in done:
            return handle.result(), None
        raise application_error(developer.superseded(child_id))
    ran = agent.result()
    asked = developer.replan_request(ran.output_tail)
    with contextlib.suppress(TimeoutError):  # the session may still answer the last submission
        await workflow.wait_condition(
            handle.done, timeout=_EXIT_GRACE if ran.exit_code == 0 and not asked else 2
        )
        return handle.result(), asked
    raise application_error(
        developer.agent_stopped(
            child_id,
            exit_code=ran.exit_code,
            timed_out=ran.timed_out,
            asked=asked,
            output_tail=ran.output_tail,
        )
    )


async def _prompt(ctx: DeveloperContext, step: StepRecord, child_id: str, spec_path: str) -> str:
    """What the developer's coding agent is told (the library's developer prompt)."""
    prompt = await workflow.execute_activity(
        render_agent_prompt,
        AgentPromptRequest(
            agent="developer",
            sections=ctx.state.context(step),
            working_dir=ctx.working_dir,
            session_id=child_id,
        ),
        start_to_close_timeout=SHORT,
        retry_policy=RETRY,
    )
    return developer.agent_prompt(prompt.instructions, prompt.prompt, spec_path)


async def _start_session(
    ctx: DeveloperContext, child_id: str, spec_path: str
) -> workflow.ChildWorkflowHandle[GatedSession, SessionSummary]:
    """Start the developer's gated session as a child of the orchestration."""
    return await workflow.start_child_workflow(
        GatedSession.run,
        StartSession(
            workflow_type=DEV_WORKFLOW,
            target=ctx.working_dir,
            options=SessionOptions(
                spec_path=spec_path, approvers=list(ctx.state.profile.approvers) or None
            ),
        ),
        id=child_id,
        task_queue=workflow.info().task_queue,
    )
