"""The real coding-agent CLIs (Claude Code, Codex; pinned, installed into .tools/ by
``make install``) run against the loopback provider fakes: where they are, how each is
configured for a test, and a scripted model that reads the conversation."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phasegate.testing.fake_openai import FakeReply, FakeRequest

REPO = Path(__file__).resolve().parent.parent
TOOLS_BIN = REPO / ".tools" / "node_modules" / ".bin"
CLAUDE_MODEL = "claude-sonnet-4-5"
CODEX_MODEL = "gpt-5"
MCP_SERVER = [sys.executable, "-m", "phasegate.client.mcp"]


def cli(name: str) -> Path:
    """The pinned CLI ``name`` (``claude`` or ``codex``); fails saying how to install it."""
    path = TOOLS_BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make install` (installs the pinned {name} CLI)")
    return path


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


async def run_cli(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float = 150
) -> Run:
    """Run a CLI to its end with no stdin (as CI runs it)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(
            f"{argv[0]} ran over {timeout}s:\n{out.decode()}\n{err.decode()}"
        ) from None
    return Run(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: this venv's bin first (the ``phasegate`` command), a fresh HOME."""
    home.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb"}


def codex_home(folder: Path, base_url: str, *, mcp_env: Mapping[str, str] | None = None) -> Path:
    """A CODEX_HOME whose config.toml points Codex at the fake (Responses API) and, with
    ``mcp_env``, registers phasegate's MCP server as docs/mcp.md says."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        f'model = "{CODEX_MODEL}"',
        'model_provider = "fake"',
        "[model_providers.fake]",
        'name = "fake"',
        f'base_url = "{base_url}"',
        'env_key = "OPENAI_API_KEY"',
        'wire_api = "responses"',
    ]
    if mcp_env is not None:
        env = ", ".join(f'{k} = "{v}"' for k, v in mcp_env.items())
        lines += [
            "[mcp_servers.phasegate]",
            f'command = "{MCP_SERVER[0]}"',
            f"args = {json.dumps(MCP_SERVER[1:])}",
            f"env = {{ {env} }}",
            "required = true",
            'default_tools_approval_mode = "approve"',
        ]
    (folder / "config.toml").write_text("\n".join(lines) + "\n")
    return folder


_SESSION_ID = re.compile(r'"session_id"\s*:\s*"([^"]+)"|session[_ ]id[`*: ]+([\w.-]+)')


def session_id(request: FakeRequest) -> str:
    """The session id the conversation's tool results carry (the first one found)."""
    for text in request.tool_results:
        found = _SESSION_ID.search(text)
        if found:
            return found.group(1) or found.group(2)
    raise AssertionError(f"no session id in the tool results: {request.tool_results}")


def json_in(text: str) -> Any:
    """The first JSON object in a tool result (the CLIs add text around it)."""
    start = text.index("{")
    value, _ = json.JSONDecoder().raw_decode(text[start:])
    return value


Step = Callable[[FakeRequest], FakeReply]


def call(
    tool: str, arguments: Mapping[str, Any] | Callable[[FakeRequest], Mapping[str, Any]]
) -> Step:
    """A step: the model calls ``tool`` (arguments fixed, or read from the request)."""

    def step(request: FakeRequest) -> FakeReply:
        args = arguments(request) if callable(arguments) else arguments
        return FakeReply.tool_call(dict(args), name=tool)

    return step
