"""An orchestration agent's prompt, rendered in the model-request activity that sends it.

Runs recorded before patch ``orchestration-one-activity-step`` rendered a prompt in a
``render_agent_prompt`` activity, whose result history stored, and then sent it again
in pydantic-ai's model-request activity's input (the instructions twice there: in the
request message and in the request parameters): three copies, and one more activity
round trip and workflow task per step. Now the workflow hands pydantic-ai a *render
request* as the user prompt (:func:`render_mark`: a mark line, then the
:class:`~phasegate.domain.orchestration.context.AgentPromptRequest` as JSON, the
sections of state the agent may see: what the render activity took as input). In the
model-request activity, :class:`PromptInRequest` (the outermost wrapper of every model
an agent resolves) renders it with the worker's prompts
(:func:`~phasegate.activities.agent_prompts.current_prompts`), sends the instructions
and the user message it rendered, and returns the answer with that prompt in the
answer's ``metadata`` (pydantic-ai's field for what the application reads and the
model never sees). History holds the prompt once, in the model request's result,
where the Web UI and ``temporal workflow show`` show it; the workflow reads it back
(:func:`recorded_prompt`) for its ``agent_prompt`` query.

An answer that does not validate goes back to the model with the conversation: the
workflow-side capability :class:`LeaveOutRecordedPrompts` leaves the recorded prompt
out of the copy sent (it is in history already), and the activity renders the mark
again (the same request renders the same prompt: the prompt file is cached, the
standards come from the same index).

Trust (``TEMPORAL_NOTES``: an activity's input is only as trustworthy as its proof):
the render request comes from the activity's input, as the render activity's did; the
worker's CallerCheck runs a model request only for phasegate's own workflow runs, and
a render reads nothing but the worker's prompt files and standards of no phase. A user
prompt that starts with the mark but is no render request fails the request; it never
reaches a model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeGuard

from pydantic import ValidationError
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    UserPromptPart,
)
from pydantic_ai.models import (
    Model,
    ModelRequestContext,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from phasegate.activities.agent_prompts import AgentPrompts, current_prompts
from phasegate.domain.errors import DefinitionError
from phasegate.domain.orchestration.context import AgentPrompt, AgentPromptRequest
from phasegate.temporal import application_error

__all__ = [
    "PROMPT_METADATA",
    "RENDER_MARK",
    "LeaveOutRecordedPrompts",
    "PromptInRequest",
    "recorded_prompt",
    "render_mark",
]

RENDER_MARK = "[phasegate: the model-request activity renders this agent prompt]\n"
"""First line of a user prompt that is a render request, never text for a model."""

PROMPT_METADATA = "phasegate_prompt"
"""Key of the rendered prompt in the first answer's ``ModelResponse.metadata``."""


def render_mark(req: AgentPromptRequest) -> str:
    """The user prompt that asks the model-request activity to render ``req``."""
    return RENDER_MARK + req.model_dump_json()


def recorded_prompt(messages: Sequence[ModelMessage]) -> AgentPrompt | None:
    """The prompt the model-request activity rendered and recorded (the first answer's
    metadata), or None when no answer carries one."""
    for message in messages:
        if isinstance(message, ModelResponse) and message.metadata:
            found = message.metadata.get(PROMPT_METADATA)
            if found is not None:
                return AgentPrompt.model_validate(found)
    return None


def _marked(part: object) -> TypeGuard[UserPromptPart]:
    return (
        isinstance(part, UserPromptPart)
        and isinstance(part.content, str)
        and part.content.startswith(RENDER_MARK)
    )


def _render_request(messages: Sequence[ModelMessage]) -> AgentPromptRequest | None:
    """The render request in ``messages`` (the run's first user prompt), if any.

    Raises:
        ApplicationError: Non-retryable: a marked prompt that is no render request.
    """
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if _marked(part):
                    try:
                        return AgentPromptRequest.model_validate_json(
                            str(part.content)[len(RENDER_MARK) :]
                        )
                    except ValidationError as exc:
                        raise application_error(
                            DefinitionError(
                                f"the agent prompt's render request is not valid: {exc}",
                                where="model request",
                                hint="only phasegate's workflows ask for a rendered prompt",
                            )
                        ) from None
    return None


