"""Orchestration end to end on the dev server: routing, developer sessions, approvals,
escalation, review loop, replans by continue-as-new."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from orchestration_helpers import HONEST_AGENT, approving_children, start

from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import SessionNotActive
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
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


async def wait_for_child(handle):
    for _ in range(100):
        view = await handle.query(Orchestration.state)
        if view.child_sessions:
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"no developer session started: {view.status} {view.failure}")
