"""LLM agents as activities, on the real dev server: a scripted model per agent, an
answer that does not validate, a loopback OpenAI server that answers 429, 500 and
malformed JSON before a valid answer, a refused key; the demo model; what
``check_model`` and the settings say about bad configuration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from phasegate import SHIPPED_LIBRARY
    from phasegate.activities.agents import LLM_AGENTS, OUTPUT_RETRIES, check_model, run_llm_agent
    from phasegate.activities.model_providers import ModelProviders
    from phasegate.activities.tasks_md import parse_tasks_md
    from phasegate.domain.errors import PhasegateError
    from phasegate.domain.orchestration.agents import PlanOutput, StepUsage
    from phasegate.domain.settings import ProviderConfig, Settings
    from phasegate.testing import DEMO_LABEL, register_model, unregister_model
    from phasegate.testing.fake_openai import FakeOpenAI

KEY_VAR = "PHASEGATE_TEST_FAKE_KEY"


class AgentCall(BaseModel):
    agent: str
    model: str
    prompt: str = "# Issue 7: Add a --json flag to `phasegate status`"
    instructions: str = "You are the agent under test."
    max_tokens: int = 500


class AgentAnswer(BaseModel):
    output: dict[str, Any]
    usage: StepUsage


@workflow.defn
class AgentProbe:
    """Runs LLM agents one after another, as an orchestration's steps would."""

    __pydantic_ai_agents__: ClassVar = list(LLM_AGENTS.values())

    @workflow.run
    async def run(self, calls: list[AgentCall]) -> list[AgentAnswer]:
        answers = []
        for call in calls:
            output, usage = await run_llm_agent(
                call.agent,
                model=call.model,
                instructions=call.instructions,
                prompt=call.prompt,
                max_tokens=call.max_tokens,
            )
            answers.append(AgentAnswer(output=output.model_dump(mode="json"), usage=usage))
        return answers


@pytest.fixture
async def probe(env: WorkflowEnvironment) -> AsyncIterator[Callable[..., Any]]:
    """``await probe(*calls, providers=None)`` -> (answers, history), on a worker of this
    test: with ``providers``' plugin (the worker's own model providers), else none."""

    async def run(
        *calls: AgentCall, providers: ModelProviders | None = None
    ) -> tuple[list[AgentAnswer], WorkflowHistory]:
        queue = f"agents-{uuid.uuid4().hex[:8]}"
        plugins = [PydanticAIPlugin(), *([providers.plugin()] if providers else [])]
        async with Worker(env.client, task_queue=queue, workflows=[AgentProbe], plugins=plugins):
            handle = await env.client.start_workflow(
                AgentProbe.run, list(calls), id=f"probe-{uuid.uuid4()}", task_queue=queue
            )
            try:
                return await handle.result(), await handle.fetch_history()
            except WorkflowFailureError as exc:
                exc.history = await handle.fetch_history()  # type: ignore[attr-defined]
                raise

    yield run


@contextlib.contextmanager
def scripted(key: str, answer: Callable[[list[ModelMessage], AgentInfo], ModelResponse]):
    model_id = register_model(key, FunctionModel(answer))
    try:
        yield model_id
    finally:
        unregister_model(key)


def _events(history: WorkflowHistory, kind: str) -> list[Any]:
    return [e for e in history.events if e.HasField(kind)]


def _raw(history: WorkflowHistory) -> bytes:
    """Every byte of the history, payloads as stored (not base64 as in to_json)."""
    return b"".join(e.SerializeToString() for e in history.events)


VALID = {
    "planner": {"reasoning": "small", "steps": [{"agent": "developer", "reason": "do it"}]},
    "analyst": {"findings": ["a"], "scope": "simple", "confidence": 0.8},
    "architect": {"goal": "g", "plan_markdown": "## Phase 1: Do\n- [ ] 1.1 do", "confidence": 0.9},
    "reviewer": {"approved": True, "confidence": 0.95},
}


