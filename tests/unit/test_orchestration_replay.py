"""Recorded Orchestration histories replay against today's workflow code.

The histories in ``tests/histories/orchestration_runs/`` (re-record them with
``tests/histories/record_orchestration.py`` after a deliberate, compatible change)
cover the rules planner with a developer's child session, replans by
continue-as-new (every run of the chain), signed approval and escalation gates, a
person's signed replan request, a developer session approved with a signature, an
LLM planner whose analyst's first answer did not validate and whose reviewer asked
for a replan, a failed run, and a run whose agents' prompts were rendered in their
model requests and whose plans a local activity checked (one activity per step).
Every plan has a developer followed by a reviewer. They replay with the worker's own workflow list, data
converter and ``PydanticAIPlugin``, so the agents' model-request activities
resolve as they do on a worker. A workflow change that is not replay-safe fails
here (the mutant test proves this test can fail).
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.workflow import NondeterminismError

from phasegate.sealing import data_converter
from phasegate.testing import register_model, unregister_model
from phasegate.worker import WORKFLOWS
from phasegate.workflows import Orchestration

with workflow.unsafe.imports_passed_through():
    from phasegate.activities.agents import run_llm_agent
    from phasegate.domain.orchestration.agents import AgentOutput, StepUsage
    from phasegate.domain.orchestration.messages import (
        OrchestrationView,
        StartOrchestration,
        StepRecord,
    )

RUNS = Path(__file__).resolve().parents[1] / "histories" / "orchestration_runs"
HISTORIES = sorted(RUNS.glob("*.json"))
_TEST_MODEL = re.compile(r"test:([A-Za-z0-9][A-Za-z0-9._-]{0,63})")


def load(path: Path) -> WorkflowHistory:
    """A recorded history; files are ``<scenario>--<workflow id>.json``."""
    return WorkflowHistory.from_json(path.stem.split("--", 1)[1], path.read_text())


def replayer(*workflows: type, sandboxed: bool = True) -> Replayer:
    """A replayer set up as ``phasegate worker`` sets up its worker (its converter decodes
    the agents' JSON as pydantic-ai does); in the SDK's sandbox unless ``sandboxed`` is
    false, as workers run by default."""
    return Replayer(
        workflows=list(workflows or WORKFLOWS),
        data_converter=data_converter(None, agents=True),
        plugins=[PydanticAIPlugin()],
        **({} if sandboxed else {"workflow_runner": UnsandboxedWorkflowRunner()}),
    )


def _never_called(messages: list[Any], info: AgentInfo) -> ModelResponse:
    raise AssertionError("a replay never calls a model: the answers are in the history")


@contextlib.contextmanager
def recorded_models(history: WorkflowHistory) -> Iterator[list[str]]:
    """Register the ``test:KEY`` models the history's input names (workflow code builds
    them by id); replay takes their answers from the recorded activities."""
    start = history.events[0].workflow_execution_started_event_attributes
    text = "".join(p.data.decode() for p in start.input.payloads)
    found = sorted(set(_TEST_MODEL.findall(text)))
    for key in found:
        register_model(key, FunctionModel(_never_called))
    try:
        yield found
    finally:
        for key in found:
            unregister_model(key)


def test_the_recorded_scenarios_are_all_there():
    names = {p.stem.split("--", 1)[0] for p in HISTORIES}
    expected = {
        "trivial_rules",
        "trivial_rules_child",
        "replan_run1",
        "replan_run2",
        "gates_run1",
        "gates_run2",
        "gates_child",
        "llm_planner_run1",
        "llm_planner_run2",
        "failed",
        "mcp_developer",
        "mcp_developer_child",
        "planner_unreachable",
        "prompt_in_request",
    }
    assert expected <= names, (
        f"missing {expected - names}: run tests/histories/record_orchestration.py"
    )


@pytest.mark.parametrize(
    ("scenario", "patch"),
    [
        ("mcp_developer", "orchestration-mcp-developer-prompt"),
        ("planner_unreachable", "orchestration-planner-configuration-fails"),
        ("prompt_in_request", "orchestration-one-activity-step"),
    ],
)
def test_the_patched_paths_have_a_recorded_history(scenario: str, patch: str):
    """Each patched branch is guarded by a history that took it (the patch id is in a
    marker's payload, base64-encoded)."""
    import base64
    import json

    [path] = [p for p in HISTORIES if p.stem.split("--", 1)[0] == scenario]
    payloads = [
        base64.b64decode(p["data"]).decode("utf-8", "replace")
        for e in json.loads(path.read_text())["events"]
        for d in e.get("markerRecordedEventAttributes", {}).get("details", {}).values()
        for p in d.get("payloads", [])
    ]
    assert any(patch in text for text in payloads), payloads


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem.split("--", 1)[0])
async def test_recorded_orchestration_replays(path: Path, sandboxed: bool):
    history = load(path)
    with recorded_models(history):
        result = await replayer(sandboxed=sandboxed).replay_workflow(
            history, raise_on_replay_failure=False
        )
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


