"""FakeOpenAI, the public loopback test double, seen through the real OpenAI SDK: each
scripted answer arrives as the SDK parses OpenAI's own, errors raise the SDK's own
exceptions, and every request is recorded."""

from __future__ import annotations

import json

import openai
import pytest
from openai import AsyncOpenAI

from phasegate.domain.orchestration.agents import ReviewResult
from phasegate.testing.fake_openai import FakeOpenAI

TOOL = {
    "type": "function",
    "function": {"name": "final_result", "parameters": {"type": "object", "properties": {}}},
}
ASK = [{"role": "user", "content": "review this"}]


def _client(fake: FakeOpenAI) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0)


async def test_a_tool_call_answer_parses_with_its_arguments_and_usage():
    async with FakeOpenAI() as fake:
        review = ReviewResult(approved=True, comments=["fine"], confidence=0.9)
        fake.tool_call(review, prompt_tokens=12, completion_tokens=5).tool_call(
            {"x": 1}, name="other"
        )
        client = _client(fake)
        first = await client.chat.completions.create(model="m-1", messages=ASK, tools=[TOOL])
        second = await client.chat.completions.create(model="m-1", messages=ASK, tools=[TOOL])

    [call] = first.choices[0].message.tool_calls or []
    assert call.function.name == "final_result"  # the request's first tool
    assert ReviewResult.model_validate_json(call.function.arguments) == review
    assert first.choices[0].finish_reason == "tool_calls" and first.model == "m-1"
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (12, 5)
    assert first.usage.total_tokens == 17
    [other] = second.choices[0].message.tool_calls or []
    assert other.function.name == "other" and json.loads(other.function.arguments) == {"x": 1}
    assert first.id != second.id


async def test_malformed_arguments_arrive_as_sent_and_text_as_content():
    async with FakeOpenAI() as fake:
        fake.malformed().malformed('{"approved": tru').text("just words")
        client = _client(fake)
        answers = [
            await client.chat.completions.create(model="m", messages=ASK, tools=[TOOL])
            for _ in range(3)
        ]

    raw = [(a.choices[0].message.tool_calls or [None])[0] for a in answers[:2]]
    assert [c.function.arguments for c in raw if c] == [
        '{"answer": "unterminated',
        '{"approved": tru',
    ]
    for call in raw:
        assert call is not None
        with pytest.raises(json.JSONDecodeError):
            json.loads(call.function.arguments)
    text = answers[2].choices[0]
    assert text.message.content == "just words" and not text.message.tool_calls
    assert text.finish_reason == "stop"


@pytest.mark.parametrize(
    ("status", "error", "says"),
    [
        (429, openai.RateLimitError, "Rate limit"),
        (500, openai.InternalServerError, "server had an error"),
        (401, openai.AuthenticationError, "Incorrect API key"),
        (404, openai.NotFoundError, "does not exist"),
    ],
)
async def test_scripted_errors_raise_the_sdks_own_exceptions(status, error, says):
    async with FakeOpenAI() as fake:
        fake.error(status, retry_after=2 if status == 429 else None)
        with pytest.raises(error) as err:
            await _client(fake).chat.completions.create(model="m", messages=ASK)

    assert err.value.status_code == status and says in err.value.message
    assert isinstance(err.value.body, dict) and says in err.value.body["message"]
    retry_after = err.value.response.headers.get("retry-after")
    assert retry_after == ("2" if status == 429 else None)


async def test_every_request_is_recorded_with_what_it_was_answered():
    async with FakeOpenAI() as fake:
        fake.error(429, retry_after=1).tool_call({"ok": True})
        assert fake.pending == 2
        client = _client(fake)
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="m", messages=ASK, tools=[TOOL])
        await client.chat.completions.create(model="m", messages=ASK, tools=[TOOL])
        assert fake.pending == 0
        requests = fake.requests

    assert [(r.method, r.path, r.status, r.reply) for r in requests] == [
        ("POST", "/v1/chat/completions", 429, "error"),
        ("POST", "/v1/chat/completions", 200, "tool_call"),
    ]
    assert all(r.headers["authorization"] == "Bearer sk-fake" for r in requests)
    assert requests[1].messages == ASK and requests[1].tool_names == ["final_result"]


async def test_a_request_with_nothing_scripted_fails_fast_and_says_why():
    async with FakeOpenAI() as fake:
        client = _client(fake)
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(model="m", messages=ASK)
        assert "no scripted answer left for request #1" in err.value.message
        with pytest.raises(openai.NotFoundError):
            await client.models.list()
        with pytest.raises(openai.BadRequestError, match="no scripted answer left"):
            await client.chat.completions.create(model="m", messages=ASK, stream=True)
        assert [r.reply for r in fake.requests] == ["unscripted", "not_found", "unscripted"]


def test_two_servers_have_their_own_ports_and_base_url_needs_a_running_one():
    fake = FakeOpenAI()
    with pytest.raises(RuntimeError, match="not running"):
        _ = fake.base_url
    with fake, FakeOpenAI() as other:
        assert fake.base_url.startswith("http://127.0.0.1:") and fake.base_url.endswith("/v1")
        assert fake.base_url != other.base_url
    with pytest.raises(RuntimeError):
        _ = fake.base_url  # stopped
