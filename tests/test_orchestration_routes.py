"""The seed's four routing examples, end to end on the dev server, with the rules
planner and with a scripted LLM planner; a replan by continue-as-new keeps outputs
and counts; one run against a loopback OpenAI chat-completions server."""

from __future__ import annotations

from pathlib import Path

import pytest
from orchestration_helpers import HONEST_AGENT, approving_children, models, scripted, start

from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.testing.fake_openai import FakeOpenAI
from phasegate.workflows import Orchestration

ISSUES = {
    "trivial": Issue(id="11", title="Fix typo in README: 'recieve'", labels=["docs"]),
    "bug": Issue(
        id="12",
        title="Export sometimes produces an empty file",
        body="Users report that exporting sometimes gives an empty CSV. We don't know why.",
        labels=["bug"],
    ),
    "feature": Issue(
        id="13",
        title="Add a --limit flag to the list command",
        body="`todo list --limit N` shows at most N items. Default: no limit.",
        labels=["feature"],
    ),
    "complex": Issue(
        id="14",
        title="Migrate storage to a multi-tenant database",
        body="Move every store to a multi-tenant schema with a migration path.",
        labels=["feature", "complex"],
    ),
}
ROUTES = {
    "trivial": ["developer", "reviewer"],
    "bug": ["analyst", "developer", "reviewer"],
    "feature": ["architect", "developer", "reviewer"],
    "complex": ["analyst", "architect", "developer", "reviewer"],
}
ANALYSIS = {"findings": ["the writer closes early"], "scope": "simple", "confidence": 0.9}
PLAN = {
    "goal": "Add the requested change",
    "plan_markdown": "## Phase 1: Change\n- [ ] 1.1 Make the change\n- [ ] 1.2 Test it\n",
    "confidence": 0.9,
}
REVIEW = {"approved": True, "comments": [], "severity": "none", "confidence": 0.9}


def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "repo"
    work.mkdir(exist_ok=True)
    (work / "README.md").write_text("A project.\n")
    return work


def profile_for(work: Path, ids: dict[str, str], **over) -> Profile:
    return Profile(
        working_dir=str(work),
        models=ids,
        developer=DeveloperProfile(mode="command", command=HONEST_AGENT, timeout_minutes=2),
        **over,
    )


async def run(env, settings, issue: Issue, profile: Profile, run_worker):
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        handle = await start(env.client, settings.task_queue, issue, profile)
        async with approving_children(pg, handle):
            view = await handle.result()
        history = await handle.query(Orchestration.history)
    return view, history


@pytest.mark.parametrize("kind", list(ROUTES))
async def test_rules_planner_routes_the_seed_examples(
    kind, env, settings_for, run_worker, tmp_path
):
    agents = {
        "analyst": scripted(ANALYSIS),
        "architect": scripted(PLAN),
        "reviewer": scripted(REVIEW),
    }
    with models(**agents) as ids:
        view, history = await run(
            env, settings_for(), ISSUES[kind], profile_for(workdir(tmp_path), ids), run_worker
        )
    assert view.status == "completed", view.failure
    assert [s.agent for s in view.plan.steps] == ROUTES[kind]
    ran = [o.agent for o in view.outputs if o.agent != "planner"]
    assert ran == ROUTES[kind]
    assert [h.kind for h in history].count("step_done") == len(ROUTES[kind])
    # Each model agent answered exactly once: no step ran twice.
    for agent, model in agents.items():
        assert len(model.calls) == (1 if agent in [*ROUTES[kind], "planner"] else 0)


async def test_scripted_llm_planner_is_followed_and_its_usage_recorded(
    env, settings_for, run_worker, tmp_path
):
    planner = scripted(
        {
            "reasoning": "A clear feature: design, build, review.",
            "steps": [
                {"agent": "architect", "reason": "design the flag"},
                {"agent": "developer", "reason": "build it"},
                {"agent": "reviewer", "reason": "check it"},
            ],
            "scope": "simple",
        }
    )
    with models(
        planner=planner, architect=scripted(PLAN), reviewer=scripted(REVIEW),
        analyst=scripted(ANALYSIS),
    ) as ids:  # fmt: skip
        view, _ = await run(
            env, settings_for(), ISSUES["feature"], profile_for(workdir(tmp_path), ids), run_worker
        )
    assert view.status == "completed", view.failure
    assert [s.agent for s in view.plan.steps] == ["architect", "developer", "reviewer"]
    assert view.plan.scope == "simple"
    assert view.outputs[0].key == "planner_0" and view.outputs[0].usage.requests == 1
    assert view.usage.requests == 3  # planner, architect, reviewer


async def test_complex_analysis_replans_by_continue_as_new_keeping_outputs(
    env, settings_for, run_worker, tmp_path
):
    complex_analysis = {**ANALYSIS, "scope": "complex", "findings": ["touches every store"]}
    with models(
        analyst=scripted(complex_analysis), architect=scripted(PLAN), reviewer=scripted(REVIEW)
    ) as ids:
        settings = settings_for()
        async with run_worker(settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            handle = await start(
                env.client, settings.task_queue, ISSUES["bug"], profile_for(workdir(tmp_path), ids)
            )
            async with approving_children(pg, handle):
                view = await handle.result()
            # The first run ended by continuing as new (the replan), carrying its outputs.
            first_run = env.client.get_workflow_handle(
                handle.id, run_id=handle.first_execution_run_id
            )
            events = [e async for e in first_run.fetch_history_events()]
    assert events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    assert view.status == "completed", view.failure
    assert view.plan.replanned_count == 1 and "complex" in view.plan.replan_reason
    assert [s.agent for s in view.plan.steps] == ["architect", "developer", "reviewer"]
    keys = [o.key for o in view.outputs]
    assert keys == ["planner_0", "analyst_0", "planner_1", "architect_0", "developer_0",
                    "reviewer_0"]  # fmt: skip
    assert view.run_chain_length == 2


async def test_end_to_end_against_a_loopback_openai_server(
    env, settings_for, run_worker, tmp_path, monkeypatch
):
    async with FakeOpenAI() as fake:
        fake.error(429, retry_after=1).error(500).tool_call(
            {"findings": ["flaky writer"], "scope": "simple", "confidence": 0.9}
        )  # the analyst, after a 429 and a 500
        fake.malformed("{not json").tool_call(REVIEW)  # the reviewer: malformed, then valid
        settings = settings_for(
            model_providers={"fake": {"base_url": fake.base_url, "api_key_env": "FAKE_KEY"}}
        )
        ids = {
            "analyst": "fake:gpt-test",
            "architect": "fake:gpt-test",
            "reviewer": "fake:gpt-test",
        }
        monkeypatch.setenv("FAKE_KEY", "sk-loopback-secret")
        view, _ = await run(
            env, settings, ISSUES["bug"], profile_for(workdir(tmp_path), ids), run_worker
        )
        statuses = [r.status for r in fake.requests]
        assert all(
            r.headers.get("authorization") == "Bearer sk-loopback-secret" for r in fake.requests
        )
    assert view.status == "completed", view.failure
    assert statuses == [429, 500, 200, 200, 200]
    assert [o.agent for o in view.outputs] == ["planner", "analyst", "developer", "reviewer"]
    reviewer = next(o for o in view.outputs if o.agent == "reviewer")
    assert reviewer.usage.requests == 2 and reviewer.output["approved"] is True
    assert view.usage.input_tokens > 0 and view.usage.output_tokens > 0
