"""A remote codec server for sealed payloads: operators read a sealed prefetch in the
Web UI and the ``temporal`` CLI.

It speaks Temporal's remote codec protocol: ``POST <endpoint>/decode`` and
``<endpoint>/encode`` with ``{"payloads": [...]}`` (the protobuf JSON of ``Payloads``),
answering the same shape. ``/decode`` shows a sealed payload as ``json/plain``
(``phasegate.sealing.reveal``: its plaintext and the key that sealed it); every other
payload, and everything ``/encode`` gets, passes unchanged (phasegate seals nothing a
person sends).

Anyone who can POST to it reads every sealed phase, so the endpoint is
``http://HOST:PORT/<token>``: a random token (or ``--token-file``'s) in the path, which
the Web UI's codec setting and ``temporal --codec-endpoint`` carry as they are. It
listens on 127.0.0.1 by default and answers browsers only from the allowed Web UI
origins (CORS), with credentials allowed, as the Web UI sends them.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from phasegate.sealing import KeyRing, reveal

__all__ = ["CodecServer", "new_token"]

_MAX_BODY = 8 * 1024 * 1024  # a history page's payloads; Temporal caps one at 2 MB


def new_token() -> str:
    return secrets.token_urlsafe(18)


class CodecServer:
    """``with CodecServer(ring, ...) as codec:`` serves until the block ends (a thread).

    Args:
        ring: The seal key ring (None: sealed payloads are shown as a note saying so).
        host: Address to listen on.
        port: 0 picks a free port (:attr:`endpoint` says which).
        token: The endpoint's secret path segment.
        origins: Web UI origins browsers may call from (``http://localhost:8233``).
    """

    def __init__(
        self,
        ring: KeyRing | None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        origins: list[str] | None = None,
    ) -> None:
        self.ring = ring
        self.token = token or new_token()
        self.origins = [o.rstrip("/") for o in origins or []]
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        shown = "localhost" if host in ("127.0.0.1", "0.0.0.0") else host
        return f"http://{shown}:{port}/{self.token}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="phasegate-codec", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def convert(self, action: str, body: bytes) -> bytes:
        """The answer to ``/decode`` or ``/encode``.

        Raises:
            ValueError: the body is not ``Payloads`` JSON.
        """
        payloads = json_format.Parse(body, Payloads())
        if action == "decode":
            shown = [reveal(self.ring, p) for p in payloads.payloads]
            payloads = Payloads(payloads=shown)
        return json_format.MessageToJson(payloads).encode()

    def allowed_origin(self, origin: str | None) -> str | None:
        return origin if origin and origin.rstrip("/") in self.origins else None


def _handler(codec: CodecServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "phasegate-codec"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: no tokens in logs
            return

        def _cors(self) -> None:
            origin = codec.allowed_origin(self.headers.get("Origin"))
            if origin is None:
                return
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")

        def _answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self._cors()
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _action(self) -> str | None:
            """``decode``/``encode`` when the path carries the token, else None."""
            parts = self.path.split("?", 1)[0].strip("/").split("/")
            if len(parts) != 2 or parts[1] not in ("decode", "encode"):
                return None
            return parts[1] if hmac.compare_digest(parts[0], codec.token) else None

        def do_OPTIONS(self) -> None:  # CORS preflight of the Web UI
            self.send_response(204 if self._action() else 404)
            self._cors()
            self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
            asked = self.headers.get("Access-Control-Request-Headers")
            self.send_header(
                "Access-Control-Allow-Headers", asked or "Content-Type, X-Namespace, Authorization"
            )
            self.send_header("Access-Control-Max-Age", "600")
            self.end_headers()

        def do_POST(self) -> None:
            action = self._action()
            if action is None:
                self._answer(404, b'{"error": "not found"}')
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self._answer(413, b'{"error": "body too large"}')
                return
            try:
                self._answer(200, codec.convert(action, self.rfile.read(length)))
            except (ValueError, json_format.ParseError) as exc:
                error = json.dumps({"error": f"not a Payloads JSON body: {exc}"})
                self._answer(400, error.encode())

    return Handler
