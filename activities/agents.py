"""The LLM agents of an orchestration: each model request is a Temporal activity.

Four pydantic-ai agents (planner, analyst, architect, reviewer; the developer works
through a gated session instead) are built here, at import time, with the
``TemporalDurability`` capability: inside a workflow, ``agent.run`` schedules one
``agent__phasegate_<name>__model_request`` activity per model request, retried by
Temporal (:data:`MODEL_RETRY_POLICY`), and validates the answer against the agent's
output model (``domain/orchestration/agents.py``); an answer that does not validate is sent back to
the model with the validation error, up to :data:`OUTPUT_RETRIES` times.

Workflow code calls :func:`ask_llm_agent` with the agent's render request (its prompt
is rendered in the model-request activity and recorded once, in the answer:
``activities/_prompt_in_request.py``), or :func:`run_llm_agent` with a prompt as text,
and gets the validated output and the step's
:class:`~phasegate.domain.orchestration.agents.StepUsage`, or a non-retryable
``ApplicationError`` that says which agent, which model and what to do (an answer over
``MAX_MODEL_RESPONSE_BYTES`` is ``agent_output_too_large``: a failed step; a server that
refuses the connection or does not resolve is ``model_unreachable``, after one attempt,
with no traceback in the worker's log: no plan fixes it, so the run ends). The worker
registers the activities with ``plugins=[PydanticAIPlugin()]`` on a workflow class
that lists :data:`LLM_AGENTS` in ``__pydantic_ai_agents__``, plus its own
:class:`~phasegate.activities.model_providers.ModelProviders` plugin: what a model id
names (``demo``, ``openai:NAME``, ``anthropic:NAME``, ``PROVIDER:NAME``, ``test:KEY``)
is that worker's, never a process-wide table (see that module).
:func:`check_model` checks a model id before a run relies on it.

Workflow code must import this module inside ``workflow.unsafe.imports_passed_through()``
so the workflow and the worker share one copy of the agents.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.capabilities import ResolveModelId
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
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
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ApplicationErrorCategory
from temporalio.workflow import ActivityConfig

from phasegate.activities._prompt_in_request import (
    LeaveOutRecordedPrompts,
    PromptInRequest,
    recorded_prompt,
    render_mark,
)
from phasegate.activities.model_providers import (
    RULES_MODEL_ID,
    ModelProviders,
    check_hint,
    current_providers,
    refused,
)
from phasegate.domain.errors import DefinitionError, PhasegateError, TemplateNotFound
from phasegate.domain.orchestration.agents import (
    MAX_MODEL_RESPONSE_BYTES,
    MODEL_UNREACHABLE,
    OUTPUT_TOO_LARGE,
    AgentOutput,
    AnalysisResult,
    PlannerDecision,
    PlanOutput,
    ReviewResult,
    StepUsage,
)
from phasegate.domain.orchestration.context import AgentPrompt, AgentPromptRequest
from phasegate.domain.settings import Settings
from phasegate.temporal import application_error

__all__ = [
    "LLM_AGENTS",
    "MODEL_ACTIVITY_TIMEOUT",
    "MODEL_HEARTBEAT_TIMEOUT",
    "MODEL_RETRY_POLICY",
    "OUTPUT_RETRIES",
    "AgentAnswer",
    "analyst_agent",
    "architect_agent",
    "ask_llm_agent",
    "check_model",
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
"""Longest one model request may take (it heartbeats; a lost worker shows in
:data:`MODEL_HEARTBEAT_TIMEOUT`)."""

MODEL_HEARTBEAT_TIMEOUT = timedelta(
    seconds=float(os.environ.get("PHASEGATE_MODEL_HEARTBEAT_SECONDS") or 30)
)
"""How long a model request may go without a heartbeat before Temporal gives it to another
worker (its worker died mid-request); it heartbeats every half of it. pydantic-ai's 30 s
unless ``PHASEGATE_MODEL_HEARTBEAT_SECONDS`` says otherwise where the worker starts."""

OUTPUT_RETRIES = 2
"""Times an answer that does not validate is sent back before the step fails."""


def _resolve(ctx: ModelResolutionContext[Any], model_id: str) -> Model:
    """Build the model a run names with the providers of the worker running it; called
    in the model-request activity and in workflow code. The prompt is rendered first
    (a render request's), the answer's size measured next to the model."""
    agent = _AGENT_KEYS.get(ctx.agent.name or "", "")
    return PromptInRequest(_SizeBounded(current_providers().build(model_id, agent), model_id))


class _SizeBounded(WrapperModel):
    """Measures each answer in the model-request activity: one over MAX_MODEL_RESPONSE_BYTES
    fails the step (``agent_output_too_large``) saying how big it was, before Temporal's
    payload limit (which an activity cannot read) refuses it without a word of why.

    A server that refused the connection or does not resolve fails the request at once
    (``model_unreachable``, naming the server), as a benign failure: Temporal logs it
    without a traceback (it is the configuration's fault, not the worker's)."""

    def __init__(self, wrapped: Model, model_id: str) -> None:
        super().__init__(wrapped)
        self._model_ref = model_id

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        try:
            response = await self.wrapped.request(
                messages, model_settings, model_request_parameters
            )
        except ModelConnectionError as exc:
            how = refused(exc) if exc.phase in ("connect", None) else None
            if how is None:
                raise  # a timeout, a reset, a broken answer: Temporal retries it
            raise ApplicationError(
                self._unreachable(how),
                type=MODEL_UNREACHABLE,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            ) from None
        size = len(ModelMessagesTypeAdapter.dump_json([response]))
        if size > MAX_MODEL_RESPONSE_BYTES:  # the activity type names the agent
            raise ApplicationError(_too_large(size), type=OUTPUT_TOO_LARGE, non_retryable=True)
        return response

    def _unreachable(self, how: str) -> str:
        server = current_providers().server(self._model_ref)
        if server is not None:
            name, url = server
            return (
                f"the {name} provider at {url} {how}: start that server, or fix its base_url "
                "in PHASEGATE_MODEL_PROVIDERS where `phasegate worker` runs"
            )
        url = str(getattr(self.wrapped, "base_url", "") or "").rstrip("/")
        provider = self._model_ref.partition(":")[0]
        return f"the {provider} API at {url} {how}: check the worker's network and proxy settings"


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
                    heartbeat_timeout=MODEL_HEARTBEAT_TIMEOUT,
                    retry_policy=MODEL_RETRY_POLICY,
                )
            ),
            ResolveModelId(_resolve),
            LeaveOutRecordedPrompts(),
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


@dataclass(frozen=True)
class AgentAnswer:
    """What :func:`ask_llm_agent` returns: the validated output, the tokens and requests
    the step used, and the prompt the model-request activity rendered and sent (None
    only for a model that answers without the activity's wrapper, which no worker has)."""

    output: AgentOutput
    usage: StepUsage
    prompt: AgentPrompt | None


async def ask_llm_agent(req: AgentPromptRequest, *, model: str, max_tokens: int) -> AgentAnswer:
    """Run ``req.agent`` from workflow code with its prompt rendered in the model-request
    activity (``activities/_prompt_in_request.py``): history holds the prompt once, in
    the first answer.

    Args:
        req: The render request: the agent and the sections of state it may see.
        model: A model id (module docs); ``rules`` is the workflow's own planner.
        max_tokens: Cap of each answer (the profile's ``max_agent_output_tokens``).

    Raises:
        ApplicationError: Non-retryable, as :func:`run_llm_agent`'s; a prompt file that
            does not render fails with its own error (``definition_invalid``,
            ``template_not_found``, naming ``file:line``).
    """
    result = await _run(req.agent, model, render_mark(req), None, max_tokens)
    return AgentAnswer(result.output, _usage(result), recorded_prompt(result.all_messages()))


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
    result = await _run(agent, model, prompt, instructions, max_tokens)
    return result.output, _usage(result)


def _usage(result: AgentRunResult[Any]) -> StepUsage:
    usage = result.usage
    return StepUsage(
        requests=usage.requests, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
    )


_PROMPT_FAILURES = (DefinitionError.code, TemplateNotFound.code)  # the prompt file's own errors


async def _run(
    agent: str, model: str, prompt: str, instructions: str | None, max_tokens: int
) -> AgentRunResult[Any]:
    """``agent.run`` with every failure mapped to an ApplicationError saying what to do."""
    llm = LLM_AGENTS.get(agent)
    if llm is None or model == RULES_MODEL_ID:
        problem = (
            f"{agent!r} is not an LLM agent (planner, analyst, architect, reviewer)"
            if llm is None
            else "the rules planner has no model to call"
        )
        raise _failure(agent, model, problem, "model_unusable", check_hint(agent))
    try:
        return await llm.run(
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
        raise _activity_failure(agent, model, exc) from None


def _activity_failure(agent: str, model: str, exc: ActivityError) -> ApplicationError:
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.type in _PROMPT_FAILURES:
        return cause  # the prompt file (file:line) or the render request: as it was raised
    if isinstance(cause, ApplicationError) and cause.type == OUTPUT_TOO_LARGE:
        return _failure(agent, model, cause.message, OUTPUT_TOO_LARGE, _SHORTER)
    if isinstance(cause, ApplicationError) and cause.type == MODEL_UNREACHABLE:
        return _failure(agent, model, cause.message, MODEL_UNREACHABLE, _UNREACHABLE_HINT)
    if isinstance(cause, ApplicationError) and cause.type == "UserError":
        # The worker could not build the model (a key not set): the message says what.
        return _failure(agent, model, cause.message, "model_unusable", check_hint(agent))
    return _failure(
        agent,
        model,
        f"the model request failed: {_first_line(cause or exc)}",
        "model_call_failed",
        "the worker's log has the details; fix what it names, then run the step again",
    )


_UNREACHABLE_HINT = (
    "a new plan cannot fix this: once the server answers, start the orchestration again"
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


def _model_error(agent: str, model: str, exc: ModelAPIError) -> ApplicationError:
    variable = current_providers().key_variable(model)
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
            f"the provider does not know model {model.partition(':')[2]!r} ({said})",
            "model_not_found",
            f"check the model name in the profile's models.{agent} (or PHASEGATE_MODELS)",
        )
    if isinstance(exc, ModelQuotaExceededError):
        return _failure(
            agent,
            model,
            f"the provider's quota is used up ({said})",
            "model_quota",
            "raise the quota or wait for it to reset, then run the step again; or pick "
            "another model",
        )
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


def check_model(
    agent: str, model_id: str, settings: Settings, env: Mapping[str, str] | None = None
) -> str | None:
    """What is wrong with running ``agent`` on ``model_id`` on a worker with ``settings``,
    or None (:meth:`ModelProviders.check`; a worker checks with its own providers).

    Reads ``os.environ`` unless ``env`` is given.
    """
    return ModelProviders.from_settings(settings, environ=env).check(agent, model_id)
