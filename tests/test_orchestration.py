"""Orchestration end to end on the dev server: routing, developer sessions, approvals,
escalation, review loop, replans by continue-as-new."""

from __future__ import annotations

from pathlib import Path

from orchestration_helpers import HONEST_AGENT, approving_children, start

from phasegate.client.api import PhasegateClient
from phasegate.domain.agents import DeveloperProfile, Issue, Profile

TYPO = Issue(id="1", title="Fix typo in README: 'recieve' → 'receive'", labels=["docs"])


def demo_profile(workdir: Path, **over) -> Profile:
    return Profile(
        working_dir=str(workdir),
        models={"analyst": "demo", "architect": "demo", "reviewer": "demo"},
        developer=DeveloperProfile(mode="command", command=HONEST_AGENT, timeout_minutes=2),
        **over,
    )


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
