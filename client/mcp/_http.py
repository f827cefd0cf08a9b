"""The MCP server's HTTP transport: loopback only, its Host and Origin headers parsed.

A web page the person opens can send requests to ``http://127.0.0.1:PORT/mcp`` (DNS
rebinding, or a plain cross-origin POST): the browser names the page in ``Origin``,
the name it resolved in ``Host``. The MCP SDK checks both by prefix, so
``Origin: http://127.0.0.1:1@evil.example`` (a page on evil.example, "user"
``127.0.0.1`` and "password" ``1``) passed as loopback. :class:`LoopbackOnly` parses
each header as a URL (scheme, host and port, nothing else) and compares it exactly
with the allowed origins: ``http://`` on ``127.0.0.1``, ``localhost`` or ``[::1]``, any
port (a local tool such as the MCP Inspector serves its page on a port of its own).
A request without ``Origin`` (every non-browser MCP client) passes.

Threat level: a page in the person's browser (neither an agent level nor a shell);
an agent with a shell on the machine can call the server anyway, as any local client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["ALLOWED_HOSTS", "LoopbackOnly", "loopback_host", "loopback_origin", "serve_http"]

ALLOWED_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Hosts an ``Origin`` (scheme ``http``) or ``Host`` header may name, with any port."""


def _loopback(value: str, *, scheme: str, need_port: bool) -> bool:
    if not value or not value.isascii() or not value.isprintable() or " " in value:
        return False  # urlsplit would drop tabs and newlines: refuse them first
    try:
        parts = urlsplit(value)
        port = parts.port  # ValueError: not a number, or out of range
    except ValueError:
        return False
    host = parts.hostname or ""
    if parts.scheme != scheme or host not in ALLOWED_HOSTS:
        return False
    if parts.username is not None or parts.password is not None:
        return False  # http://127.0.0.1:1@evil.example is evil.example
    if parts.path or parts.query or parts.fragment or port == 0 or (need_port and not port):
        return False
    # The netloc must be exactly host[:port] (no "+1", "01" or empty port spellings).
    shown = f"[{host}]" if ":" in host else host
    return parts.netloc.lower() == (f"{shown}:{port}" if port is not None else shown)


def loopback_origin(origin: str) -> bool:
    """Whether an ``Origin`` header names a page served from this machine over http."""
    return _loopback(origin, scheme="http", need_port=False)


def loopback_host(host: str) -> bool:
    """Whether a ``Host`` header names this machine (``127.0.0.1:PORT`` ...)."""
    return _loopback(f"http://{host}", scheme="http", need_port=True)


class LoopbackOnly:
    """ASGI middleware: a request whose ``Host`` is not loopback gets 421, one whose
    ``Origin`` is neither absent nor loopback gets 403; everything else goes on."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
            host = headers.get("host", b"").decode("latin-1")
            origin = headers.get("origin")
            if not loopback_host(host):
                return await _refuse(send, 421, "Invalid Host header: this server is loopback only")
            if origin and not loopback_origin(origin.decode("latin-1")):  # absent: no browser
                why = "only pages on 127.0.0.1, localhost or [::1] (http) may call this server"
                return await _refuse(send, 403, f"Invalid Origin header: {why}")
        await self.app(scope, receive, send)


async def _refuse(send: Any, status: int, text: str) -> None:
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_http(server: MCPServer, port: int) -> None:
    """Serve ``server`` over streamable HTTP on ``127.0.0.1:port`` behind :class:`LoopbackOnly`."""
    import uvicorn

    app = LoopbackOnly(server.streamable_http_app(host="127.0.0.1"))
    level = server.settings.log_level.lower()
    await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=level)).serve()
