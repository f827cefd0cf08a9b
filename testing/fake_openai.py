"""A loopback HTTP server speaking OpenAI's chat-completions wire format, scripted.

Point any OpenAI-compatible client at :attr:`FakeOpenAI.base_url` (for phasegate: a
provider in ``PHASEGATE_MODEL_PROVIDERS`` / ``Settings.model_providers``) and queue
the answers it should get, one per request, in order:

- :meth:`~FakeOpenAI.tool_call`: the model calls a tool (by default the first tool the
  request offers: pydantic-ai's output tool) with JSON arguments;
- :meth:`~FakeOpenAI.malformed`: the same, with arguments that are not valid JSON;
- :meth:`~FakeOpenAI.text`: a plain assistant message;
- :meth:`~FakeOpenAI.error`: an HTTP error (``429`` with ``Retry-After``, ``500``,
  ``401``...) in OpenAI's error shape;
- :meth:`~FakeOpenAI.hang`: no answer at all until :meth:`~FakeOpenAI.release`, then
  the connection closes unanswered: a request in flight (kill the worker meanwhile).

Every answer carries ``usage`` (prompt and completion tokens you choose). Every
request is recorded in :attr:`~FakeOpenAI.requests` (path, headers, JSON body), so a
test can check what the client sent and how often it retried. A request with no
scripted answer left gets a 400 that says so (not retryable), so a test fails fast
instead of hanging.

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

import json
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

from pydantic import BaseModel

__all__ = ["FakeOpenAI", "FakeReply", "FakeRequest"]

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class FakeReply:
    """One scripted answer: an HTTP status, a JSON body and extra headers."""

    kind: str  # tool_call | malformed | text | error | hang
    status: int = 200
    arguments: str | None = None  # tool-call arguments as sent (maybe not JSON)
    tool_name: str | None = None  # None: the first tool of the request
    content: str | None = None
    message: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class FakeRequest:
    """One request the server received, and what it answered."""

    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: Any  # the parsed JSON body, or None
    status: int  # what the server answered
    reply: str  # the reply kind, or "unscripted" / "not_found"

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of the request (empty when there are none)."""
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools the request offered the model."""
        tools = self.body.get("tools", []) if isinstance(self.body, dict) else []
        return [t.get("function", {}).get("name", "") for t in tools]


class FakeOpenAI:
    """A scripted OpenAI chat-completions server on ``127.0.0.1`` (see the module docs).

    Use as ``async with FakeOpenAI() as fake:`` (or ``with``, or :meth:`start` and
    :meth:`stop`). The script methods return the server, so they chain.

    Another wire format (:class:`~phasegate.testing.fake_anthropic.FakeAnthropic`)
    subclasses it and overrides ``PATH``, ``_error_answer`` and ``_reply_answer``.
    """

    PATH: ClassVar[str] = CHAT_PATH
    """The one path served (POST)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: deque[FakeReply] = deque()
        self._requests: list[FakeRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._count = 0
        self._held: list[threading.Event] = []

    # --- the script -------------------------------------------------------------

    def tool_call(
        self,
        arguments: Mapping[str, Any] | BaseModel,
        *,
        name: str | None = None,
        prompt_tokens: int = 50,
        completion_tokens: int = 10,
    ) -> Self:
        """Answer with a call of tool ``name`` (default: the request's first tool)."""
        if isinstance(arguments, BaseModel):
            raw = arguments.model_dump_json()
        else:
            raw = json.dumps(dict(arguments))
        return self._push(
            FakeReply(
                "tool_call",
                arguments=raw,
                tool_name=name,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        )

    def malformed(
        self,
        raw: str = '{"answer": "unterminated',
        *,
        name: str | None = None,
        prompt_tokens: int = 50,
        completion_tokens: int = 10,
    ) -> Self:
        """Answer with a tool call whose arguments are ``raw``: by default not JSON."""
        return self._push(
            FakeReply(
                "malformed",
                arguments=raw,
                tool_name=name,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        )

    def text(self, content: str, *, prompt_tokens: int = 50, completion_tokens: int = 10) -> Self:
        """Answer with a plain assistant message."""
        return self._push(
            FakeReply(
                "text",
                content=content,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        )

    def error(
        self, status: int, message: str | None = None, *, retry_after: float | None = None
    ) -> Self:
        """Answer with HTTP ``status`` and OpenAI's error body; ``retry_after`` seconds
        go in a ``Retry-After`` header (as a rate limit sends)."""
        headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
        text = message or {
            401: "Incorrect API key provided.",
            404: "The model does not exist or you do not have access to it.",
            429: "Rate limit reached for requests.",
            500: "The server had an error while processing your request.",
        }.get(status, f"scripted error {status}")
        return self._push(FakeReply("error", status=status, message=text, headers=headers))

    def hang(self) -> Self:
        """Hold the request this answer goes to until :meth:`release` (or :meth:`stop`),
        then close its connection unanswered: a provider call in flight that never returns.

        :attr:`hanging` counts the requests held now; a held request is recorded (status
        0, reply ``hang``) as it arrives.
        """
        return self._push(FakeReply("hang", status=0))

    def release(self) -> None:
        """Let every held request go: their connections close with no answer."""
        with self._lock:
            held, self._held = self._held, []
        for gate in held:
            gate.set()

    def _push(self, reply: FakeReply) -> Self:
        with self._lock:
            self._replies.append(reply)
        return self

    # --- what happened ----------------------------------------------------------

    @property
    def requests(self) -> list[FakeRequest]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def hanging(self) -> int:
        """Requests held unanswered now (see :meth:`hang`)."""
        with self._lock:
            return len(self._held)

    @property
    def pending(self) -> int:
        """Scripted answers not yet sent."""
        with self._lock:
            return len(self._replies)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: the OpenAI API root clients are given."""
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not running: use `async with FakeOpenAI() as fake`")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # --- lifecycle --------------------------------------------------------------

    def start(self) -> Self:
        """Listen on a free port of 127.0.0.1, serving from a daemon thread."""
        if self._server is None:
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
            self._server.daemon_threads = True
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},  # stop() waits for one poll
                name=type(self).__name__,
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.release()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    # --- serving ----------------------------------------------------------------

    def _answer(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> _Answer:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self._count += 1
            number = self._count
            name = type(self).__name__
            if method != "POST" or path.split("?")[0] != self.PATH:
                reply = None
                answer = self._error_answer(404, f"{name} serves only POST {self.PATH}")
                kind = "not_found"
            elif not self._replies:
                reply = None
                answer = self._error_answer(
                    400,
                    f"{name}: no scripted answer left for request #{number}; "
                    "queue one with .tool_call(...), .malformed(), .text() or .error()",
                )
                kind = "unscripted"
            else:
                reply = self._replies.popleft()
                answer = self._reply_answer(reply, body if isinstance(body, dict) else {}, number)
                kind = reply.kind
                if answer.hold is not None:
                    self._held.append(answer.hold)
            self._requests.append(FakeRequest(method, path, headers, body, answer.status, kind))
        return answer

    def _error_answer(
        self, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> _Answer:
        """An HTTP error in this wire format's error shape."""
        return _error_answer(status, message, headers)

    def _reply_answer(self, reply: FakeReply, request: dict[str, Any], number: int) -> _Answer:
        """The answer to request ``number`` (its parsed body ``request``) for ``reply``."""
        return _reply_answer(reply, request, number)


@dataclass(frozen=True)
class _Answer:
    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None  # set: close the connection unanswered


def _error_answer(status: int, message: str, headers: Mapping[str, str] | None = None) -> _Answer:
    kind = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        404: "invalid_request_error",
        429: "rate_limit_exceeded",
    }.get(status, "server_error")
    error = {"message": message, "type": kind, "param": None, "code": None}
    return _Answer(status, {"error": error}, headers or {})


def _reply_answer(reply: FakeReply, request: dict[str, Any], number: int) -> _Answer:
    if reply.kind == "error":
        return _error_answer(reply.status, reply.message, reply.headers)
    if reply.kind == "hang":
        return _Answer(0, {}, hold=threading.Event())
    if request.get("stream"):
        return _error_answer(400, "FakeOpenAI does not stream; send stream=false")
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    finish = "stop"
    if reply.kind in ("tool_call", "malformed"):
        tools = request.get("tools") or [{}]
        name = reply.tool_name or tools[0].get("function", {}).get("name", "final_result")
        call = {"name": name, "arguments": reply.arguments}
        message["tool_calls"] = [{"id": f"call_{number}", "type": "function", "function": call}]
        finish = "tool_calls"
    usage = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }
    return _Answer(
        200,
        {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000 + number,
            "model": str(request.get("model", "fake")),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        },
    )


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as OpenAI's client expects

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            answer = fake._answer(self.command, self.path, headers, raw)
            if answer.hold is not None:
                answer.hold.wait()
                self.close_connection = True
                return
            data = json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        do_POST = _serve
        do_GET = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads :attr:`FakeOpenAI.requests` instead."""

    return Handler
