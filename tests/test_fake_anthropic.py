"""FakeAnthropic, the loopback Anthropic Messages server: seen through the real
``anthropic`` SDK (answers parse as Anthropic's own, errors raise the SDK's own
exceptions), then end to end on the dev server: an agent with model
``anthropic:claude-test`` whose worker finds the fake through ``ANTHROPIC_BASE_URL``,
answered 429 first, then a valid ``tool_use``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import anthropic
import pytest
from anthropic import AsyncAnthropic
from test_agent_models import AgentCall, _events, _raw, probe  # noqa: F401 (probe: fixture)

from phasegate.domain.orchestration.agents import ReviewResult, StepUsage
from phasegate.testing.fake_anthropic import FakeAnthropic

TOOL = {"name": "final_result", "input_schema": {"type": "object", "properties": {}}}
ASK = [{"role": "user", "content": "review this"}]


def _key_sent(headers: Mapping[str, str]) -> str | None:
    """The API key a request carried (``x-api-key``; the SDK 2.x sends a bearer token)."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def _client(fake: FakeAnthropic) -> AsyncAnthropic:
    return AsyncAnthropic(base_url=fake.base_url, api_key="x", max_retries=0)


async def _create(client: AsyncAnthropic, **kw: object) -> anthropic.types.Message:
    return await client.messages.create(
        model="claude-test", max_tokens=100, messages=ASK, tools=[TOOL], **kw
    )


async def test_tool_use_and_text_answers_parse_with_their_usage():
    review = ReviewResult(approved=True, comments=["fine"], confidence=0.9)
    async with FakeAnthropic() as fake:
        fake.tool_call(review, prompt_tokens=12, completion_tokens=5)
        fake.tool_call({"x": 1}, name="other").text("just words")
        client = _client(fake)
        first, second, third = [await _create(client) for _ in range(3)]
        await client.close()

    [use] = first.content
    assert use.type == "tool_use" and use.name == "final_result"  # the request's first tool
    assert ReviewResult.model_validate(use.input) == review
    assert (first.type, first.role, first.model) == ("message", "assistant", "claude-test")
    assert first.stop_reason == "tool_use" and first.id.startswith("msg_")
    assert (first.usage.input_tokens, first.usage.output_tokens) == (12, 5)
    [other] = second.content
    assert other.type == "tool_use" and (other.name, other.input) == ("other", {"x": 1})
    assert use.id != other.id and first.id != second.id
    [text] = third.content
    assert text.type == "text" and text.text == "just words"
    assert third.stop_reason == "end_turn"
    requests = fake.requests
    assert [r.path for r in requests] == ["/v1/messages"] * 3
    assert all(_key_sent(r.headers) == "x" and "anthropic-version" in r.headers for r in requests)
    assert requests[0].body["model"] == "claude-test" and requests[0].body["max_tokens"] == 100
    assert requests[0].body["tools"][0]["name"] == "final_result"


@pytest.mark.parametrize(
    ("status", "error", "kind", "says"),
    [
        (429, anthropic.RateLimitError, "rate_limit_error", "rate limit"),
        (529, anthropic.OverloadedError, "overloaded_error", "Overloaded"),
        (500, anthropic.InternalServerError, "api_error", "Internal server error"),
        (401, anthropic.AuthenticationError, "authentication_error", "invalid x-api-key"),
        (404, anthropic.NotFoundError, "not_found_error", "not found"),
    ],
)
async def test_errors_arrive_in_anthropics_shape_as_the_sdks_exceptions(status, error, kind, says):
    async with FakeAnthropic() as fake:
        fake.error(status, retry_after=2 if status == 429 else None)
        client = _client(fake)
        with pytest.raises(error) as err:
            await _create(client)
        await client.close()

    assert err.value.status_code == status
    assert err.value.body == {
        "type": "error",
        "error": {"type": kind, "message": err.value.body["error"]["message"]},
    }
    assert says in err.value.body["error"]["message"]
    assert err.value.response.headers.get("retry-after") == ("2" if status == 429 else None)
    assert [(r.status, r.reply) for r in fake.requests] == [(status, "error")]


async def test_unscripted_requests_and_other_paths_are_refused_not_retried():
    async with FakeAnthropic() as fake:
        client = _client(fake)
        with pytest.raises(anthropic.BadRequestError) as err:
            await _create(client)
        with pytest.raises(anthropic.NotFoundError):
            await client.models.list()
        await client.close()
    assert "no scripted answer left for request #1" in str(err.value)
    assert [(r.status, r.reply) for r in fake.requests] == [(400, "unscripted"), (404, "not_found")]
    with pytest.raises(RuntimeError, match="FakeAnthropic is not running"):
        _ = fake.base_url


async def test_anthropic_wire_429_then_valid_through_the_workers_environment(probe, monkeypatch):  # noqa: F811
    secret = f"sk-ant-test-{uuid.uuid4().hex}"
    review = ReviewResult(approved=False, comments=["tests missing"], confidence=0.8)
    async with FakeAnthropic() as fake:
        # The worker runs in this process: build_model's AsyncAnthropic reads both.
        monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        fake.error(429, retry_after=1).tool_call(review, prompt_tokens=80, completion_tokens=20)

        [got], history = await probe(AgentCall(agent="reviewer", model="anthropic:claude-test"))

    assert ReviewResult.model_validate(got.output) == review
    assert got.usage == StepUsage(requests=1, input_tokens=80, output_tokens=20)
    requests = fake.requests
    assert [(r.status, r.reply) for r in requests] == [(429, "error"), (200, "tool_call")]
    assert all(_key_sent(r.headers) == secret for r in requests)
    assert all(r.body["model"] == "claude-test" and r.body["max_tokens"] == 500 for r in requests)
    assert requests[0].body["tools"][0]["name"] == "final_result"
    # Temporal, not the SDK, retried the 429: one activity, its second attempt answered.
    started = _events(history, "activity_task_started_event_attributes")
    assert [s.activity_task_started_event_attributes.attempt for s in started] == [2]
    raw = _raw(history)
    assert b"anthropic:claude-test" in raw and secret.encode() not in raw
