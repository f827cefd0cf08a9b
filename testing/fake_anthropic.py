"""A loopback HTTP server speaking Anthropic's Messages API, scripted, as JSON or as
the server-sent events every streaming client (Claude Code among them) reads.

The Anthropic twin of :class:`~phasegate.testing.fake_openai.FakeOpenAI` (same script,
request log and lifecycle; only the wire format differs). Point the ``anthropic`` SDK
or Claude Code at :attr:`FakeAnthropic.base_url` (for phasegate: ``ANTHROPIC_BASE_URL``
and ``ANTHROPIC_API_KEY`` in the worker's environment, model ``anthropic:NAME``) and
queue the answers ``POST /v1/messages`` should get, one per request, in order:

- :meth:`~FakeAnthropic.tool_call`: a ``tool_use`` block (by default naming the first
  tool the request offers: pydantic-ai's output tool) with the input you give,
  ``stop_reason: tool_use``;
- :meth:`~FakeAnthropic.malformed`: the same, its ``input`` the raw string you give
  instead of an object (Anthropic never sends that; a client must not crash on it);
- :meth:`~FakeAnthropic.text`: a ``text`` block, ``stop_reason: end_turn``;
- :meth:`~FakeAnthropic.respond`: whatever a function of the request returns (a step
  that needs an id an earlier ``tool_result`` carried: :attr:`FakeRequest.tool_results`);
- :meth:`~FakeAnthropic.error`: an HTTP error (``429`` with ``retry-after``, ``529``
  overloaded, ``500``, ``401``...) in Anthropic's shape
  ``{"type": "error", "error": {"type": "rate_limit_error", "message": ...}}``;
- :meth:`~FakeAnthropic.hang` / :meth:`~FakeAnthropic.release`: a request held
  unanswered, then its connection closed.

With ``"stream": true`` the answer is the event sequence of Anthropic's streaming
Messages API: ``message_start``, ``content_block_start``, ``ping``, the
``content_block_delta`` events (``text_delta``, or ``input_json_delta`` pieces of a
``tool_use`` input), ``content_block_stop``, ``message_delta`` (stop reason, output
tokens) and ``message_stop``.

Every answer carries ``usage`` (``input_tokens``, ``output_tokens``; the script's
``prompt_tokens`` / ``completion_tokens``). :attr:`~FakeAnthropic.requests` records
every request (headers such as ``x-api-key``, the JSON body). A request the real API
would refuse (not JSON, no ``model`` / ``max_tokens`` / ``messages``, no
``anthropic-version`` header) gets a 400 and uses up no scripted answer; a request
with no scripted answer left gets a 400 that says so.

Example::

    async with FakeAnthropic() as fake:
        fake.error(429, retry_after=1).tool_call({"approved": True, "confidence": 0.9})
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        ...  # run an agent with model "anthropic:claude-test"

Runs in a thread of the test process on ``127.0.0.1`` and a free port.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from phasegate.testing._fake_server import (
    Answer,
    Event,
    FakeReply,
    FakeRequest,
    FakeServer,
    Responder,
    pieces,
)

__all__ = ["MESSAGES_PATH", "FakeAnthropic", "FakeReply", "FakeRequest", "Responder"]

MESSAGES_PATH = "/v1/messages"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_ERROR_MESSAGES = {
    401: "invalid x-api-key",
    404: "model: not found",
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}


class FakeAnthropic(FakeServer):
    """A scripted Anthropic Messages API server on ``127.0.0.1`` (see the module docs).

    Use as ``async with FakeAnthropic() as fake:`` (or ``with``, or :meth:`start` and
    :meth:`stop`). The script methods return the server, so they chain.
    """

    PATHS: ClassVar[tuple[str, ...]] = (MESSAGES_PATH,)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the API root (the SDK adds ``/v1/messages``)."""
        return self.origin

    def _invalid(self, route: str, body: Any, headers: Mapping[str, str]) -> str | None:
        if "anthropic-version" not in headers:
            return "anthropic-version: header is required"
        if not isinstance(body, dict):
            return "The request body is not valid JSON."
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                return f"{name}: Field required"
        return None

    def _error_answer(
        self, route: str, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> Answer:
        text = message or _ERROR_MESSAGES.get(status, f"scripted error {status}")
        error = {"type": _ERROR_TYPES.get(status, "api_error"), "message": text}
        return Answer(status, {"type": "error", "error": error}, headers or {})

    def _reply_answer(
        self, route: str, reply: FakeReply, body: dict[str, Any], stream: bool, number: int
    ) -> Answer:
        message = _message(reply, self._tool_name(reply, body), body, number)
        return Answer(200, events=_events(reply, message)) if stream else Answer(200, message)


def _message(reply: FakeReply, tool: str, request: dict[str, Any], number: int) -> dict[str, Any]:
    """The whole ``message`` answering with ``reply``."""
    content: list[dict[str, Any]]
    if reply.kind in ("tool_call", "malformed"):
        raw = reply.arguments or "{}"
        tool_input: Any = json.loads(raw) if reply.kind == "tool_call" else raw
        content = [
            {"type": "tool_use", "id": f"toolu_fake{number:06d}", "name": tool, "input": tool_input}
        ]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": reply.content or ""}]
        stop = "end_turn"
    return {
        "id": f"msg_fake{number:06d}",
        "type": "message",
        "role": "assistant",
        "model": str(request.get("model", "fake")),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens},
    }


def _events(reply: FakeReply, message: dict[str, Any]) -> list[Event]:
    """``message`` as Anthropic streams it."""
    [block] = message["content"]
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {"input_tokens": usage["input_tokens"], "output_tokens": 1}
    if block["type"] == "tool_use":
        opened = {**block, "input": {}}
        raw = reply.arguments or "{}"
        deltas = [{"type": "input_json_delta", "partial_json": part} for part in ["", *pieces(raw)]]
    else:
        opened = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": part} for part in pieces(block["text"])]
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events: list[Event] = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": opened},
        ),
        ("ping", {"type": "ping"}),
    ]
    events += [
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        for delta in deltas
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": stop,
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events
