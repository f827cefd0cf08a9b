"""docs/mcp.md runs as written (issue 19, part 5 (f)): in a project folder, `phasegate dev`
on non-default ports, then each registration the doc gives — Claude Code's `claude mcp
add` (local scope, project scope with its `.mcp.json` and approval, HTTP), Cursor's
`.cursor/mcp.json`, Codex's `codex mcp add` — with the pinned CLIs from .tools/ (`claude
mcp add|list|get` and `codex mcp add|list` need no model). The server each registration
names is then started as its client would start it (in the project, or a subfolder) and
its tools reach the dev server through `.phasegate/dev.json`, with no TEMPORAL_ADDRESS.

The doc's shell lines are read from docs/mcp.md and run with bash: `/ABS/PATH/phasegate`
is this checkout, port 8765 a free port, and `phasegate dev` gets `--port`/`--ui-port`.
The set-up line (`python3 -m venv .venv && pip install -e .`) is not run: the checkout's
.venv is the one `make` built that way."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_cli_helpers import TOOLS_BIN, cli
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from ports import free_port

from phasegate.client.devserver import port_open

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "mcp.md"
SPEC = REPO / "examples" / "specs" / "todo-api"

pytestmark = pytest.mark.timeout(600)


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n")
    end = re.search(r"\n#{2,3} ", text[start + len(title) + 2 :])
    return text[start : start + len(title) + 2 + (end.start() if end else len(text))]


def _blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section, re.DOTALL)


class Shell:
    """Runs the doc's lines with bash in the project, the way a person pastes them."""

    def __init__(self, project: Path, env: dict[str, str], subs: dict[str, str]) -> None:
        self.project, self.env, self.subs = project, env, subs
        self.background: list[subprocess.Popen[str]] = []

    def sub(self, text: str) -> str:
        """``text`` with this walk's checkout folder and free port in it."""
        for old, new in self.subs.items():
            text = text.replace(old, new)
        return text

    def line(self, line: str) -> tuple[str, str]:
        """``(command, expected output from its comment)`` with the substitutions made."""
        command, _, comment = self.sub(line).partition("#")
        return command.strip(), comment.strip()

    def run(self, command: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", "-c", command], cwd=cwd or self.project, env=self.env,
            capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        return done

    def start(self, command: str, log: Path) -> subprocess.Popen[str]:
        with log.open("w") as out:
            proc = subprocess.Popen(
                ["bash", "-c", f"exec {command.removesuffix('&').strip()}"], cwd=self.project,
                env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                text=True, start_new_session=True,
            )  # fmt: skip
        self.background.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.background):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait(check: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[tuple[Shell, dict[str, Any]]]:
    """The project (a git repository with a spec), a fresh HOME for the agents' CLIs,
    and `phasegate dev` started as the doc says, on free ports."""
    cli("claude"), cli("codex")  # fail naming `make install` when they are missing
    project = tmp_path / "app"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    shutil.copytree(SPEC, project / "spec")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    env.update(
        HOME=str(home), CODEX_HOME=str(home / ".codex"), LANG="C.UTF-8", TERM="dumb",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), str(TOOLS_BIN), env["PATH"]]),
        PHASEGATE_CONFIG_DIR=str(tmp_path / "config"),
        TEMPORAL_CONFIG_FILE=str(tmp_path / "no-temporal.toml"),
    )  # fmt: skip
    (home / ".codex").mkdir()
    http = free_port()
    shell = Shell(project, env, {"/ABS/PATH/phasegate": str(REPO), "8765": str(http)})
    port, ui_port = free_port(), free_port()
    try:
        setup, run = _blocks(_section("## Run it"), "sh")[:2]
        assert "python3 -m venv .venv" in setup and "pip install -q -e ." in setup
        dev_line, which_line = (shell.line(ln)[0] for ln in run.strip().splitlines())
        assert dev_line.endswith("phasegate dev") and which_line.endswith("phasegate which")
        # This project's sessions need no approver keys (no lead's key in this walk).
        shell.env["PHASEGATE_ALLOW_UNSIGNED_APPROVALS"] = "1"
        dev = shell.start(f"{dev_line} --port {port} --ui-port {ui_port}", tmp_path / "dev.log")
        del shell.env["PHASEGATE_ALLOW_UNSIGNED_APPROVALS"]
        _wait(lambda: "Ctrl-C stops" in (tmp_path / "dev.log").read_text(), "phasegate dev")
        assert dev.poll() is None
        which = shell.run(which_line, cwd=project / "src")  # any folder of the project
        assert f"127.0.0.1:{port} (from .phasegate/dev.json in {project}" in which.stdout
        assert "1 worker polling" in which.stdout, which.stdout
        yield shell, {"project": project, "port": port, "http": http, "home": home}
    finally:
        shell.stop()
    assert not (project / ".phasegate" / "dev.json").exists()


@contextlib.asynccontextmanager
async def _stdio(command: str, args: list[str], cwd: Path, env: dict[str, str], log: Path):
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
            yield client


