"""A loopback HTTP server speaking OpenAI's wire formats, scripted: chat completions
and the Responses API (what Codex speaks), each as JSON or streamed.

Point any OpenAI-compatible client at :attr:`FakeOpenAI.base_url` (for phasegate: a
provider in ``PHASEGATE_MODEL_PROVIDERS`` / ``Settings.model_providers``; for Codex a
``model_providers`` entry with ``wire_api = "responses"``) and queue the answers it
should get, one per request, in order:

- :meth:`~FakeOpenAI.tool_call`: the model calls a tool (by default the first tool the
  request offers: pydantic-ai's output tool) with JSON arguments;
- :meth:`~FakeOpenAI.malformed`: the same, with arguments that are not valid JSON;
- :meth:`~FakeOpenAI.text`: a plain assistant message;
- :meth:`~FakeOpenAI.respond`: whatever a function of the request returns (a step that
  needs an id an earlier tool result carried: :attr:`FakeRequest.tool_results`);
- :meth:`~FakeOpenAI.error`: an HTTP error (``429`` with ``Retry-After``, ``500``,
  ``401``...) in OpenAI's error shape;
- :meth:`~FakeOpenAI.hang`: no answer at all until :meth:`~FakeOpenAI.release`, then
  the connection closes unanswered: a request in flight (kill the worker meanwhile).

``POST /v1/chat/completions`` answers a ``chat.completion``, or with ``"stream": true``
``chat.completion.chunk`` events (role, content or ``tool_calls`` argument deltas, the
finish reason, a usage chunk when ``stream_options.include_usage`` asks) and
``data: [DONE]``. ``POST /v1/responses`` answers a ``response`` object, or with
``"stream": true`` the events ``response.created``, ``response.in_progress``,
``response.output_item.added``, the ``output_text`` / ``function_call_arguments``
deltas and done events, ``response.output_item.done`` and ``response.completed``.

Every answer carries ``usage`` (prompt and completion tokens you choose). Every
request is recorded in :attr:`~FakeOpenAI.requests` (path, headers, JSON body, whether
it was streamed), so a test can check what the client sent and how often it retried.
A request the real API would refuse (not JSON, no ``model``, no ``messages`` /
``input``) gets a 400 and uses up no scripted answer; a request with no scripted answer
left gets a 400 that says so (not retryable), so a test fails fast instead of hanging.

Example::

    async with FakeOpenAI() as fake:
        fake.error(429, retry_after=1).error(500).malformed().tool_call({"goal": "..."})
        settings = make_settings(tmp, model_providers={"fake": {"base_url": fake.base_url}})
        ...  # run an agent with model "fake:gpt-test"
        assert len(fake.requests) == 4

The server runs in a thread of the test process on ``127.0.0.1`` and a free port;
nothing leaves the machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from phasegate.testing._fake_server import Answer, FakeReply, FakeRequest, FakeServer, Responder
from phasegate.testing._openai_wire import (
    chat_completion,
    chat_events,
    response_events,
    response_object,
)

__all__ = ["CHAT_PATH", "RESPONSES_PATH", "FakeOpenAI", "FakeReply", "FakeRequest", "Responder"]

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"

_MESSAGES = {
    401: "Incorrect API key provided.",
    404: "The model does not exist or you do not have access to it.",
    429: "Rate limit reached for requests.",
    500: "The server had an error while processing your request.",
}
_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


class FakeOpenAI(FakeServer):
    """A scripted OpenAI server (chat completions and Responses) on ``127.0.0.1``
    (see the module docs).

    Use as ``async with FakeOpenAI() as fake:`` (or ``with``, or :meth:`start` and
    :meth:`stop`). The script methods return the server, so they chain.
    """

    PATHS: ClassVar[tuple[str, ...]] = (CHAT_PATH, RESPONSES_PATH)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: the OpenAI API root clients are given."""
        return f"{self.origin}/v1"

    def _invalid(self, route: str, body: Any, headers: Mapping[str, str]) -> str | None:
        if not isinstance(body, dict):
            return "We could not parse the JSON body of your request."
        if not body.get("model"):
            return "you must provide a model parameter"
        field = "messages" if route == CHAT_PATH else "input"
        if field not in body:
            return f"Missing required parameter: '{field}'."
        return None

    def _error_answer(
        self, route: str, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> Answer:
        text = message or _MESSAGES.get(status, f"scripted error {status}")
        error = {
            "message": text,
            "type": _TYPES.get(status, "server_error"),
            "param": None,
            "code": None,
        }
        return Answer(status, {"error": error}, headers or {})

    def _reply_answer(
        self, route: str, reply: FakeReply, body: dict[str, Any], stream: bool, number: int
    ) -> Answer:
        tool = self._tool_name(reply, body)
        model = str(body.get("model", "fake"))
        if route == RESPONSES_PATH:
            if stream:
                return Answer(200, events=response_events(reply, tool, body, number))
            return Answer(200, response_object(reply, tool, body, number))
        if stream:
            options = body.get("stream_options") or {}
            usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
            return Answer(200, events=chat_events(reply, tool, model, number, usage))
        return Answer(200, chat_completion(reply, tool, model, number))
