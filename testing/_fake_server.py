"""The scripted loopback HTTP server under the provider fakes (:mod:`fake_openai`,
:mod:`fake_anthropic`): the script, the request log, the lifecycle and the HTTP side
(JSON answers and server-sent events, chunked as providers send them).

A wire format subclasses :class:`FakeServer` and says which paths it serves, what makes
a request invalid (refused without using up a scripted answer) and how a
:class:`FakeReply` looks in its JSON and in its event stream.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

from pydantic import BaseModel

__all__ = ["Event", "FakeReply", "FakeRequest", "FakeServer", "Responder", "pieces"]

Event = tuple[str | None, Any]
"""One server-sent event: its ``event:`` name (``None``: no name line) and its data
(a JSON value, or a string sent as it is, such as ``[DONE]``)."""


@dataclass(frozen=True)
class FakeReply:
    """One scripted answer. Build it with the class methods (or the fake's own script
    methods, which queue one): a :class:`Responder` returns one of these."""

    kind: str  # tool_call | malformed | text | error | hang | respond
    status: int = 200
    arguments: str | None = None  # tool-call arguments as sent (maybe not JSON)
    tool_name: str | None = None  # None: the first tool of the request
    content: str | None = None
    message: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    responder: Responder | None = None

    @classmethod
    def tool_call(
        cls,
        arguments: Mapping[str, Any] | BaseModel,
        *,
        name: str | None = None,
        prompt_tokens: int = 50,
        completion_tokens: int = 10,
    ) -> FakeReply:
        """The model calls tool ``name`` (default: the request's first tool)."""
        raw = (
            arguments.model_dump_json()
            if isinstance(arguments, BaseModel)
            else json.dumps(dict(arguments))
        )
        return cls(
            "tool_call",
            arguments=raw,
            tool_name=name,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    @classmethod
    def malformed(
        cls,
        raw: str = '{"answer": "unterminated',
        *,
        name: str | None = None,
        prompt_tokens: int = 50,
        completion_tokens: int = 10,
    ) -> FakeReply:
        """A tool call whose arguments are ``raw``: by default not JSON."""
        return cls(
            "malformed",
            arguments=raw,
            tool_name=name,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    @classmethod
    def text(
        cls, content: str, *, prompt_tokens: int = 50, completion_tokens: int = 10
    ) -> FakeReply:
        """A plain assistant message."""
        return cls(
            "text",
            content=content,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    @classmethod
    def error(
        cls, status: int, message: str = "", *, retry_after: float | None = None
    ) -> FakeReply:
        """HTTP ``status`` with the wire format's error body (``message``: its default
        for the status when empty); ``retry_after`` seconds go in ``retry-after``."""
        headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
        return cls("error", status=status, message=message, headers=headers)


Responder = Callable[["FakeRequest"], FakeReply]
"""A scripted answer decided when its request arrives: it reads the request (the
conversation so far, the tool results) and returns the :class:`FakeReply` to send."""


@dataclass(frozen=True)
class FakeRequest:
    """One request the server received, and what it answered."""

    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: Any  # the parsed JSON body, or None
    status: int  # what the server answered (0: held, see ``hang``)
    reply: str  # the reply kind, or "unscripted" / "not_found" / "refused"
    stream: bool = False  # answered as server-sent events

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation the request carries: ``messages`` (chat completions,
        Anthropic) or ``input`` (Responses API; a string input as one user message)."""
        if not isinstance(self.body, dict):
            return []
        items = self.body.get("messages", self.body.get("input", []))
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools the request offered the model (every wire format); a tool
        inside a Responses API ``namespace`` tool is named ``NAMESPACE__NAME`` (Codex
        groups an MCP server's tools as namespace ``mcp__SERVER``, so its tools read as
        Claude Code names them: ``mcp__phasegate__start_session``)."""
        tools = self.body.get("tools", []) if isinstance(self.body, dict) else []
        names: list[str] = []
        for tool in tools:
            if not isinstance(tool, dict):
                continue
            if tool.get("type") == "namespace":
                inner = [t.get("name") for t in tool.get("tools", []) if isinstance(t, dict)]
                names += [f"{tool.get('name')}__{n}" for n in inner if isinstance(n, str)]
            name = tool.get("name") or tool.get("function", {}).get("name")
            if isinstance(name, str) and tool.get("type") != "namespace":
                names.append(name)
        return names

    @property
    def tool_results(self) -> list[str]:
        """The text of every tool result in the conversation, oldest first: Anthropic's
        ``tool_result`` blocks, chat completions' ``tool`` messages and the Responses
        API's ``function_call_output`` items."""
        found: list[str] = []
        for message in self.messages:
            if message.get("type") == "function_call_output":
                found.append(_text_of(message.get("output")))
            elif message.get("role") == "tool":
                found.append(_text_of(message.get("content")))
            elif isinstance(message.get("content"), list):
                for block in message["content"]:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        found.append(_text_of(block.get("content")))
        return found


def _text_of(value: Any) -> str:
    """A tool result's text: a string, or the text parts of a list of blocks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(part.get("text", "")) for part in value if isinstance(part, dict))
    return "" if value is None else json.dumps(value)


def pieces(text: str, size: int = 12) -> list[str]:
    """``text`` cut into the small deltas a streaming provider sends (at least one)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


@dataclass(frozen=True)
class Answer:
    """What the server sends: a JSON body, or (``events`` set) a stream of events."""

    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    events: Sequence[Event] | None = None
    hold: threading.Event | None = None  # set: close the connection unanswered


class FakeServer:
    """A scripted provider on ``127.0.0.1`` and a free port (see the fakes' docs).

    Subclasses set ``PATHS`` and implement ``_invalid``, ``_error_answer`` and
    ``_reply_answer`` for their wire format.
    """

    PATHS: ClassVar[tuple[str, ...]] = ()
    """The paths served (POST), without their query string."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a responder may read ``requests``
        self._replies: deque[FakeReply] = deque()
        self._requests: list[FakeRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._count = 0
        self._ids = itertools.count(1)
        self._held: list[threading.Event] = []
        self.script_errors: list[str] = []
        """What each scripted answer that raised said (it was answered 500 instead)."""

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
        return self.push(
            FakeReply.tool_call(
                arguments,
                name=name,
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
        return self.push(
            FakeReply.malformed(
                raw, name=name, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
        )

    def text(self, content: str, *, prompt_tokens: int = 50, completion_tokens: int = 10) -> Self:
        """Answer with a plain assistant message."""
        return self.push(
            FakeReply.text(
                content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
        )

    def error(
        self, status: int, message: str | None = None, *, retry_after: float | None = None
    ) -> Self:
        """Answer with HTTP ``status`` and the provider's error body; ``retry_after``
        seconds go in a ``retry-after`` header (as a rate limit sends)."""
        return self.push(FakeReply.error(status, message or "", retry_after=retry_after))

    def respond(self, responder: Responder) -> Self:
        """Answer with what ``responder(request)`` returns when the request arrives:
        a step that depends on the conversation (an id a tool result carried)."""
        return self.push(FakeReply("respond", responder=responder))

    def hang(self) -> Self:
        """Hold the request this answer goes to until :meth:`release` (or :meth:`stop`),
        then close its connection unanswered: a provider call in flight that never returns.

        :attr:`hanging` counts the requests held now; a held request is recorded (status
        0, reply ``hang``) as it arrives.
        """
        return self.push(FakeReply("hang", status=0))

    def release(self) -> None:
        """Let every held request go: their connections close with no answer."""
        with self._lock:
            held, self._held = self._held, []
        for gate in held:
            gate.set()

    def push(self, reply: FakeReply) -> Self:
        """Queue ``reply`` (built with :class:`FakeReply`'s class methods)."""
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
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self._server is None:
            name = type(self).__name__
            raise RuntimeError(f"{name} is not running: use `async with {name}() as fake`")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # --- lifecycle --------------------------------------------------------------

    def start(self) -> Self:
        """Listen on a free port of 127.0.0.1, serving from a daemon thread."""
        if self._server is None:
            self._server = _Quiet(("127.0.0.1", 0), _handler_for(self))
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

    def _answer(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> Answer:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        route = path.split("?")[0]
        name = type(self).__name__
        with self._lock:
            self._count += 1
            number = self._count
            stream = isinstance(body, dict) and body.get("stream") is True
            refusal = (
                None
                if method != "POST" or route not in self.PATHS
                else self._invalid(route, body, headers)
            )
            if method != "POST" or route not in self.PATHS:
                served = " and ".join(self.PATHS)
                answer = self._error_answer(route, 404, f"{name} serves only POST {served}")
                kind, stream = "not_found", False
            elif refusal is not None:
                answer, kind, stream = self._error_answer(route, 400, refusal), "refused", False
            elif not self._replies:
                answer = self._error_answer(
                    route,
                    400,
                    f"{name}: no scripted answer left for request #{number}; queue one with "
                    ".tool_call(...), .malformed(), .text(), .error() or .respond(...)",
                )
                kind, stream = "unscripted", False
            else:
                reply = self._replies.popleft()
                kind = reply.kind
                try:
                    if reply.responder is not None:
                        seen = FakeRequest(method, path, headers, body, 0, "respond", stream)
                        reply = reply.responder(seen)
                    answer = self._reply(
                        route, reply, body if isinstance(body, dict) else {}, stream
                    )
                except Exception as exc:  # noqa: BLE001 - a broken script step: answer 500 saying so
                    message = f"{name}: scripted answer #{number} raised {exc!r}"
                    answer, kind = self._error_answer(route, 500, message), "script_error"
                    self.script_errors.append(message)
                stream = stream and answer.events is not None
                if answer.hold is not None:
                    self._held.append(answer.hold)
            self._requests.append(
                FakeRequest(method, path, headers, body, answer.status, kind, stream)
            )
        return answer

    def _reply(self, route: str, reply: FakeReply, body: dict[str, Any], stream: bool) -> Answer:
        if reply.kind == "error":
            return self._error_answer(route, reply.status, reply.message, reply.headers)
        if reply.kind == "hang":
            return Answer(0, hold=threading.Event())
        if reply.kind == "respond":
            raise ValueError("a responder must return a reply, not another responder")
        return self._reply_answer(route, reply, body, stream, next(self._ids))

    def _tool_name(self, reply: FakeReply, body: dict[str, Any]) -> str:
        """The tool a reply calls: its own name, else the request's first tool."""
        if reply.tool_name:
            return reply.tool_name
        names = FakeRequest("POST", "", {}, body, 0, "").tool_names
        return names[0] if names else "final_result"

    def _invalid(self, route: str, body: Any, headers: Mapping[str, str]) -> str | None:
        """Why the provider would refuse this request (400), or ``None``."""
        raise NotImplementedError

    def _error_answer(
        self, route: str, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> Answer:
        """An HTTP error in the wire format's error shape (``message`` may be empty)."""
        raise NotImplementedError

    def _reply_answer(
        self, route: str, reply: FakeReply, body: dict[str, Any], stream: bool, number: int
    ) -> Answer:
        """The answer (JSON, or events when ``stream``) for ``reply``."""
        raise NotImplementedError


class _Quiet(ThreadingHTTPServer):
    """A client that hangs up (a held request let go, a cancelled stream) is no error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs expect

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            answer = fake._answer(self.command, self.path, headers, raw)
            if answer.hold is not None:
                answer.hold.wait()
                self.close_connection = True
                return
            if answer.events is not None:
                self._stream(answer)
                return
            data = json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, answer: Answer) -> None:
            """Server-sent events, one HTTP chunk per event, flushed as it goes."""
            self.send_response(answer.status)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            for name, data in answer.events or ():
                text = data if isinstance(data, str) else json.dumps(data)
                frame = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
                chunk = frame.encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        do_POST = _serve
        do_GET = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads the fake's ``requests`` instead."""

    return Handler
