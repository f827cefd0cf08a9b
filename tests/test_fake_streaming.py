"""The provider fakes as streaming clients see them: Anthropic's Messages events, OpenAI
chat-completion chunks and the Responses API's events, each read by the real SDK in
streaming mode (its own accumulator builds the final message) and by pydantic-ai; a
request the real API would refuse uses up no scripted answer; a ``respond`` step reads
the conversation's tool results. No dev server: these run in well under a second."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import anthropic
import openai
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from phasegate.domain.orchestration.agents import ReviewResult
from phasegate.testing.fake_anthropic import FakeAnthropic
from phasegate.testing.fake_openai import FakeOpenAI, FakeReply, FakeRequest

REVIEW = ReviewResult(approved=True, comments=["fine", "a long comment " * 4], confidence=0.9)
ASK = [{"role": "user", "content": "review this"}]
ANTHROPIC_TOOL = {"name": "final_result", "input_schema": {"type": "object", "properties": {}}}
CHAT_TOOL = {
    "type": "function",
    "function": {"name": "final_result", "parameters": {"type": "object", "properties": {}}},
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "final_result",
    "parameters": {"type": "object", "properties": {}},
}


def _anthropic(fake: FakeAnthropic) -> AsyncAnthropic:
    return AsyncAnthropic(base_url=fake.base_url, api_key="x", max_retries=0)


def _openai(fake: FakeOpenAI) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0)


# --- Anthropic Messages, streamed ---------------------------------------------------


async def test_anthropic_streams_a_tool_use_in_the_exact_event_sequence():
    async with FakeAnthropic() as fake:
        fake.tool_call(REVIEW, prompt_tokens=12, completion_tokens=5)
        client = _anthropic(fake)
        stream = await client.messages.create(
            model="claude-test", max_tokens=100, messages=ASK, tools=[ANTHROPIC_TOOL], stream=True
        )
        events = [event async for event in stream]
        await client.close()

    kinds = [e.type for e in events]
    deltas = kinds.count("content_block_delta")
    assert kinds == [  # the SDK drops ``ping``; the wire (below) has it
        "message_start",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert deltas > 2  # the input arrives in pieces
    start, block = events[0], events[1]
    assert start.type == "message_start" and start.message.content == []
    assert start.message.usage.input_tokens == 12
    assert block.type == "content_block_start" and block.content_block.type == "tool_use"
    assert block.content_block.name == "final_result" and block.content_block.input == {}
    parts = [e.delta for e in events if e.type == "content_block_delta"]
    assert all(p.type == "input_json_delta" for p in parts)
    joined = "".join(p.partial_json for p in parts if p.type == "input_json_delta")
    assert ReviewResult.model_validate_json(joined) == REVIEW
    final = events[-2]
    assert final.type == "message_delta" and final.delta.stop_reason == "tool_use"
    assert final.usage.output_tokens == 5
    [request] = fake.requests
    assert (request.stream, request.reply, request.status) == (True, "tool_call", 200)


def _event_names(url: str, body: dict, headers: dict[str, str]) -> list[str]:
    """The ``event:`` names of a raw server-sent event stream, in order."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"content-type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert answer.headers["transfer-encoding"] == "chunked"
        text = answer.read().decode()
    return [line[7:] for line in text.splitlines() if line.startswith("event: ")]


async def test_anthropic_wire_has_ping_after_the_first_block_start():
    async with FakeAnthropic() as fake:
        fake.text("hello world, streamed")
        body = {"model": "m", "max_tokens": 5, "messages": ASK, "stream": True}
        headers = {"anthropic-version": "2023-06-01"}
        names = await asyncio.to_thread(_event_names, fake.base_url + "/v1/messages", body, headers)
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[3:-3] == ["content_block_delta"] * 2
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]


async def test_anthropic_stream_helper_builds_the_same_message_as_the_json_answer():
    async with FakeAnthropic() as fake:
        fake.tool_call(REVIEW).text("just words, " * 5).tool_call(REVIEW)
        client = _anthropic(fake)
        ask = {
            "model": "claude-test",
            "max_tokens": 100,
            "messages": ASK,
            "tools": [ANTHROPIC_TOOL],
        }
        async with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
            streamed = await stream.get_final_message()
        async with client.messages.stream(**ask) as stream:  # type: ignore[arg-type]
            text = await stream.get_final_text()
        whole = await client.messages.create(**ask)  # type: ignore[arg-type]
        await client.close()

    [use] = streamed.content
    assert use.type == "tool_use" and ReviewResult.model_validate(use.input) == REVIEW
    assert streamed.stop_reason == "tool_use" and streamed.usage.output_tokens == 10
    assert text == "just words, " * 5
    assert whole.content[0].type == "tool_use" and whole.content[0].input == use.input


async def test_pydantic_ai_streams_a_typed_output_from_fake_anthropic():
    async with FakeAnthropic() as fake:
        fake.tool_call(REVIEW)
        model = AnthropicModel(
            "claude-test", provider=AnthropicProvider(api_key="x", base_url=fake.base_url)
        )
        agent = Agent(model, output_type=ReviewResult)
        async with agent.run_stream("review this") as run:
            got = await run.get_output()
    assert got == REVIEW
    [request] = fake.requests
    assert request.stream and request.tool_names == ["final_result"]


