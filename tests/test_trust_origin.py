"""The MCP server over HTTP admits only pages on this machine (issue 14): ``Origin`` and
``Host`` are parsed as URLs and compared exactly (scheme, host, port), so
``http://127.0.0.1:1@evil.example``, a page on evil.example, is no longer taken for
loopback by its prefix. The attack as a web page sends it: a POST with that Origin."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ports import free_port

from phasegate.client.mcp._http import loopback_host, loopback_origin

REPO = Path(__file__).resolve().parent.parent

REFUSED_ORIGINS = [
    "http://127.0.0.1:1@evil.example",  # user 127.0.0.1, password 1, host evil.example
    "http://127.0.0.1.evil.example",
    "http://127.0.0.1.evil.example:8765",
    "http://localhost:80@evil",
    "http://[::1]:1@evil.example",
    "http://localhost.evil.example:1",
    "https://evil.example",
    "https://127.0.0.1:8765",  # the server speaks http only
    "null",  # a sandboxed frame or a file
    "http://127.0.0.1:1/path",
    "http://127.0.0.1:+1",
    "http://127.0.0.1:99999",
    "http://127.0.0.1:1\t@evil.example",
    "http://0x7f.1:8765",
]
ALLOWED_ORIGINS = [
    "http://127.0.0.1:8765",
    "http://localhost:6274",  # e.g. the MCP Inspector's page
    "http://LOCALHOST:6274",  # host names are case-insensitive
    "HTTP://127.0.0.1:5",
    "http://[::1]:8765",
    "http://[::1]",
    "http://127.0.0.1",
]


@pytest.mark.parametrize("origin", REFUSED_ORIGINS)
def test_foreign_origins_are_refused(origin: str) -> None:
    assert not loopback_origin(origin)


@pytest.mark.parametrize("origin", ALLOWED_ORIGINS)
def test_loopback_origins_pass(origin: str) -> None:
    assert loopback_origin(origin)


def test_host_headers() -> None:
    assert loopback_host("127.0.0.1:8765") and loopback_host("localhost:1")
    assert loopback_host("[::1]:8765")
    for host in ("evil.example:8765", "127.0.0.1:1@evil.example", "127.0.0.1", ""):
        assert not loopback_host(host), host


# ---------------------------------------------------------------- the real server


async def _post(port: int, headers: dict[str, str]) -> tuple[int, str]:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "page", "version": "1"},
            },
        }
    ).encode()
    head = {
        "Host": f"127.0.0.1:{port}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Content-Length": str(len(body)),
        "Connection": "close",
        **headers,
    }
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = "POST /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
    writer.write(request.encode("latin-1") + b"\r\n" + body)
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status_line, _, rest = response.decode("utf-8", "replace").partition("\r\n")
    return int(status_line.split()[1]), rest


@contextlib.asynccontextmanager
async def _server(tmp_path: Path) -> AsyncIterator[int]:
    port = free_port()
    log = (tmp_path / "mcp-http.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{free_port()}"  # initialize needs no Temporal
    env["PHASEGATE_HOME"] = str(tmp_path / "home")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "phasegate.client.mcp", "--http", str(port),
        env=env, cwd=str(REPO), stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
    )  # fmt: skip
    try:
        for _ in range(300):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            assert proc.returncode is None, (tmp_path / "mcp-http.log").read_text()
            await asyncio.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        log.close()


async def test_a_page_on_another_site_gets_403_and_a_local_one_is_served(tmp_path: Path) -> None:
    async with _server(tmp_path) as port:
        for origin in ("http://127.0.0.1:1@evil.example", "http://localhost:80@evil"):
            status, text = await _post(port, {"Origin": origin})
            assert status == 403, text
            assert "Invalid Origin header" in text
        status, text = await _post(port, {"Host": f"evil.example:{port}"})  # DNS rebinding
        assert status == 421, text
        status, text = await _post(port, {"Origin": "http://127.0.0.1.evil.example"})
        assert status == 403, text
        for headers in ({}, {"Origin": f"http://localhost:{port}"}, {"Origin": "http://[::1]:1"}):
            status, text = await _post(port, headers)
            assert status == 200, (headers, text)
            assert '"serverInfo"' in text
