"""Configuration is per worker (STYLE.md 16): two phasegate workers built in one process,
both running at once on the dev server, each render their agents' prompts from their
own library and call their own model providers with their own keys; neither sees the
other's, whichever was built last."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from orchestration_helpers import start

from phasegate import SHIPPED_LIBRARY
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.testing.fake_openai import FakeOpenAI
from phasegate.workflows import Orchestration

ISSUE = Issue(id="31", title="Add a --json flag to status", labels=["feature"])
PLAN = {
    "reasoning": "small feature",
    "steps": [
        {"agent": "developer", "reason": "build it"},
        {"agent": "reviewer", "reason": "check it"},
    ],
    "scope": "simple",
}


def prompt_library(root: Path, marker: str) -> Path:
    """A library whose planner prompt is the shipped one with ``marker`` in it."""
    shipped = (Path(SHIPPED_LIBRARY) / "agents" / "planner.md").read_text(encoding="utf-8")
    front, sep, body = shipped.partition("\n---\n")  # the front matter ends at the 2nd ---
    (root / "agents").mkdir(parents=True)
    (root / "agents" / "planner.md").write_text(
        f"{front}{sep}This worker's own planner prompt: {marker}.\n\n{body}", encoding="utf-8"
    )
    return root


async def planned(handle) -> None:
    """Wait until the planner's output is recorded (the developer step then waits)."""
    for _ in range(300):
        view = await handle.query(Orchestration.state)
        assert view.status != "failed", view.failure
        if any(o.key == "planner_0" for o in view.outputs):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the planner never answered: {view.status}")


async def test_two_workers_in_one_process_keep_their_own_prompts_and_providers(
    env, settings_for, run_worker, tmp_path, monkeypatch
):
    monkeypatch.setenv("PG_TEST_KEY_A", "sk-worker-a")
    monkeypatch.setenv("PG_TEST_KEY_B", "sk-worker-b")
    work = tmp_path / "repo"
    work.mkdir()
    profile = Profile(
        working_dir=str(work),
        models={
            "planner": "fake:gpt-test",
            "analyst": "demo",
            "architect": "demo",
            "reviewer": "demo",
        },
        developer=DeveloperProfile(mode="mcp"),  # waits for an outside agent: no process
    )
    with FakeOpenAI() as fake_a, FakeOpenAI() as fake_b:
        settings = {
            name: settings_for(
                prompt_library(tmp_path / f"lib-{name}", f"MARK-{name}"),
                # The same provider name on both workers, a different server and key.
                model_providers={
                    "fake": {"base_url": fake.base_url, "api_key_env": f"PG_TEST_KEY_{name}"}
                },
            )
            for name, fake in (("A", fake_a), ("B", fake_b))
        }
        fake_a.tool_call(PLAN)
        fake_b.tool_call(PLAN)
        # Both built before either runs: a process-wide table would hold B's for both.
        async with run_worker(settings["A"]), run_worker(settings["B"]):
            handles = [
                await start(env.client, s.task_queue, ISSUE, profile) for s in settings.values()
            ]
            await asyncio.gather(*(planned(h) for h in handles))
            for handle in handles:
                await handle.terminate("the test saw what it needed")

        for name, fake, other in (("A", fake_a, "B"), ("B", fake_b, "A")):
            [request] = fake.requests
            sent = json.dumps(request.body)
            assert request.status == 200
            assert request.headers["authorization"] == f"Bearer sk-worker-{name.lower()}"
            assert f"MARK-{name}" in sent and f"MARK-{other}" not in sent


def test_building_a_worker_loads_the_provider_sdks_before_any_workflow_task() -> None:
    """Issue 19: the first orchestration with an OpenAI-compatible model imported the
    SDK inside a workflow task; under load the import ran past the 2 s deadlock limit
    and left the SDK half-imported until the worker restarted."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from phasegate.activities.model_providers import ModelProviders\n"
        "from phasegate.domain.settings import Settings\n"
        "assert 'anthropic' not in sys.modules and 'pydantic_ai.models.openai' not in sys.modules\n"
        "ModelProviders.from_settings(Settings()).plugin()\n"
        "assert {'openai', 'anthropic', 'pydantic_ai.models.openai',\n"
        "        'pydantic_ai.models.anthropic'} <= set(sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
