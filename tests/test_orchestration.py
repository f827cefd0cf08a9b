"""Orchestration end to end on the dev server: routing, developer sessions, approvals,
escalation, review loop, replans by continue-as-new."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from orchestration_helpers import HONEST_AGENT, approving_children, start
from temporalio.client import WorkflowUpdateFailedError

from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import SessionNotActive
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.messages import ReplanRequest
from phasegate.testing import ScriptedAgent, unsigned_approver, workspace_for
from phasegate.workflows import Orchestration

TYPO = Issue(id="1", title="Fix typo in README: 'recieve' → 'receive'", labels=["docs"])


def demo_profile(workdir: Path, **over) -> Profile:
    fields = {
        "working_dir": str(workdir),
        "models": {"analyst": "demo", "architect": "demo", "reviewer": "demo"},
        "developer": DeveloperProfile(mode="command", command=HONEST_AGENT, timeout_minutes=2),
        **over,
    }
    return Profile(**fields)


async def test_trivial_fix_runs_developer_then_reviewer_with_the_rules_planner(
    env, settings_for, run_worker, tmp_path
):
    settings = settings_for()
    work = tmp_path / "repo"
    work.mkdir()
    (work / "README.md").write_text("We recieve mail.\n")
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        handle = await start(env.client, settings.task_queue, TYPO, demo_profile(work))
        async with approving_children(pg, handle) as approved:
            view = await handle.result()
        child = await pg.status(view.child_sessions[0])
    assert view.status == "completed", view.failure
    assert [s.agent for s in view.plan.steps] == ["developer", "reviewer"]
    assert [o.key for o in view.outputs] == ["planner_0", "developer_0", "reviewer_0"]
    dev = next(o for o in view.outputs if o.agent == "developer")
    assert dev.output["completed"] is True
    assert approved  # the person approved the session's plan (phase 0)
    assert child.status == "completed"


async def test_fixed_mode_runs_the_classic_pipeline_whatever_the_issue(
    env, settings_for, run_worker, tmp_path
):
    settings = settings_for()
    work = tmp_path / "repo"
    work.mkdir()
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        handle = await start(
            env.client, settings.task_queue, TYPO,
            demo_profile(work, orchestration_mode="fixed"),
        )  # fmt: skip
        async with approving_children(pg, handle):
            view = await handle.result()
    assert view.status == "completed", view.failure
    assert [s.agent for s in view.plan.steps] == ["architect", "developer", "reviewer"]
    assert view.outputs[0].model == "fixed"


async def test_mcp_developer_waits_for_an_outside_agent_to_complete_the_session(
    env, settings_for, run_worker, tmp_path
):
    """In mcp mode the worker runs no coding agent: whoever drives the child session
    (here a scripted outside agent over the client API) completes the step."""
    settings = settings_for()
    work = workspace_for("spec_execution_v1", tmp_path)  # the files the example evidence names
    profile = demo_profile(work, developer=DeveloperProfile(mode="mcp"))
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        handle = await start(env.client, settings.task_queue, TYPO, profile)
        view = await wait_for_child(handle)
        child = view.child_sessions[0]
        assert view.status == "running" and view.plan.steps[0].child_session == child
        for _ in range(100):  # the session loads its definition first
            with contextlib.suppress(SessionNotActive):
                await pg.status(child)
                break
            await asyncio.sleep(0.1)
        walked = await ScriptedAgent(pg, approve=unsigned_approver("lead")).walk(child)
        assert walked.status == "completed"
        view = await handle.result()
    assert view.status == "completed", view.failure
    dev = next(o for o in view.outputs if o.agent == "developer")
    assert dev.output["session_id"] == child and dev.output["completed"] is True


async def test_a_replan_with_none_left_is_refused_and_the_mcp_developer_works_on(
    env, settings_for, run_worker, tmp_path
):
    """A person's replan with no replans left never marks the run failed while its mcp
    developer waits (which would strand the step): the request is refused before it
    reaches history, and the session the outside agent drives still completes the run."""
    settings = settings_for()
    work = workspace_for("spec_execution_v1", tmp_path)
    profile = demo_profile(work, developer=DeveloperProfile(mode="mcp"), max_replans=0)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        handle = await start(env.client, settings.task_queue, TYPO, profile)
        child = (await wait_for_child(handle)).child_sessions[0]
        request = ReplanRequest(reason="rethink it", requested_by="lead")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(Orchestration.request_replan, request)
        assert "no replans left (max_replans 0" in str(refused.value.cause)
        view = await handle.query(Orchestration.state)
        assert view.status == "running" and not view.failure, view.failure
        assert [s.status for s in view.developer_sessions] == ["open"]
        for _ in range(100):  # the session loads its definition first
            with contextlib.suppress(SessionNotActive):
                await pg.status(child)
                break
            await asyncio.sleep(0.1)
        walked = await ScriptedAgent(pg, approve=unsigned_approver("lead")).walk(child)
        view = await asyncio.wait_for(handle.result(), timeout=60)
        history = await handle.query(Orchestration.history)
    assert walked.status == "completed"
    assert view.status == "completed", view.failure
    assert "replan_requested" not in [h.kind for h in history]


async def wait_for_child(handle):
    for _ in range(100):
        view = await handle.query(Orchestration.state)
        if view.child_sessions:
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"no developer session started: {view.status} {view.failure}")
