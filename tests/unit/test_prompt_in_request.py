"""The model-request activity's prompt rendering (activities/_prompt_in_request.py), without
a server: what the model receives, what the answer records, what is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.exceptions import ApplicationError

from phasegate.activities._prompt_in_request import (
    PROMPT_METADATA,
    RENDER_MARK,
    PromptInRequest,
    recorded_prompt,
    render_mark,
)
from phasegate.activities.agent_prompts import AgentPrompts
from phasegate.domain.orchestration.agents import Issue
from phasegate.domain.orchestration.context import AgentPromptRequest, ContextSections

ISSUE = Issue(id="42", title="Add a health endpoint", body="GET /health returns MARK-BODY.")
REQ = AgentPromptRequest(agent="analyst", sections=ContextSections(issue=ISSUE), working_dir="/w")


class Seen:
    """A model that answers at once and keeps what it was sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[ModelMessage], AgentInfo]] = []
        self.model = FunctionModel(self._answer)

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls.append((messages, info))
        return ModelResponse(parts=[TextPart("ok")])


def ask(model: PromptInRequest, messages: list[ModelMessage]) -> ModelResponse:
    return asyncio.run(model.request(messages, None, ModelRequestParameters()))


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text)])


def test_the_model_gets_the_rendered_prompt_and_the_answer_records_it() -> None:
    seen, prompts = Seen(), AgentPrompts()
    answer = ask(PromptInRequest(seen.model, prompts), [user(render_mark(REQ))])
    expected = prompts.render(REQ)
    [(messages, info)] = seen.calls
    assert info.instructions == expected.instructions.strip()  # as the agent's would be
    sent = messages[0]
    assert isinstance(sent, ModelRequest)
    assert [p.content for p in sent.parts if isinstance(p, UserPromptPart)] == [expected.prompt]
    assert "MARK-BODY" in expected.prompt and RENDER_MARK not in str(messages)
    assert recorded_prompt([answer]) == expected  # what an operator reads in history
    assert [p.content for p in answer.parts if isinstance(p, TextPart)] == ["ok"]


def test_a_later_request_of_the_run_renders_again_but_records_nothing() -> None:
    seen, prompts = Seen(), AgentPrompts()
    first = ask(PromptInRequest(seen.model, prompts), [user(render_mark(REQ))])
    again = ask(
        PromptInRequest(seen.model, prompts),
        [user(render_mark(REQ)), first, user("Your answer did not validate.")],
    )
    assert recorded_prompt([again]) is None and PROMPT_METADATA not in (again.metadata or {})
    (first_sent, first_info), (again_sent, again_info) = seen.calls
    assert _texts(again_sent[0]) == _texts(first_sent[0]) == [prompts.render(REQ).prompt]
    assert again_info.instructions == first_info.instructions  # rendered again, the same


def _texts(message: ModelMessage) -> list[Any]:
    return [p.content for p in message.parts if isinstance(p, UserPromptPart)]


def test_a_prompt_given_as_text_goes_through_unchanged() -> None:
    seen = Seen()
    answer = ask(PromptInRequest(seen.model, AgentPrompts()), [user("Review the diff.")])
    [(messages, info)] = seen.calls
    assert [_texts(m) for m in messages] == [["Review the diff."]]
    assert not info.instructions and answer.metadata is None


@pytest.mark.parametrize("body", ["not json", '{"agent": "hacker", "sections": {}}'])
def test_a_marked_prompt_that_is_no_render_request_never_reaches_a_model(body: str) -> None:
    seen = Seen()
    with pytest.raises(ApplicationError) as err:
        ask(PromptInRequest(seen.model, AgentPrompts()), [user(RENDER_MARK + body)])
    assert err.value.non_retryable and err.value.type == "definition_invalid"
    assert seen.calls == []


def test_a_worker_without_prompts_says_so_instead_of_sending_the_mark() -> None:
    seen = Seen()
    with pytest.raises(ApplicationError) as err:
        ask(PromptInRequest(seen.model), [user(render_mark(REQ))])  # no plugin, no prompts
    assert "renders no agent prompts" in str(err.value) and seen.calls == []


def test_recorded_prompt_reads_the_first_answer_that_has_one() -> None:
    prompt = AgentPrompts().render(REQ)
    plain = ModelResponse(parts=[TextPart("a")])
    marked: Any = ModelResponse(
        parts=[TextPart("b")], metadata={PROMPT_METADATA: prompt.model_dump(mode="json")}
    )
    assert recorded_prompt([user("x"), plain, marked]) == prompt
    assert recorded_prompt([user("x"), plain]) is None
