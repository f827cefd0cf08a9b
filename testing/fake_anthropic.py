"""A loopback HTTP server speaking Anthropic's Messages API, scripted.

The Anthropic twin of :class:`~phasegate.testing.fake_openai.FakeOpenAI` (same server,
script and request log; only the wire format differs). Point the ``anthropic`` SDK at
:attr:`FakeAnthropic.base_url` (for phasegate: ``ANTHROPIC_BASE_URL`` and
``ANTHROPIC_API_KEY`` in the worker's environment, model ``anthropic:NAME``) and queue
the answers ``POST /v1/messages`` should get, one per request, in order:

- :meth:`~FakeAnthropic.tool_call`: a ``tool_use`` block (by default naming the first
  tool the request offers: pydantic-ai's output tool) with the input you give,
  ``stop_reason: tool_use``;
- :meth:`~FakeAnthropic.malformed`: the same, its ``input`` the raw string you give
  instead of an object (Anthropic never sends that; a client must not crash on it);
- :meth:`~FakeAnthropic.text`: a ``text`` block, ``stop_reason: end_turn``;
- :meth:`~FakeAnthropic.error`: an HTTP error (``429`` with ``retry-after``, ``529``
  overloaded, ``500``, ``401``...) in Anthropic's shape
  ``{"type": "error", "error": {"type": "rate_limit_error", "message": ...}}``;
- :meth:`~FakeAnthropic.hang` / :meth:`~FakeAnthropic.release`: a request held
  unanswered, then its connection closed.

Every answer carries ``usage`` (``input_tokens``, ``output_tokens``; the script's
``prompt_tokens`` / ``completion_tokens``). :attr:`~FakeAnthropic.requests` records
every request (headers such as ``x-api-key``, the JSON body); a request with no
scripted answer left gets a 400 that says so.

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
from typing import Any, ClassVar, Self

from phasegate.testing.fake_openai import FakeOpenAI, FakeReply, FakeRequest, _Answer

__all__ = ["MESSAGES_PATH", "FakeAnthropic", "FakeReply", "FakeRequest"]

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


class FakeAnthropic(FakeOpenAI):
    """A scripted Anthropic Messages API server on ``127.0.0.1`` (see the module docs).

    Use as ``async with FakeAnthropic() as fake:`` (or ``with``, or :meth:`start` and
    :meth:`stop`). The script methods return the server, so they chain.
    """

    PATH: ClassVar[str] = MESSAGES_PATH

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the API root (the SDK adds ``/v1/messages``)."""
        if self._server is None:
            raise RuntimeError(
                "FakeAnthropic is not running: use `async with FakeAnthropic() as fake`"
            )
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def error(
        self, status: int, message: str | None = None, *, retry_after: float | None = None
    ) -> Self:
        """Answer with HTTP ``status`` and Anthropic's error body (its ``error.type`` from
        the status: ``rate_limit_error`` for 429, ``overloaded_error`` for 529,
        ``api_error`` for other 5xx...); ``retry_after`` seconds go in ``retry-after``."""
        return super().error(
            status,
            message or _ERROR_MESSAGES.get(status, f"scripted error {status}"),
            retry_after=retry_after,
        )

    def _error_answer(
        self, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> _Answer:
        error = {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}
        return _Answer(status, {"type": "error", "error": error}, headers or {})

    def _reply_answer(self, reply: FakeReply, request: dict[str, Any], number: int) -> _Answer:
        if reply.kind == "error":
            return self._error_answer(reply.status, reply.message, reply.headers)
        if reply.kind == "hang":
            return super()._reply_answer(reply, request, number)
        if request.get("stream"):
            return self._error_answer(400, "FakeAnthropic does not stream; send stream=false")
        content: list[dict[str, Any]]
        if reply.kind in ("tool_call", "malformed"):
            tools = request.get("tools") or [{}]
            name = reply.tool_name or tools[0].get("name", "final_result")
            raw = reply.arguments or "{}"
            tool_input: Any = json.loads(raw) if reply.kind == "tool_call" else raw
            block = {"type": "tool_use", "id": f"toolu_fake{number:06d}", "name": name}
            content = [{**block, "input": tool_input}]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": reply.content or ""}]
            stop = "end_turn"
        return _Answer(
            200,
            {
                "id": f"msg_fake{number:06d}",
                "type": "message",
                "role": "assistant",
                "model": str(request.get("model", "fake")),
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": reply.prompt_tokens,
                    "output_tokens": reply.completion_tokens,
                },
            },
        )