# --- OpenAI chat completions, streamed ----------------------------------------------


async def test_chat_completions_stream_chunks_tool_calls_usage_and_done():
    async with FakeOpenAI() as fake:
        fake.tool_call(REVIEW, prompt_tokens=7, completion_tokens=3).text("hello there")
        client = _openai(fake)
        stream = await client.chat.completions.create(
            model="m",
            messages=ASK,  # type: ignore[arg-type]
            tools=[CHAT_TOOL],  # type: ignore[list-item]
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        async with client.chat.completions.stream(model="m", messages=ASK) as helper:  # type: ignore[arg-type]
            text = await helper.get_final_completion()
        await client.close()

    assert chunks[0].choices[0].delta.role == "assistant"
    calls = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]
    assert calls[0][0].function is not None and calls[0][0].function.name == "final_result"
    assert calls[0][0].id is not None and all(c[0].id is None for c in calls[1:])
    arguments = "".join(c[0].function.arguments or "" for c in calls if c[0].function)
    assert ReviewResult.model_validate_json(arguments) == REVIEW and len(calls) > 2
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (7, 3)
    assert text.choices[0].message.content == "hello there"
    assert text.choices[0].finish_reason == "stop"
    raw = fake.requests
    assert [(r.stream, r.reply) for r in raw] == [(True, "tool_call"), (True, "text")]


async def test_pydantic_ai_chat_model_streams_a_typed_output():
    async with FakeOpenAI() as fake:
        fake.tool_call(REVIEW)
        model = OpenAIChatModel(
            "gpt-test", provider=OpenAIProvider(base_url=fake.base_url, api_key="sk-fake")
        )
        async with Agent(model, output_type=ReviewResult).run_stream("review this") as run:
            assert await run.get_output() == REVIEW
    [request] = fake.requests
    assert request.stream and request.path == "/v1/chat/completions"


# --- OpenAI Responses API (what Codex speaks) ----------------------------------------


async def test_responses_api_streams_the_typed_events_from_created_to_completed():
    async with FakeOpenAI() as fake:
        fake.tool_call(REVIEW, name="review", prompt_tokens=9, completion_tokens=4)
        fake.text("all done here")
        client = _openai(fake)
        stream = await client.responses.create(
            model="gpt-test",
            input="review this",
            tools=[RESPONSES_TOOL],
            stream=True,  # type: ignore[list-item]
        )
        events = [event async for event in stream]
        async with client.responses.stream(model="gpt-test", input="go") as helper:
            final_text = await helper.get_final_response()
        await client.close()

    kinds = [e.type for e in events]
    deltas = kinds.count("response.function_call_arguments.delta")
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * deltas,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert deltas > 2
    done = events[-1]
    assert done.type == "response.completed" and done.response.status == "completed"
    [item] = done.response.output
    assert item.type == "function_call" and item.name == "review"
    assert ReviewResult.model_validate_json(item.arguments) == REVIEW
    assert done.response.usage is not None and done.response.usage.input_tokens == 9
    assert final_text.output_text == "all done here"


async def test_responses_api_text_stream_carries_content_part_events():
    async with FakeOpenAI() as fake:
        fake.text("one two three four five six seven")
        client = _openai(fake)
        stream = await client.responses.create(model="gpt-test", input="go", stream=True)
        kinds = [event.type async for event in stream]
        await client.close()
    deltas = kinds.count("response.output_text.delta")
    assert deltas > 1 and kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_pydantic_ai_responses_model_reads_a_typed_output(stream):
    async with FakeOpenAI() as fake:
        fake.tool_call(REVIEW)
        model = OpenAIResponsesModel(
            "gpt-test", provider=OpenAIProvider(base_url=fake.base_url, api_key="sk-fake")
        )
        agent = Agent(model, output_type=ReviewResult)
        if stream:
            async with agent.run_stream("review this") as run:
                got = await run.get_output()
        else:
            got = (await agent.run("review this")).output
    assert got == REVIEW
    [request] = fake.requests
    assert request.path == "/v1/responses" and request.stream is stream
    assert request.tool_names == ["final_result"]


async def test_responses_api_errors_are_openais_shape():
    async with FakeOpenAI() as fake:
        fake.error(429, retry_after=1)
        client = _openai(fake)
        with pytest.raises(openai.RateLimitError) as err:
            await client.responses.create(model="gpt-test", input="go", stream=True)
        await client.close()
    assert "Rate limit" in err.value.message
    assert err.value.response.headers["retry-after"] == "1"