def test_the_histories_cover_what_they_claim():
    """Each scenario holds the events it is named for (a re-recording that silently
    changed course would otherwise still pass)."""
    shape = {name: _shape(load(_path(name))) for name in _NAMES}
    continued = "workflow_execution_continued_as_new"
    for chain in ("replan_run1", "gates_run1", "llm_planner_run1"):
        assert shape[chain][continued] == 1, chain
    # Every plan runs a developer (its gated child session, driven by the coding agent).
    for name in ("trivial_rules", "replan_run2", "gates_run2", "llm_planner_run1",
                 "llm_planner_run2"):  # fmt: skip
        ran = shape[name]
        assert ran["child"] == ran["run_coding_agent"] == ran["write_dev_spec"] == 1, name
    # The analyst complex: run 1 replans before a developer; run 2 adds the architect.
    assert shape["replan_run1"]["child"] == 0
    assert shape["replan_run2"]["agent__phasegate_architect__model_request"] == 1
    # The analyst's invalid first answer was sent back and answered again; the
    # reviewer's replan request ended run 1; run 2 was planned again by the model.
    llm1, llm2 = shape["llm_planner_run1"], shape["llm_planner_run2"]
    assert llm1["agent__phasegate_analyst__model_request"] == 2, llm1
    assert llm1["agent__phasegate_reviewer__model_request"] == 1, llm1
    assert llm2["agent__phasegate_planner__model_request"] == 1, llm2
    assert llm2["workflow_execution_completed"] == 1, llm2
    # Signed escalation, then a signed replan instead of approving the architect;
    # the new run's signed approval; the developer session's signed approval.
    assert _updates("gates_run1") == [("decide_approval", "alice"), ("request_replan", "alice")]
    assert _updates("gates_run2") == [("decide_approval", "alice")]
    assert ("decide_approval", "lead") in _updates("gates_child")
    assert shape["gates_run2"]["agent__phasegate_architect__model_request"] == 1
    # No replan left: the run fails with the reason, before any developer.
    assert shape["failed"]["workflow_execution_failed"] == 1
    assert shape["failed"]["child"] == 0
    assert "no replans left" in _failure(load(_path("failed")))
    # One activity per LLM step: no render activity (the model request renders), the
    # analyst's invalid answer sent back once, the plans checked by local activities.
    one = shape["prompt_in_request"]
    assert one["render_agent_prompt"] == 1, one  # the developer's prompt only
    assert one["agent__phasegate_analyst__model_request"] == 2, one
    assert one["verify_plan"] == 0 and one["local_activity"] == 2, one


_NAMES = (
    "trivial_rules", "replan_run1", "replan_run2", "gates_run1", "gates_run2",
    "gates_child", "llm_planner_run1", "llm_planner_run2", "failed", "prompt_in_request",
)  # fmt: skip


def _path(name: str) -> Path:
    return next(p for p in HISTORIES if p.stem.split("--", 1)[0] == name)


def _shape(history: WorkflowHistory) -> collections.Counter[str]:
    """Counts of the events that tell scenarios apart: activities by type, child
    workflows started, and how the run ended."""
    seen: collections.Counter[str] = collections.Counter()
    for ev in history.events:
        kind = (ev.WhichOneof("attributes") or "").removesuffix("_event_attributes")
        if ev.HasField("activity_task_scheduled_event_attributes"):
            seen[ev.activity_task_scheduled_event_attributes.activity_type.name] += 1
        elif kind == "start_child_workflow_execution_initiated":
            seen["child"] += 1
        elif ev.marker_recorded_event_attributes.marker_name == "core_local_activity":
            seen["local_activity"] += 1
        else:
            seen[kind] += 1
    return seen


def _updates(name: str) -> list[tuple[str, str]]:
    """``(update, who)`` of each accepted update; every one of them signed."""
    found = []
    for ev in load(_path(name)).events:
        if ev.HasField("workflow_execution_update_accepted_event_attributes"):
            request = ev.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "submit_checkpoint":
                continue
            arg = json.loads(request.input.args.payloads[0].data)
            assert arg["signature"] and arg["nonce"], f"{name}: unsigned {request.input.name}"
            found.append((request.input.name, arg.get("approver") or arg.get("requested_by")))
    return found


def _failure(history: WorkflowHistory) -> str:
    last = history.events[-1]
    assert last.HasField("workflow_execution_failed_event_attributes")
    return last.workflow_execution_failed_event_attributes.failure.message


# A workflow change that is not replay-safe: the model is called without rendering
# the prompt first (one activity fewer per step). Same workflow type name.
@workflow.defn(name="Orchestration", sandboxed=False)  # a test module: no sandbox re-import
class _SkipsPromptRendering(Orchestration):
    async def _ask_model(
        self, agent: str, model: str, step: StepRecord | None
    ) -> tuple[AgentOutput, StepUsage]:
        return await run_llm_agent(agent, model=model, instructions="", prompt="", max_tokens=100)

    @workflow.run
    async def run(self, start: StartOrchestration) -> OrchestrationView:
        return await super().run(start)


@workflow.defn(name="Orchestration", sandboxed=False)
class _Unchanged(Orchestration):
    """The control: the same code, defined the way the mutant is."""

    @workflow.run
    async def run(self, start: StartOrchestration) -> OrchestrationView:
        return await super().run(start)


@pytest.mark.parametrize(
    ("variant", "safe"),
    [(_Unchanged, True), (_SkipsPromptRendering, False)],
    ids=["same", "mutant"],
)
async def test_a_non_deterministic_change_fails_replay(variant: type, safe: bool):
    path = next(p for p in HISTORIES if p.stem.startswith("llm_planner_run1"))
    history = load(path)
    others = [w for w in WORKFLOWS if w is not Orchestration]
    with recorded_models(history):
        if safe:
            await replayer(*others, variant).replay_workflow(history)
        else:
            with pytest.raises(NondeterminismError):
                await replayer(*others, variant).replay_workflow(history)
