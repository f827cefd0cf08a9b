"""The LLM agents of an orchestration: each model request is a Temporal activity.

Four pydantic-ai agents (planner, analyst, architect, reviewer; the developer works
through a gated session instead) are built here, at import time, with the
``TemporalDurability`` capability: inside a workflow, ``agent.run`` schedules one
``agent__phasegate_<name>__model_request`` activity per model request, retried by
Temporal (:data:`MODEL_RETRY_POLICY`), and validates the answer against the agent's
output model (``domain/orchestration/agents.py``); an answer that does not validate is sent back to
the model with the validation error, up to :data:`OUTPUT_RETRIES` times.

Workflow code calls :func:`run_llm_agent` and gets the validated output and the
step's :class:`~phasegate.domain.orchestration.agents.StepUsage`, or a non-retryable
``ApplicationError`` that says which agent, which model and what to do (an answer over
``MAX_MODEL_RESPONSE_BYTES`` is ``agent_output_too_large``: a failed step). The worker
registers the activities with ``plugins=[PydanticAIPlugin()]`` on a workflow class
that lists :data:`LLM_AGENTS` in ``__pydantic_ai_agents__``, and calls
:func:`configure_models` with ``settings.model_providers`` at start;
:func:`check_model` checks a model id before a run relies on it.

Model ids (only the id crosses into history, never a key):

- ``demo``: offline canned answers (:mod:`phasegate.activities._demo_model`);
- ``openai:NAME`` / ``anthropic:NAME``: keys from ``OPENAI_API_KEY`` /
  ``ANTHROPIC_API_KEY`` in the worker's environment;
- ``PROVIDER:NAME``: an OpenAI-compatible server from ``PHASEGATE_MODEL_PROVIDERS``
  (Ollama, vLLM), its key (if any) from the variable the provider names;
- ``test:KEY``: a model a test registered in this process
  (:func:`phasegate.testing.register_model`);
- ``rules``: the rules planner, which the workflow runs itself (never reaches here).

Provider clients are built with ``max_retries=0``: Temporal owns retries, so a 429
or a 500 shows in history as an activity retry instead of hiding inside one attempt.

Workflow code must import this module inside ``workflow.unsafe.imports_passed_through()``
so the workflow and the worker share one copy of the agents and the provider table.
Threat level: API keys live only in the worker's environment (level 3 holds them
away from workflow history and from every client, not from a shell on the worker).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_ai import Agent
from pydantic_ai.capabilities import ResolveModelId
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelNotFoundError,
    ModelQuotaExceededError,
    UnexpectedModelBehavior,
    UserError,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, ModelResolutionContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityConfig

from phasegate.activities._demo_model import DEMO_MODEL_ID, demo_model
from phasegate.domain.errors import PhasegateError
from phasegate.domain.orchestration.agents import (
    MAX_MODEL_RESPONSE_BYTES,
    OUTPUT_TOO_LARGE,
    AgentOutput,
    AnalysisResult,
    PlannerDecision,
    PlanOutput,
    ReviewResult,
    StepUsage,
)
from phasegate.domain.settings import ProviderConfig, Settings
from phasegate.temporal import application_error

__all__ = [
    "LLM_AGENTS",
    "MODEL_ACTIVITY_TIMEOUT",
    "MODEL_RETRY_POLICY",
    "OUTPUT_RETRIES",
    "analyst_agent",
    "architect_agent",
    "build_model",
    "check_model",
    "configure_models",
    "planner_agent",
    "reviewer_agent",
    "run_llm_agent",
]

MODEL_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
"""Retries of one model request (a 429's ``Retry-After`` replaces the backoff, up to
``maximum_interval``). Rejected requests (bad key, unknown model) are never retried."""

MODEL_ACTIVITY_TIMEOUT = timedelta(minutes=5)
"""Longest one model request may take (it heartbeats; a lost worker shows in 30 s)."""

OUTPUT_RETRIES = 2
"""Times an answer that does not validate is sent back before the step fails."""

RULES_MODEL_ID = "rules"
_KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
_WORKFLOW_SIDE_KEY = "not-used-in-workflow-code"  # the workflow's copy never sends a request
_NO_KEY = "no-key-needed"  # OpenAI's client insists on some key; local servers ignore it

_PROVIDERS: dict[str, ProviderConfig] = {}
_TEST_MODELS: dict[str, Model] = {}  # phasegate.testing.register_model fills it


def configure_models(providers: Mapping[str, ProviderConfig]) -> None:
    """Set the OpenAI-compatible providers model ids may name (``settings.model_providers``).

    Called once by the worker at start, before any workflow runs; replaces the table.
    """
    _PROVIDERS.clear()
    _PROVIDERS.update(providers)


def _split(model_id: str) -> tuple[str, str]:
    provider, sep, name = model_id.partition(":")
    return (provider, name) if sep else ("", model_id)


def _key(variable: str | None, model_id: str) -> str | None:
    """The API key in ``variable``: read only in activities, never in workflow code."""
    if variable is None:
        return None
    if workflow.in_workflow():
        return _WORKFLOW_SIDE_KEY
    value = os.environ.get(variable)
    if not value:
        raise UserError(
            f"{variable} is not set in the worker's environment, so {model_id!r} cannot be "
            f"called: set {variable} where `phasegate worker` runs, or pick another model"
        )
    return value


def build_model(model_id: str, agent: str) -> Model:
    """The pydantic-ai model for ``model_id`` (see the module docs), for ``agent``.

    Pure but for reading an API key from the environment in an activity; in workflow
    code it builds the same model with a placeholder key (that copy sends nothing).

    Raises:
        UserError: An unknown provider, an unregistered ``test:`` key, a missing key.
    """
    provider, name = _split(model_id)
    if model_id == DEMO_MODEL_ID:
        return demo_model(agent)
    if model_id == RULES_MODEL_ID:
        raise UserError("'rules' is the rules planner, which runs in the workflow, not a model")
    if not name:
        raise UserError(f"model id {model_id!r} names no model: write PROVIDER:NAME")
    if provider == "test":
        if name not in _TEST_MODELS:
            raise UserError(
                f"no test model is registered as {name!r} in this process: call "
                f"phasegate.testing.register_model({name!r}, model) before the worker runs it"
            )
        return _TEST_MODELS[name]
    if provider == "anthropic":
        return _anthropic(name, _key(_KEY_VARIABLES["anthropic"], model_id))
    if provider == "openai":
        return _openai(name, None, _key(_KEY_VARIABLES["openai"], model_id))
    config = _PROVIDERS.get(provider)
    if config is None:
        raise UserError(_unknown_provider(model_id, _PROVIDERS))
    return _openai(name, config.base_url, _key(config.api_key_env, model_id) or _NO_KEY, provider)


# The SDKs load lazily (anthropic alone takes over a second); the workflow sandbox
# passes both through (PydanticAIPlugin), so importing them late there is safe.
def _openai(name: str, base_url: str | None, key: str | None, provider: str = "openai") -> Model:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.profiles.openai import OpenAIModelProfile
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    if provider == "openai":
        return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))
    # Another server: the profile OpenAI-compatible APIs share, and the answer's cap in
    # max_tokens, which Ollama, vLLM and llama.cpp all read (not OpenAI's newer field).
    profile = OpenAIModelProfile(openai_chat_supports_max_completion_tokens=False)
    compatible = OpenAICompatibleProvider(provider, openai_client=client, profile=profile)
    return OpenAIChatModel(name, provider=compatible)


def _anthropic(name: str, key: str | None) -> Model:
    from anthropic import AsyncAnthropic
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    client = AsyncAnthropic(api_key=key, max_retries=0)
    return AnthropicModel(name, provider=AnthropicProvider(anthropic_client=client))


def _unknown_provider(model_id: str, providers: Mapping[str, object]) -> str:
    known = ["openai", "anthropic", *sorted(providers)]
    return (
        f"unknown model provider in {model_id!r}: use demo, "
        + ", ".join(f"{p}:NAME" for p in known)
        + ", or add the provider to PHASEGATE_MODEL_PROVIDERS "
        '(e.g. {"ollama": {"base_url": "http://localhost:11434/v1"}})'
    )


def _resolve(ctx: ModelResolutionContext[Any], model_id: str) -> Model:
    """Build the model a run names; called in the activity and in workflow code."""
    return _SizeBounded(build_model(model_id, _AGENT_KEYS.get(ctx.agent.name or "", "")))


class _SizeBounded(WrapperModel):
    """Measures each answer in the model-request activity: one over MAX_MODEL_RESPONSE_BYTES
    fails the step (``agent_output_too_large``) saying how big it was, before Temporal's
    payload limit (which an activity cannot read) refuses it without a word of why."""

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        size = len(ModelMessagesTypeAdapter.dump_json([response]))
        if size > MAX_MODEL_RESPONSE_BYTES:  # the activity type names the agent
            raise ApplicationError(_too_large(size), type=OUTPUT_TOO_LARGE, non_retryable=True)
        return response


def _too_large(size: int | None) -> str:
    """Why an answer was refused for its size (the step fails; the planner may replan)."""
    how_big = f"{size:,} bytes" if size is not None else "over the Temporal server's payload limit"
    return (
        f"the model's answer was {how_big}; an answer may be at most "
        f"{MAX_MODEL_RESPONSE_BYTES:,} bytes (it must fit in a Temporal payload)"
    )


def _unconfigured(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise UserError("no model given: run_llm_agent passes one (profile models, PHASEGATE_MODELS)")


def _agent(key: str, output_type: type[BaseModel]) -> Agent[None, Any]:
    return Agent(
        FunctionModel(_unconfigured, model_name="unconfigured"),
        name=f"phasegate_{key}",  # in activity names, so in recorded history: never rename
        output_type=output_type,
        retries={"output": OUTPUT_RETRIES},
        capabilities=[
            TemporalDurability(
                model_activity_config=ActivityConfig(
                    start_to_close_timeout=MODEL_ACTIVITY_TIMEOUT,
                    retry_policy=MODEL_RETRY_POLICY,
                )
            ),
            ResolveModelId(_resolve),
        ],
    )


_OUTPUT_TYPES: dict[str, type[BaseModel]] = {
    "planner": PlannerDecision,
    "analyst": AnalysisResult,
    "architect": PlanOutput,
    "reviewer": ReviewResult,
}

planner_agent = _agent("planner", PlannerDecision)
analyst_agent = _agent("analyst", AnalysisResult)
architect_agent = _agent("architect", PlanOutput)
reviewer_agent = _agent("reviewer", ReviewResult)

LLM_AGENTS: dict[str, Agent[None, Any]] = {
    "planner": planner_agent,
    "analyst": analyst_agent,
    "architect": architect_agent,
    "reviewer": reviewer_agent,
}
"""The agents by role; a workflow lists ``LLM_AGENTS.values()`` in ``__pydantic_ai_agents__``."""

_AGENT_KEYS = {a.name: key for key, a in LLM_AGENTS.items()}


async def run_llm_agent(
    agent: str, *, model: str, instructions: str, prompt: str, max_tokens: int
) -> tuple[AgentOutput, StepUsage]:
    """Run one LLM agent from workflow code: its model requests are activities.

    Args:
        agent: ``planner``, ``analyst``, ``architect`` or ``reviewer``.
        model: A model id (module docs); ``rules`` is the workflow's own planner.
        instructions: The system prompt (the agent's library prompt, rendered).
        prompt: The user message (the context sections the agent sees).
        max_tokens: Cap of each answer (the profile's ``max_agent_output_tokens``).

    Returns:
        The validated output and the tokens and requests the step used.

    Raises:
        ApplicationError: Non-retryable, naming the agent, the model and what to do:
            the answer never validated, the provider refused the request (key, model
            name, quota) or kept failing after every retry.
    """
    llm = LLM_AGENTS.get(agent)
    if llm is None or model == RULES_MODEL_ID:
        problem = (
            f"{agent!r} is not an LLM agent (planner, analyst, architect, reviewer)"
            if llm is None
            else "the rules planner has no model to call"
        )
        raise _failure(agent, model, problem, "model_unusable", check_hint(agent))
    try:
        result = await llm.run(
            prompt,
            model=model,
            instructions=instructions,
            model_settings={"max_tokens": max_tokens},
        )
    except UnexpectedModelBehavior as exc:
        output = _OUTPUT_TYPES[agent].__name__
        raise _failure(
            agent,
            model,
            f"the model gave no valid {output} in {OUTPUT_RETRIES + 1} tries "
            f"(last: {_validation_problem(exc)})",
            "agent_output_invalid",
            "use a model that supports tool calls, raise the profile's "
            "max_agent_output_tokens if answers were cut off, or pick a stronger model "
            f"in the profile's models.{agent}",
        ) from None
    except ModelAPIError as exc:
        raise _model_error(agent, model, exc) from None
    except UserError as exc:  # raised in workflow code: the model id cannot be built
        if _payload_too_large(exc):  # or Temporal refused the answer for its size
            raise _failure(agent, model, _too_large(None), OUTPUT_TOO_LARGE, _SHORTER) from None
        raise _failure(
            agent, model, _first_line(exc), "model_unusable", check_hint(agent)
        ) from None
    except ActivityError as exc:  # a failure that is not the provider's answer
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == OUTPUT_TOO_LARGE:
            raise _failure(agent, model, cause.message, OUTPUT_TOO_LARGE, _SHORTER) from None
        if isinstance(cause, ApplicationError) and cause.type == "UserError":
            # The worker could not build the model (a key not set): the message says what.
            raise _failure(
                agent, model, cause.message, "model_unusable", check_hint(agent)
            ) from None
        raise _failure(
            agent,
            model,
            f"the model request failed: {_first_line(cause or exc)}",
            "model_call_failed",
            "the worker's log has the details; fix what it names, then run the step again",
        ) from None
    usage = result.usage
    return result.output, StepUsage(
        requests=usage.requests, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
    )


_SHORTER = (
    "the step failed and the planner may replan; ask for shorter answers (the agent's "
    "prompt), lower the profile's max_agent_output_tokens, or pick another model"
)


def _payload_too_large(exc: UserError) -> bool:
    """Whether pydantic-ai's UserError reports Temporal refusing a payload for its size."""
    cause = getattr(exc.__cause__, "cause", None)  # UserError <- ActivityError <- this
    return isinstance(cause, ApplicationError) and cause.type in (
        "PayloadsTooLarge",
        "PayloadSizeError",
    )


def check_hint(agent: str) -> str:
    """What to do about an unusable model of ``agent``."""
    return (
        f"set the profile's models.{agent} (or PHASEGATE_MODELS on the worker) to demo, "
        "openai:NAME, anthropic:NAME or PROVIDER:NAME from PHASEGATE_MODEL_PROVIDERS"
    )


def _model_error(agent: str, model: str, exc: ModelAPIError) -> ApplicationError:
    variable = _key_variable(model, _PROVIDERS)
    said = _provider_said(exc)
    if isinstance(exc, ModelAuthenticationError):
        fix = (
            f"set a valid key in {variable} where `phasegate worker` runs"
            if variable
            else "check the provider's credentials"
        )
        return _failure(
            agent, model, f"the provider refused the API key ({said})", "model_auth", fix
        )
    if isinstance(exc, ModelNotFoundError):
        return _failure(
            agent,
            model,
            f"the provider does not know model {_split(model)[1]!r} ({said})",
            "model_not_found",
            f"check the model name in the profile's models.{agent} (or PHASEGATE_MODELS)",
        )
    if isinstance(exc, ModelQuotaExceededError):
        return _failure(
            agent, model, f"the provider's quota is used up ({said})", "model_quota",
            "raise the quota or wait for it to reset, then run the step again; or pick "
            "another model",
        )  # fmt: skip
    return _failure(
        agent,
        model,
        f"the model request failed after {MODEL_RETRY_POLICY.maximum_attempts} attempts or "
        f"was refused ({said})",
        "model_call_failed",
        "check the provider's status and the worker's log, then run the step again; "
        "or pick another model",
    )


def _provider_said(exc: ModelAPIError) -> str:
    """``HTTP 401: <the provider's message>`` (or the error's first line)."""
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message) if message else _first_line(exc)
    return f"HTTP {status}: {text}" if status else text


def _failure(agent: str, model: str, problem: str, code: str, hint: str) -> ApplicationError:
    err = PhasegateError(
        f"{agent} agent, model {model!r}: {problem}", where=f"models.{agent}", hint=hint
    )
    err.code = code
    return application_error(err)


def _validation_problem(exc: UnexpectedModelBehavior) -> str:
    """The last validation error behind ``exc``, as ``field: message``."""
    cause = exc.__cause__
    errors: Any = None
    if isinstance(cause, ValidationError):
        errors = cause.errors(include_url=False)
    elif cause is not None:  # ToolRetryError: the retry prompt holds the errors
        errors = getattr(getattr(cause, "tool_retry", None), "content", None)
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "the answer"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{loc}: {first.get('msg', '')}{more}"
    return _first_line(cause or exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


def _key_variable(model_id: str, providers: Mapping[str, ProviderConfig]) -> str | None:
    provider, _ = _split(model_id)
    if provider in _KEY_VARIABLES:
        return _KEY_VARIABLES[provider]
    config = providers.get(provider)
    return config.api_key_env if config is not None else None


def check_model(
    agent: str, model_id: str, settings: Settings, env: Mapping[str, str] | None = None
) -> str | None:
    """What is wrong with running ``agent`` on ``model_id`` on this worker, or None.

    Checks what can be known without a request: the agent, the provider, a registered
    ``test:`` key, the API key variable. Reads ``os.environ`` unless ``env`` is given.

    Returns:
        The problem and its fix, one sentence a person can act on; None when usable.
    """
    env = os.environ if env is None else env
    where = f"models.{agent} = {model_id!r}"
    if agent == "developer":
        return (
            f"{where}: the developer runs a coding-agent CLI or an outside agent through a "
            "gated session, not a model: drop models.developer and set the profile's "
            "developer.mode / developer.command"
        )
    if agent not in LLM_AGENTS:
        return f"{where}: unknown agent; agents are {', '.join(LLM_AGENTS)}"
    if model_id == RULES_MODEL_ID:
        if agent == "planner":
            return None
        return f"{where}: rules plans only; give the {agent} a model: {check_hint(agent)}"
    if model_id == DEMO_MODEL_ID:
        return None
    provider, name = _split(model_id)
    if not provider or not name:
        return f"{where}: write PROVIDER:NAME (e.g. openai:gpt-4o) or demo; {check_hint(agent)}"
    if provider == "test":
        if name in _TEST_MODELS:
            return None
        return f"{where}: no test model is registered as {name!r} in this worker process"
    if provider not in _KEY_VARIABLES and provider not in settings.model_providers:
        return f"{where}: {_unknown_provider(model_id, settings.model_providers)}"
    variable = _key_variable(model_id, settings.model_providers)
    if variable and not env.get(variable):
        return (
            f"{where}: {variable} is not set in the worker's environment; set it where "
            "`phasegate worker` runs (keys come from the environment only), or use demo"
        )
    return None