# --- refusals use up nothing; respond reads the conversation --------------------------


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    """A raw POST (what no SDK would send), its status and JSON answer."""
    request = urllib.request.Request(url, body, {"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


async def test_a_request_the_api_would_refuse_uses_up_no_scripted_answer():
    async with FakeAnthropic() as fake:
        fake.text("kept")
        url = fake.base_url + "/v1/messages"
        versioned = {"anthropic-version": "2023-06-01"}
        whole = json.dumps({"model": "m", "max_tokens": 5, "messages": ASK}).encode()
        no_tokens = json.dumps({"model": "m", "messages": ASK}).encode()
        no_version, no_tokens_answer, not_json = [
            await asyncio.to_thread(_post, url, body, headers)
            for body, headers in ((whole, {}), (no_tokens, versioned), (b"{oops", versioned))
        ]
        assert fake.pending == 1
        client = _anthropic(fake)
        kept = await client.messages.create(model="m", max_tokens=5, messages=ASK)  # type: ignore[arg-type]
        await client.close()
    assert [s for s, _ in (no_version, no_tokens_answer, not_json)] == [400] * 3
    assert "anthropic-version" in no_version[1]["error"]["message"]
    assert "max_tokens" in no_tokens_answer[1]["error"]["message"]
    assert kept.content[0].type == "text" and kept.content[0].text == "kept"
    assert [r.reply for r in fake.requests] == ["refused"] * 3 + ["text"]

    async with FakeOpenAI() as fake:
        fake.text("kept")
        client = _openai(fake)
        with pytest.raises(openai.BadRequestError, match="input"):
            await client.post("/responses", body={"model": "m"}, cast_to=object)
        with pytest.raises(openai.BadRequestError, match="model"):
            await client.post("/chat/completions", body={"messages": ASK}, cast_to=object)
        assert fake.pending == 1
        answer = await client.responses.create(model="m", input="go")
        await client.close()
    assert answer.output_text == "kept"


async def test_respond_answers_from_the_tool_results_of_the_conversation():
    seen: list[FakeRequest] = []

    def next_step(request: FakeRequest) -> FakeReply:
        seen.append(request)
        session = json.loads(request.tool_results[-1])["session_id"]
        return FakeReply.tool_call({"session_id": session}, name="get_current_phase")

    async with FakeAnthropic() as fake:
        fake.respond(next_step)
        client = _anthropic(fake)
        turn = [
            {"role": "user", "content": "start"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "start", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": '{"session_id": "s-42"}',
                    }
                ],
            },
        ]
        async with client.messages.stream(
            model="claude-test",
            max_tokens=50,
            messages=turn,  # type: ignore[arg-type]
        ) as stream:
            answer = await stream.get_final_message()
        await client.close()
    [use] = answer.content
    assert use.type == "tool_use" and (use.name, use.input) == (
        "get_current_phase",
        {"session_id": "s-42"},
    )
    assert seen[0].stream and fake.requests[0].reply == "respond"


def test_tool_results_are_read_in_every_wire_format():
    chat = FakeRequest(
        "POST",
        "/v1/chat/completions",
        {},
        {"messages": [{"role": "tool", "tool_call_id": "c", "content": "one"}]},
        200,
        "text",
    )
    responses = FakeRequest(
        "POST",
        "/v1/responses",
        {},
        {"input": [{"type": "function_call_output", "call_id": "c", "output": "two"}]},
        200,
        "text",
    )
    blocks = FakeRequest(
        "POST",
        "/v1/messages",
        {},
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [{"type": "text", "text": "three"}],
                        }
                    ],
                }
            ]
        },
        200,
        "text",
    )
    assert [r.tool_results for r in (chat, responses, blocks)] == [["one"], ["two"], ["three"]]


async def test_a_namespaced_tool_is_called_in_its_namespace_as_codex_offers_mcp_tools():
    group = {
        "type": "namespace",
        "name": "mcp__phasegate",
        "description": "phasegate's MCP tools",
        "tools": [{"type": "function", "name": "start_session", "parameters": {}}],
    }
    async with FakeOpenAI() as fake:
        fake.tool_call({"workflow_type": "w"}, name="mcp__phasegate__start_session")
        client = _openai(fake)
        stream = await client.responses.create(
            model="gpt-test",
            input="go",
            tools=[group],  # type: ignore[list-item]
            stream=True,
        )
        events = [event async for event in stream]
        await client.close()
    assert fake.requests[0].tool_names == ["mcp__phasegate__start_session"]
    done = events[-1]
    assert done.type == "response.completed"
    [item] = done.response.output
    assert item.type == "function_call" and (item.namespace, item.name) == (
        "mcp__phasegate",
        "start_session",
    )


async def test_a_script_step_that_raises_is_answered_500_and_recorded():
    def broken(request: FakeRequest) -> FakeReply:
        raise KeyError("session_id")

    async with FakeAnthropic() as fake:
        fake.respond(broken).text("next")
        client = _anthropic(fake)
        with pytest.raises(anthropic.InternalServerError, match="raised KeyError"):
            await client.messages.create(model="m", max_tokens=5, messages=ASK)  # type: ignore[arg-type]
        await client.close()
    assert [r.reply for r in fake.requests] == ["script_error"] and fake.pending == 1
    assert fake.script_errors == ["FakeAnthropic: scripted answer #1 raised KeyError('session_id')"]