async def test_each_agent_calls_its_model_in_an_activity_and_gets_a_validated_output(probe):
    seen: list[tuple[str | None, Any]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((info.instructions, (info.model_settings or {}).get("max_tokens")))
        schema = json.dumps(info.output_tools[0].parameters_json_schema)
        agent = next(a for a, v in VALID.items() if all(f'"{k}"' in schema for k in v))
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, VALID[agent])])

    with scripted("every-agent", answer) as model:
        calls = [AgentCall(agent=a, model=model, max_tokens=321) for a in VALID]
        answers, history = await probe(*calls)

    for (agent, expected), got in zip(VALID.items(), answers, strict=True):
        assert got.output.items() >= expected.items(), agent
        assert got.usage.requests == 1 and got.usage.input_tokens > 0
    assert seen == [("You are the agent under test.", 321)] * 4
    scheduled = _events(history, "activity_task_scheduled_event_attributes")
    names = [e.activity_task_scheduled_event_attributes.activity_type.name for e in scheduled]
    assert names == [f"agent__phasegate_{a}__model_request" for a in VALID]


async def test_an_invalid_answer_goes_back_with_the_error_then_the_valid_one_counts(probe):
    replies: list[list[ModelMessage]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        replies.append(list(messages))
        args = {**VALID["reviewer"], "confidence": 3.0 if len(replies) == 1 else 0.9}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    with scripted("fixes-itself", answer) as model:
        [got], history = await probe(AgentCall(agent="reviewer", model=model))

    assert got.output["confidence"] == 0.9 and got.usage.requests == 2
    [sent_back] = replies[1][-1].parts  # the validation error, as the tool's answer
    assert isinstance(sent_back, ToolReturnPart) and sent_back.outcome == "retried"
    assert "less than or equal to 1" in json.dumps(sent_back.content)
    assert len(_events(history, "activity_task_scheduled_event_attributes")) == 2


async def test_an_answer_that_never_validates_fails_the_step_saying_what_to_do(probe):
    calls = 0

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"scope": "huge"})])

    with scripted("never-valid", answer) as model, pytest.raises(WorkflowFailureError) as err:
        await probe(AgentCall(agent="analyst", model=model))

    cause = err.value.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert cause.type == "agent_output_invalid"
    text = str(cause)
    assert "analyst agent" in text and "test:never-valid" in text and "AnalysisResult" in text
    assert "models.analyst" in text and "max_agent_output_tokens" in text
    assert calls == OUTPUT_RETRIES + 1


@pytest.fixture
def fake_provider(monkeypatch: pytest.MonkeyPatch):
    """A FakeOpenAI as provider ``fake`` of the providers yielded (for the probe's worker),
    its key in the worker's environment."""
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_VAR, secret)
    with FakeOpenAI() as fake:
        yield (
            fake,
            secret,
            ModelProviders({"fake": ProviderConfig(base_url=fake.base_url, api_key_env=KEY_VAR)}),
        )


async def test_openai_wire_429_500_malformed_then_valid_every_try_in_history(probe, fake_provider):
    fake, secret, providers = fake_provider
    plan = PlanOutput(
        goal="Add --json", plan_markdown="## Phase 1: Flag\n- [ ] 1.1 add", confidence=1
    )
    fake.error(429, retry_after=1).error(500).malformed(prompt_tokens=70).tool_call(
        plan, prompt_tokens=90, completion_tokens=30
    )

    [got], history = await probe(
        AgentCall(agent="architect", model="fake:gpt-test"), providers=providers
    )

    assert PlanOutput.model_validate(got.output) == plan
    assert got.usage == StepUsage(requests=2, input_tokens=160, output_tokens=40)
    requests = fake.requests
    assert [(r.status, r.reply) for r in requests] == [
        (429, "error"),
        (500, "error"),
        (200, "malformed"),
        (200, "tool_call"),
    ]
    assert all(r.headers["authorization"] == f"Bearer {secret}" for r in requests)
    assert all(
        r.body["model"] == "gpt-test"
        and r.body.get("max_tokens") == 500  # the field every compatible server reads
        for r in requests
    )
    assert requests[0].tool_names == ["final_result"]
    sent_back = requests[3].messages[-1]  # the parse error went back as the tool's answer
    assert sent_back["role"] == "tool" and "Invalid JSON" in sent_back["content"]
    # Temporal, not the OpenAI client, retried: the first request took three attempts.
    started = _events(history, "activity_task_started_event_attributes")
    first = started[0].activity_task_started_event_attributes
    assert [s.activity_task_started_event_attributes.attempt for s in started] == [3, 1]
    assert "status_code: 500" in str(first.last_failure)  # (the server may nest it as cause)
    raw = _raw(history)
    assert b"fake:gpt-test" in raw and secret.encode() not in raw  # the id crosses, the key not


