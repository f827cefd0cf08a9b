"""An orchestration's LLM step keeps its prompt in history once, where an operator reads it.

Each agent's model-request activity renders the prompt it sends
(``activities/_prompt_in_request.py``) and records it in its answer; the workflow
answers the ``agent_prompts`` query from there (``phasegate orchestrate prompt ID
--agent KEY`` prints one). Before, the prompt was stored by a
render activity and sent again in the model request (the instructions twice there).
A real run on the dev server: an LLM planner, an analyst whose first answer does not
validate (the conversation goes back to the model), an architect; the developer works
in ``mcp`` mode, so the run waits there and the test reads what it needs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from orchestration_helpers import models, scripted, start
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models.function import AgentInfo
from temporalio.client import WorkflowFailureError, WorkflowHandle

from phasegate.activities._prompt_in_request import PROMPT_METADATA, RENDER_MARK
from phasegate.client.cli.orchestrate import _agent_prompt
from phasegate.client.orchestrations import OrchestrationClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.context import AgentPrompt, prompt_sha256
from phasegate.workflows import Orchestration

ISSUE = Issue(
    id="77",
    title="Add a health endpoint to the service",
    body="GET /health returns the build version (MARK-BODY-7Q).",
    labels=["feature"],
)
PLAN = {
    "reasoning": "Understand it, design it, build it, review it.",
    "steps": [{"agent": a, "reason": f"the {a} step"} for a in
              ("analyst", "architect", "developer", "reviewer")],
    "scope": "moderate",
}  # fmt: skip
ANALYSIS = {"findings": ["One router module."], "scope": "moderate", "confidence": 0.9}
INVALID = {"findings": "not a list", "scope": "enormous"}
DESIGN = {
    "goal": "Add a health endpoint returning the version",
    "plan_markdown": "## Phase 1: Endpoint\n\n- [ ] 1.1 Add the health route\n",
    "confidence": 0.9,
}
REVIEW = {"approved": True, "comments": [], "severity": "none", "confidence": 0.9}


class Told:
    """What each model was sent: (instructions, user messages) per request."""

    def __init__(self) -> None:
        self.seen: dict[str, list[tuple[str, list[str]]]] = {}

    def answer(self, agent: str, *outputs: dict[str, Any]):
        calls: list[int] = []

        def reply(messages: list[Any], info: AgentInfo) -> dict[str, Any]:
            users = [
                str(p.content)
                for m in messages
                if isinstance(m, ModelRequest)
                for p in m.parts
                if isinstance(p, UserPromptPart)
            ]
            self.seen.setdefault(agent, []).append((info.instructions or "", users))
            calls.append(1)
            return outputs[min(len(calls), len(outputs)) - 1]

        return scripted(reply)


async def wait_for_output(handle: WorkflowHandle, key: str) -> None:
    for _ in range(300):
        view = await handle.query(Orchestration.state)
        assert view.status != "failed", view.failure
        if any(o.key == key for o in view.outputs):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {key} output")


def as_stored(text: str) -> bytes:
    """``text`` as a JSON payload holds it: a whole string value (quoted, escaped, UTF-8;
    the planner's message is the start of the others')."""
    return json.dumps(text, ensure_ascii=False).encode()


async def test_each_llm_step_stores_its_prompt_once_and_an_operator_reads_it(
    env, settings_for, run_worker, tmp_path: Path, capsys
):
    told = Told()
    settings = settings_for()
    with models(
        planner=told.answer("planner", PLAN),
        analyst=told.answer("analyst", INVALID, ANALYSIS),
        architect=told.answer("architect", DESIGN),
        reviewer=told.answer("reviewer", REVIEW),
    ) as ids:
        profile = Profile(
            working_dir=str(tmp_path), models=ids, developer=DeveloperProfile(mode="mcp")
        )
        async with run_worker(settings):
            handle = await start(env.client, settings.task_queue, ISSUE, profile)
            try:
                await wait_for_output(handle, "architect_0")
                prompts = await handle.query(Orchestration.agent_prompts)
                history = await handle.fetch_history()
                # `phasegate orchestrate prompt ID --agent analyst_0`, in this process
                cli = SimpleNamespace(args=argparse.Namespace(json=False))
                oc = OrchestrationClient(env.client, settings.task_queue)
                assert await _agent_prompt(cli, oc, handle.id, "analyst_0") == 0  # type: ignore[arg-type]
                with pytest.raises(PhasegateError, match="recorded: planner, analyst_0"):
                    await _agent_prompt(cli, oc, handle.id, "reviewer_0")  # type: ignore[arg-type]
            finally:
                await handle.terminate("the test read what it needs")
    assert set(prompts) == {"planner", "analyst_0", "architect_0"}
    stored = b"".join(ev.SerializeToString() for ev in history.events)
    for key, prompt in prompts.items():
        agent = key.removesuffix("_0")
        assert isinstance(prompt, AgentPrompt) and prompt.sha256 == prompt_sha256(
            prompt.instructions, prompt.prompt
        )
        assert f"You are the **{agent}**" in prompt.instructions and "MARK-BODY-7Q" in prompt.prompt
        # Once in history: the instructions and the user message, each a single copy.
        assert stored.count(as_stored(prompt.instructions)) == 1, key
        assert stored.count(as_stored(prompt.prompt)) == 1, key
        # What the query shows is what the model was sent (every request of the step).
        for instructions, users in told.seen[agent]:
            assert instructions == prompt.instructions.strip()
            assert users[0] == prompt.prompt and not any(RENDER_MARK in u for u in users)
    assert len(told.seen["analyst"]) == 2  # the invalid answer went back, prompt and all
    analyst = prompts["analyst_0"]
    shown = capsys.readouterr().out
    assert shown == f"{analyst.instructions.rstrip()}\n\n---\n\n{analyst.prompt.rstrip()}\n"
    # The operator's other way in: the model request's result in history (Web UI, CLI).
    assert recorded_in_history(history) == {
        f"agent__phasegate_{key.removesuffix('_0')}__model_request": p.model_dump(mode="json")
        for key, p in prompts.items()
    }
    scheduled = [
        ev.activity_task_scheduled_event_attributes.activity_type.name
        for ev in history.events
        if ev.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "render_agent_prompt" not in scheduled[: scheduled.index("write_dev_spec")]
    assert "verify_plan" not in scheduled  # the plan checks are local activities


def recorded_in_history(history: Any) -> dict[str, Any]:
    """The prompt each model request recorded in its result, by activity type."""
    names: dict[int, str] = {}
    found: dict[str, Any] = {}
    for ev in history.events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            names[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.HasField("activity_task_completed_event_attributes"):
            done = ev.activity_task_completed_event_attributes
            answer = json.loads(done.result.payloads[0].data)
            prompt = (answer.get("metadata") or {}).get(PROMPT_METADATA)
            if isinstance(answer, dict) and prompt is not None:
                found[names[done.scheduled_event_id]] = prompt
    return found


async def test_a_prompt_file_that_does_not_render_fails_the_step_naming_it(
    env, settings_for, run_worker, tmp_path: Path
):
    """Rendered in the model request, a prompt that fails on this issue (the worker's
    start-up check renders sample sections, where it passes) still fails the step with
    its file and line (a configuration error: no replan), and no model is called."""
    library = tmp_path / "library"
    (library / "agents").mkdir(parents=True)
    broken = library / "agents" / "analyst.md"
    broken.write_text(
        "---\ncontext: [issue]\n---\nAnalyse.\n"
        f"{{% if issue.id == '{ISSUE.id}' %}}{{{{ plan }}}}{{% endif %}}\n"
    )
    told = Told()
    settings = settings_for(library)
    with models(
        planner=told.answer("planner", PLAN),
        analyst=told.answer("analyst", ANALYSIS),
        architect=told.answer("architect", DESIGN),
        reviewer=told.answer("reviewer", REVIEW),
    ) as ids:
        profile = Profile(
            working_dir=str(tmp_path), models=ids, developer=DeveloperProfile(mode="mcp")
        )
        async with run_worker(settings):
            handle = await start(env.client, settings.task_queue, ISSUE, profile)
            with pytest.raises(WorkflowFailureError) as err:
                await asyncio.wait_for(handle.result(), timeout=60)
            entries = await handle.query(Orchestration.history)
    failed = [e for e in entries if e.kind == "step_failed"]
    assert failed and f"{broken}:5" in failed[0].detail, [(e.kind, e.detail) for e in entries]
    assert "cannot run on this worker" in str(err.value.cause)  # no replan: the file must change
    assert not any("replan" in e.kind for e in entries)
    assert "analyst" not in told.seen  # the mark never reached a model