def _with_prompt(
    messages: Sequence[ModelMessage], params: ModelRequestParameters, prompt: AgentPrompt
) -> tuple[list[ModelMessage], ModelRequestParameters]:
    """``messages`` with the render request replaced by the rendered user message (and
    that request's instructions set), and ``params`` with the rendered instructions first."""
    sent: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelRequest) and any(_marked(p) for p in message.parts):
            parts = [_rendered(p, prompt) if _marked(p) else p for p in message.parts]
            message = dataclasses.replace(message, parts=parts, instructions=prompt.instructions)
        sent.append(message)
    own = InstructionPart(content=prompt.instructions)
    params = dataclasses.replace(params, instruction_parts=[own, *(params.instruction_parts or [])])
    return sent, params


def _rendered(part: UserPromptPart, prompt: AgentPrompt) -> UserPromptPart:
    return dataclasses.replace(part, content=prompt.prompt)


class PromptInRequest(WrapperModel):
    """Renders a render request (:func:`render_mark`) in the model-request activity and
    records what it sent in the first answer's metadata; any other request goes through
    unchanged (a graph's agent step, a prompt given as text).

    Args:
        wrapped: The model that answers.
        prompts: The prompts to render with; default: the worker's
            (:func:`~phasegate.activities.agent_prompts.current_prompts`).
    """

    def __init__(self, wrapped: Model, prompts: AgentPrompts | None = None) -> None:
        super().__init__(wrapped)
        self._prompts = prompts

    async def _prepared(
        self, messages: list[ModelMessage], params: ModelRequestParameters
    ) -> tuple[list[ModelMessage], ModelRequestParameters, AgentPrompt | None]:
        req = _render_request(messages)
        if req is None:
            return messages, params, None
        prompts = self._prompts or current_prompts()
        if prompts is None:
            raise application_error(
                DefinitionError(
                    "this worker renders no agent prompts: its model-request activities "
                    "have no AgentPrompts",
                    where="worker",
                    hint="build the worker with phasegate.worker.build_worker (it adds "
                    "AgentPrompts.plugin()), or run `phasegate worker`",
                )
            )
        prompt = await prompts.render_in_activity(req)
        sent, params = _with_prompt(messages, params, prompt)
        return sent, params, prompt

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        sent, params, prompt = await self._prepared(messages, model_request_parameters)
        response = await self.wrapped.request(sent, model_settings, params)
        if prompt is None or any(isinstance(m, ModelResponse) for m in messages):
            return response  # a later request of the run: its first answer has the prompt
        metadata = {**(response.metadata or {}), PROMPT_METADATA: prompt.model_dump(mode="json")}
        return dataclasses.replace(response, metadata=metadata)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        # No agent here streams; should one, it still sends the prompt, never the mark.
        sent, params, _ = await self._prepared(messages, model_request_parameters)
        async with self.wrapped.request_stream(sent, model_settings, params, run_context) as s:
            yield s


@dataclasses.dataclass
class LeaveOutRecordedPrompts(AbstractCapability[Any]):
    """Workflow side: a request that sends earlier answers back (an answer that did not
    validate) sends them without the recorded prompt, which history already holds."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        request_context.messages = [_without_prompt(m) for m in request_context.messages]
        return request_context

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None


def _without_prompt(message: ModelMessage) -> ModelMessage:
    if isinstance(message, ModelResponse) and PROMPT_METADATA in (message.metadata or {}):
        rest = {k: v for k, v in (message.metadata or {}).items() if k != PROMPT_METADATA}
        return dataclasses.replace(message, metadata=rest or None)
    return message