async def test_model_providers_belong_to_the_worker_they_were_given_to(probe, fake_provider):
    fake, _, providers = fake_provider
    fake.tool_call(VALID["reviewer"])
    call = AgentCall(agent="reviewer", model="fake:gpt-test")

    mine, other = await asyncio.gather(
        probe(call, providers=providers),
        probe(call),  # another worker of this process, without provider fake
        return_exceptions=True,
    )

    assert not isinstance(mine, BaseException) and mine[0][0].output["approved"] is True
    assert isinstance(other, WorkflowFailureError) and other.cause is not None
    assert "unknown model provider in 'fake:gpt-test'" in str(other.cause)
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("status", "code", "says"),
    [(401, "model_auth", f"set a valid key in {KEY_VAR}"), (404, "model_not_found", "'gpt-test'")],
)
async def test_a_refused_request_is_not_retried_and_says_what_to_fix(
    probe, fake_provider, status, code, says
):
    fake, secret, providers = fake_provider
    fake.error(status)

    with pytest.raises(WorkflowFailureError) as err:
        await probe(AgentCall(agent="reviewer", model="fake:gpt-test"), providers=providers)

    cause = err.value.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable and cause.type == code
    assert says in str(cause) and "reviewer agent" in str(cause) and f"HTTP {status}" in str(cause)
    assert len(fake.requests) == 1  # no retry: another attempt gets the same answer
    raw = _raw(err.value.history)
    assert b"fake:gpt-test" in raw and secret.encode() not in raw