async def _session_round_trip(client: Client, project: Path, sid: str | None = None) -> str:
    """Start a session (or read ``sid``'s state) through the tools: they reach the dev
    server on its non-default port through .phasegate/dev.json."""
    if sid is None:
        args = {"workflow_type": "spec_execution_v1", "target": str(project),
                "spec_path": str(project / "spec")}  # fmt: skip
        started = await client.call_tool("start_session", args)
        assert not started.is_error, started.content
        sid = str((started.structured_content or {})["session_id"])
    state = await client.call_tool("get_session_state", {"session_id": sid})
    assert not state.is_error, state.content
    assert (state.structured_content or {})["current_phase"] == 0
    return sid


def _registered(shell: Shell) -> tuple[str, list[str]]:
    """The command and arguments ``claude mcp get phasegate`` shows."""
    got = shell.run("claude mcp get phasegate").stdout
    command = re.search(r"Command: (.+)", got)
    args = re.search(r"Args: (.*)", got)
    assert command and args, got
    return command.group(1).strip(), args.group(1).split()


async def test_claude_code_registrations_run_as_written(walk, tmp_path):
    shell, at = walk
    project, port = at["project"], at["port"]
    section = _section("### Claude Code")
    local, scoped, http = _blocks(section, "sh")
    mcp_json, approval = (json.loads(shell.sub(b)) for b in _blocks(section, "json"))

    # Local scope: added, connected (also from a subfolder of the repository).
    for line in local.strip().splitlines():
        command, expected = shell.line(line)
        out = shell.run(command).stdout
        if expected:
            assert expected in out, (command, out)
            assert expected in shell.run(command, cwd=project / "src").stdout
    command, args = _registered(shell)
    log = tmp_path / "mcp-stdio.log"
    async with _stdio(command, args, project / "src", shell.env, log) as client:
        sid = await _session_round_trip(client, project)
    said = log.read_text()
    assert f"phasegate mcp: Temporal at 127.0.0.1:{port} (from .phasegate/dev.json in " in said
    shell.run("claude mcp remove phasegate -s local")

    # Project scope: .mcp.json as the doc shows it; pending until approved as it says.
    shell.run(shell.line(scoped.strip())[0])
    written = json.loads((project / ".mcp.json").read_text())["mcpServers"]["phasegate"]
    shown = mcp_json["mcpServers"]["phasegate"]
    assert {k: v for k, v in written.items() if v != {}} == shown, (written, shown)
    assert "Pending approval" in shell.run("claude mcp list").stdout
    (at["home"] / ".claude").mkdir(exist_ok=True)
    (at["home"] / ".claude" / "settings.json").write_text(json.dumps(approval))
    assert "✔ Connected" in shell.run("claude mcp list").stdout
    shell.run("claude mcp remove phasegate -s project")

    # HTTP: the server started in the project, its URL registered and connected.
    server_line, *rest = http.strip().splitlines()
    server = shell.start(shell.line(server_line)[0], tmp_path / "mcp-http.log")
    _wait(lambda: port_open(at["http"]), "phasegate mcp --http")
    assert server.poll() is None
    for line in rest:
        command, expected = shell.line(line)
        out = shell.run(command).stdout
        assert expected in out, (command, out)
    async with Client(f"http://127.0.0.1:{at['http']}/mcp") as client:
        await _session_round_trip(client, project, sid)


async def test_cursor_and_codex_registrations_run_as_written(walk, tmp_path):
    shell, at = walk
    project = at["project"]
    # Cursor: .cursor/mcp.json as the doc shows it; Cursor starts the server in the project.
    (entry,) = _blocks(_section("### Cursor"), "json")
    config = json.loads(shell.sub(entry))
    (project / ".cursor").mkdir()
    (project / ".cursor" / "mcp.json").write_text(json.dumps(config))
    server = config["mcpServers"]["phasegate"]
    assert server["type"] == "stdio"
    log = tmp_path / "cursor.log"
    async with _stdio(server["command"], server["args"], project, shell.env, log) as client:
        await _session_round_trip(client, project)

    # Codex: `codex mcp add` writes the table's first lines; the rest is added by hand.
    section = _section("### Codex")
    (add,) = _blocks(section, "sh")
    shell.run(shell.line(add.strip())[0])
    written = (at["home"] / ".codex" / "config.toml").read_text()
    (table,) = _blocks(section, "toml")
    for line in shell.sub(table).splitlines()[:3]:
        assert line in written, (line, written)
    listed = shell.run("codex mcp list").stdout
    assert re.search(rf"phasegate\s+{re.escape(str(REPO))}/\.venv/bin/phasegate\s+mcp", listed)
    assert "enabled" in listed, listed
    with (at["home"] / ".codex" / "config.toml").open("a") as f:
        f.write("\n".join(shell.sub(table).splitlines()[3:]) + "\n")
    assert "enabled" in shell.run("codex mcp list").stdout
