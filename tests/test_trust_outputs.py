"""An oversized model answer is a failed step with the reason, not a configuration error
(issue 14): a reviewer answer within every field's bounds (32 comments of 16,000
characters, each escaped to six bytes) made a 3 MB payload that Temporal refused, and
the run failed at once as if the model could not be used."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from orchestration_helpers import HONEST_AGENT, approving_children, models, scripted, start
    from pydantic import BaseModel
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from phasegate.activities import agents as agents_module
    from phasegate.activities.agents import LLM_AGENTS, run_llm_agent
    from phasegate.client.api import PhasegateClient
    from phasegate.domain.orchestration.agents import (
        MAX_MODEL_RESPONSE_BYTES,
        OUTPUT_TOO_LARGE,
        DeveloperProfile,
        Issue,
        PlannerDecision,
        PlanStep,
        Profile,
    )
    from phasegate.domain.orchestration.messages import OrchestrationSetup
    from phasegate.domain.orchestration.state import (
        CONFIGURATION_ERRORS,
        Finish,
        OrchestrationState,
        Replan,
    )
    from phasegate.testing import register_model, unregister_model

NOW = datetime(2026, 11, 26, tzinfo=UTC)
# Every field within its bounds; as JSON, every character is \u0000: about 3 MB.
HUGE_REVIEW = {
    "approved": False,
    "comments": ["\x00" * 16_000] * 32,
    "severity": "minor",
    "confidence": 0.5,
}
REVIEW = {"approved": True, "comments": [], "severity": "none", "confidence": 0.9}


# ---------------------------------------------------------------- the domain


def _state(max_replans: int = 3) -> OrchestrationState:
    return OrchestrationState(
        orchestration_id="orch-1",
        run_id="run-1",
        issue=Issue(id="7", title="Fix a typo"),
        profile=Profile(working_dir="/tmp", max_replans=max_replans),
        setup=OrchestrationSetup(models={"planner": "rules"}, working_dir="/tmp"),
        carried=None,
        now=NOW,
    )


def test_an_oversized_answer_is_a_step_failure_the_planner_can_replan() -> None:
    assert OUTPUT_TOO_LARGE not in CONFIGURATION_ERRORS
    state = _state()
    state.set_plan(
        PlannerDecision(reasoning="r", steps=[PlanStep(agent="reviewer")]), NOW, model="rules"
    )
    step = state.advance(NOW).step  # type: ignore[union-attr]
    reason = "reviewer agent, model 'x': the model's answer was 3,072,997 bytes; ..."
    state.record_failure(step, reason, NOW, code=OUTPUT_TOO_LARGE)
    assert state.status == "running" and state.failure == ""
    assert [h.kind for h in state.history][-2:] == ["step_failed", "replan_requested"]
    assert state.history[-2].detail == reason
    action = state.advance(NOW)
    assert isinstance(action, Replan) and "3,072,997 bytes" in action.carry.replan_reason


def test_out_of_replans_it_fails_with_the_reason_not_as_configuration() -> None:
    state = _state(max_replans=0)
    state.set_plan(
        PlannerDecision(reasoning="r", steps=[PlanStep(agent="reviewer")]), NOW, model="rules"
    )
    step = state.advance(NOW).step  # type: ignore[union-attr]
    state.record_failure(step, "the answer was 3 MB", NOW, code=OUTPUT_TOO_LARGE)
    finish = state.advance(NOW)
    assert isinstance(finish, Finish) and not finish.completed
    assert "the answer was 3 MB" in finish.reason and "max_replans" in finish.reason
    assert "cannot run on this worker" not in finish.reason


# ---------------------------------------------------------------- one agent, one model


class _Call(BaseModel):
    agent: str
    model: str


@workflow.defn
class OversizeProbe:
    __pydantic_ai_agents__: ClassVar = list(LLM_AGENTS.values())

    @workflow.run
    async def run(self, call: _Call) -> dict[str, Any]:
        output, _ = await run_llm_agent(
            call.agent, model=call.model, instructions="Review.", prompt="Diff.", max_tokens=500
        )
        return output.model_dump(mode="json")


@pytest.fixture
async def probe(env) -> AsyncIterator[Callable[..., Any]]:
    queue = f"oversize-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        env.client, task_queue=queue, workflows=[OversizeProbe], plugins=[PydanticAIPlugin()]
    )

    async def run(model: str) -> dict[str, Any]:
        return await env.client.execute_workflow(
            OversizeProbe.run,
            _Call(agent="reviewer", model=model),
            id=f"probe-{uuid.uuid4()}",
            task_queue=queue,
        )

    async with worker:
        yield run


def _answering(args: dict[str, Any]) -> FunctionModel:
    def answer(messages: Any, info: Any) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    return FunctionModel(answer)


async def _failure_of(probe: Callable[..., Any], key: str) -> ApplicationError:
    model = register_model(key, _answering(HUGE_REVIEW))
    try:
        with pytest.raises(WorkflowFailureError) as err:
            await probe(model)
    finally:
        unregister_model(key)
    cause = err.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def test_a_huge_answer_says_which_agent_how_big_the_limit_and_what_to_do(probe) -> None:
    cause = await _failure_of(probe, "huge-reviewer")
    assert cause.type == OUTPUT_TOO_LARGE and cause.non_retryable
    text = str(cause)
    assert "reviewer agent, model 'test:huge-reviewer'" in text
    assert "answer was 3,07" in text and "bytes" in text  # how big (about 3 MB)
    assert f"at most {MAX_MODEL_RESPONSE_BYTES:,} bytes" in text  # the limit
    assert "max_agent_output_tokens" in text and "replan" in text  # what to do
    assert "model_unusable" not in text and "PHASEGATE_MODELS" not in text


async def test_when_temporal_refuses_first_it_is_still_the_step_that_failed(
    probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster whose payload limit is below phasegate's bound refuses the answer itself."""
    monkeypatch.setattr(agents_module, "MAX_MODEL_RESPONSE_BYTES", 10 * MAX_MODEL_RESPONSE_BYTES)
    cause = await _failure_of(probe, "huge-past-the-bound")
    assert cause.type == OUTPUT_TOO_LARGE
    assert "over the Temporal server's payload limit" in str(cause)


# ---------------------------------------------------------------- a whole orchestration


async def test_the_orchestration_replans_and_completes(env, settings_for, run_worker, tmp_path):
    work = tmp_path / "repo"
    work.mkdir()
    (work / "README.md").write_text("We recieve mail.\n")
    settings = settings_for()
    with models(reviewer=scripted(HUGE_REVIEW, REVIEW)) as ids:
        profile = Profile(
            working_dir=str(work),
            models={**ids, "analyst": "demo", "architect": "demo"},
            developer=DeveloperProfile(mode="command", command=HONEST_AGENT, timeout_minutes=2),
        )
        issue = Issue(id="8", title="Fix typo in README: 'recieve'", labels=["docs"])
        async with run_worker(settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            handle = await start(env.client, settings.task_queue, issue, profile)
            async with approving_children(pg, handle):
                view = await handle.result()
    assert view.status == "completed", view.failure
    assert view.plan.replanned_count == 1
    assert "the reviewer step failed" in view.plan.replan_reason
    assert "bytes" in view.plan.replan_reason
    assert [o.key for o in view.outputs][-1].startswith("reviewer_")