@pytest.mark.parametrize(
    ("model", "variable"),
    [("openai:gpt-4o", "OPENAI_API_KEY"), ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY")],
)
async def test_a_missing_key_fails_before_any_request(probe, monkeypatch, model, variable):
    # The workflow builds its copy of the model with a placeholder; only the activity
    # reads the key, and finds none: no request is sent anywhere.
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(WorkflowFailureError) as err:
        await probe(AgentCall(agent="planner", model=model))
    cause = err.value.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert cause.type == "model_unusable" and "planner agent" in str(cause)
    assert f"{variable} is not set in the worker's environment" in str(cause)


async def test_an_unregistered_test_model_says_how_to_register_it(probe):
    with pytest.raises(WorkflowFailureError) as err:
        await probe(AgentCall(agent="planner", model="test:nobody"))
    assert "register_model('nobody'" in str(err.value.cause)


@pytest.mark.parametrize(
    ("issue", "steps"),
    [
        ("# Fix a typo in the README", ["developer", "reviewer"]),
        ("# Status crashes on an empty session", ["analyst", "developer", "reviewer"]),
        ("# Add a --json flag to status", ["architect", "developer", "reviewer"]),
        ("# Redesign the storage layer", ["analyst", "architect", "developer", "reviewer"]),
    ],
)
async def test_the_demo_model_answers_offline_deterministically_and_says_so(issue, steps):
    first = await LLM_AGENTS["planner"].run(issue, model="demo")
    again = await LLM_AGENTS["planner"].run(issue, model="demo")
    assert first.output == again.output
    assert [s.agent for s in first.output.steps] == steps
    assert first.output.reasoning.startswith(DEMO_LABEL)
    for agent in ("analyst", "architect", "reviewer"):
        out = (await LLM_AGENTS[agent].run(issue, model="demo")).output
        assert DEMO_LABEL in out.model_dump_json() and out.confidence >= 0.7
    plan = (await LLM_AGENTS["architect"].run(issue, model="demo")).output
    assert len(parse_tasks_md(plan.plan_markdown).phases) == 2  # a tasks.md the developer runs


async def test_the_demo_model_runs_as_an_activity_too(probe):
    [got], _ = await probe(AgentCall(agent="reviewer", model="demo"))
    assert got.output["approved"] and DEMO_LABEL in got.output["comments"][0]


def _settings(**kw: Any) -> Settings:
    return Settings(library_paths=[SHIPPED_LIBRARY], **kw)


@pytest.mark.parametrize(
    ("agent", "model", "env", "says"),
    [
        ("planner", "rules", {}, None),
        ("reviewer", "demo", {}, None),
        ("analyst", "openai:gpt-4o", {"OPENAI_API_KEY": "k"}, None),
        ("analyst", "openai:gpt-4o", {}, "OPENAI_API_KEY is not set"),
        ("architect", "anthropic:claude-sonnet-4-5", {}, "ANTHROPIC_API_KEY is not set"),
        ("reviewer", "rules", {}, "rules plans only"),
        ("reviewer", "mistral:large", {}, "unknown model provider"),
        ("reviewer", "gpt-4o", {}, "write PROVIDER:NAME"),
        ("reviewer", "openai:", {}, "write PROVIDER:NAME"),
        ("planner", "local:llama3", {}, None),
        ("planner", "vllm:qwen", {}, "VLLM_KEY is not set"),
        ("planner", "vllm:qwen", {"VLLM_KEY": "k"}, None),
        ("planner", "test:unregistered", {}, "no test model is registered"),
        ("developer", "openai:gpt-4o", {"OPENAI_API_KEY": "k"}, "drop models.developer"),
        ("coder", "demo", {}, "unknown agent"),
    ],
)
def test_check_model_says_what_is_wrong_and_what_to_do(agent, model, env, says):
    settings = _settings(
        model_providers={
            "local": {"base_url": "http://localhost:11434/v1"},
            "vllm": {"base_url": "http://gpu:8000/v1", "api_key_env": "VLLM_KEY"},
        }
    )
    problem = check_model(agent, model, settings, env=env)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and says in problem and f"models.{agent}" in problem


def test_settings_read_models_and_providers_from_the_environment():
    settings = Settings.from_env(
        {
            "PHASEGATE_MODELS": '{"planner": "rules", "reviewer": "local:llama3"}',
            "PHASEGATE_MODEL_PROVIDERS": '{"local": {"base_url": "http://h:11434/v1/"}}',
        },
        default_library=SHIPPED_LIBRARY,
    )
    assert settings.models == {"planner": "rules", "reviewer": "local:llama3"}
    assert settings.model_providers["local"].base_url == "http://h:11434/v1"
    assert settings.model_providers["local"].api_key_env is None


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("PHASEGATE_MODELS", '{"coder": "demo"}', "key 'coder'"),
        ("PHASEGATE_MODELS", "openai:gpt-4o", "not JSON"),
        ("PHASEGATE_MODEL_PROVIDERS", '{"openai": {"base_url": "http://x"}}', "provider name"),
        ("PHASEGATE_MODEL_PROVIDERS", '{"o": {"base_url": "localhost:1"}}', "o.base_url"),
        ("PHASEGATE_MODEL_PROVIDERS", '{"o": {"base_url": "http://x", "key": "s"}}', "o.key"),
        (
            "PHASEGATE_MODEL_PROVIDERS",
            '{"o": {"base_url": "http://x", "api_key_env": "sk-1"}}',
            "not the key",
        ),
    ],
)
def test_bad_model_settings_name_the_variable(variable, value, says):
    with pytest.raises(PhasegateError) as err:
        Settings.from_env({variable: value}, default_library=SHIPPED_LIBRARY)
    text = str(err.value)
    assert text.startswith(f"{variable}: ") and says in text and "JSON object such as" in text
