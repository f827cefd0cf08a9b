"""The ``phasegate`` CLI end to end: real subprocesses against the shared dev server.

Each command runs in a process of its own with TEMPORAL_ADDRESS pointing at the test
server and a worker (own task queue) running in this process, so the event loop must
stay free: subprocesses are awaited, never waited on blocking. The walkthrough (marked
``real_cli``) runs ``python -m phasegate.client.cli ...`` itself; other commands run
forked from a warm CLI process (tests/cli_helpers.py: the same exit codes and output,
without the interpreter's start-up each time).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from cli_helpers import REAL_CLI, cli_argv
from ports import free_port

from phasegate.client.api import PhasegateClient

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SECRET = "SECRET-FUTURE-CONTENT"


@dataclass
class Run:
    code: int
    out: str
    err: str


Cli = Callable[..., Awaitable[Run]]


def _base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


async def _run(
    env: dict[str, str],
    *args: str,
    stdin: str | None = None,
    timeout: float = 60.0,
    real: bool = False,
) -> Run:
    """``phasegate ARGS`` in a process of its own: ``python -m phasegate.client.cli`` when
    ``real``, else forked from the warm CLI process."""
    proc = await asyncio.create_subprocess_exec(
        *(REAL_CLI if real else cli_argv()),
        *args,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(
        proc.communicate(stdin.encode() if stdin is not None else None), timeout
    )
    assert proc.returncode is not None
    run = Run(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in run.err, run.err
    return run


@pytest.fixture
def offline() -> Cli:
    """The CLI with no server (commands that must not need one)."""
    env = _base_env(
        PHASEGATE_LIBRARY=str(FIXTURES / "library"), TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}"
    )

    async def cli(*args: str, **kw: object) -> Run:
        return await _run(env, *args, **kw)  # type: ignore[arg-type]

    return cli


@pytest_asyncio.fixture
async def online(
    env, settings_for, run_worker, request
) -> AsyncIterator[tuple[Cli, PhasegateClient]]:
    """The CLI pointed at the test server, with a worker on a fresh task queue; a test
    marked ``real_cli`` runs each command as ``python -m phasegate.client.cli``."""
    real = request.node.get_closest_marker("real_cli") is not None
    settings = settings_for(FIXTURES / "library")
    cli_env = _base_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        PHASEGATE_TASK_QUEUE=settings.task_queue,
        PHASEGATE_LIBRARY=str(FIXTURES / "library"),
        PHASEGATE_HOME=settings.home,
    )

    async def cli(*args: str, stdin: str | None = None, **extra: str) -> Run:
        return await _run({**cli_env, **extra}, *args, stdin=stdin, real=real)

    async with run_worker(settings):
        yield cli, PhasegateClient(env.client, settings.task_queue)


@pytest.mark.real_cli  # the entry point itself, start-up and all
async def test_session_walkthrough(online, tmp_path):
    cli, pg = online
    sid = f"cli-{uuid.uuid4().hex[:10]}"

    r = await cli("start", "mini_v1", str(tmp_path), "--id", sid)
    assert r.code == 0, r.err
    assert sid in r.out and "Analyse" in r.out
    # The test server's Web UI is unknown: no guessed localhost:8233 link, the fix instead.
    assert "web UI: unknown for" in r.out and "PHASEGATE_UI_URL" in r.out, r.out

    # Reads change nothing: run them side by side.
    status, phase, future, task = await asyncio.gather(
        cli("status", sid), cli("phase", sid), cli("phase", sid, "2"), cli("task", sid, "0", "1")
    )
    assert status.code == 0 and "phase 0 (1 of 3): Analyse" in status.out, status.out + status.err
    assert phase.code == 0, phase.err
    assert str(tmp_path) in phase.out and "Read the code" in phase.out  # content, tasks
    assert "modules_found" in phase.out and "integer" in phase.out  # gate table
    assert SECRET not in phase.out
    assert future.code == 3 and future.out == ""  # a future phase is refused
    assert "phase 2" in future.err and SECRET not in future.err
    assert task.code == 0 and "Read the code" in task.out, task.err

    # A submission for a phase not reached is refused with exit 3, as the README says.
    r = await cli("submit", sid, "--phase", "2", "--set", "tests_run=1")
    assert r.code == 3 and "not reached yet" in r.err, (r.code, r.err)

    # A failing gate exits 2 and lists every problem with its field.
    r = await cli("submit", sid, "--set", "modules_found=0", "--set", "summary=7")
    assert r.code == 2, r.err
    assert "failed" in r.out and "modules_found:" in r.out and "summary:" in r.out

    evidence = tmp_path / "evidence.json"
    evidence.write_text(json.dumps({"modules_found": 3, "summary": "three modules, all small"}))
    r = await cli("submit", sid, "--file", str(evidence))
    assert r.code == 0, r.out + r.err
    assert "passed" in r.out and "Plan" in r.out and "alice" in r.out  # next phase shown

    r = await cli("submit", sid, "--phase", "1", "--file", "-", stdin='{"plan": "do it well"}')
    assert r.code == 0 and "awaiting approval" in r.out, r.out + r.err

    status, refused = await asyncio.gather(cli("status", sid), cli("approve", sid, "--as", "bob"))
    assert "phase 1 (2 of 3): Plan — awaiting approval by alice" in status.out
    assert "✓ 0 Analyse" in status.out and "2 attempts" in status.out
    assert refused.code == 1 and refused.out == ""
    assert refused.err.startswith("error: ") and refused.err.count("\n") == 1
    assert "alice" in refused.err

    # --as defaults to $PHASEGATE_APPROVER.
    r = await cli("approve", sid, "--comment", "fine", PHASEGATE_APPROVER="alice")
    assert r.code == 0 and "phase 2 (3 of 3): Build" in r.out, r.out + r.err

    r = await cli("control", sid, "pause", "--reason", "lunch", "--as", "carol")
    assert r.code == 0 and "paused" in r.out, r.err
    r = await cli("submit", sid, "--set", "tests_run=1", "--set", "tests_passed=1")
    assert r.code == 1 and r.err.startswith("error: ") and r.err.count("\n") == 1
    r = await cli("control", sid, "resume", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "active", r.out + r.err

    r = await cli("status", sid, "--json")
    view = json.loads(r.out)
    assert view["current_phase"] == 2 and view["status"] == "active"
    assert [p["phase"] for p in view["completed_phases"]] == [0, 1]
    assert view["approvals"][0]["approver"] == "alice"

    # Visibility lags upserts (~1.5 s, more under load): wait in-process, then ask the CLI.
    deadline = time.monotonic() + 30
    while True:
        listed = await pg.list(workflow_type="mini_v1", limit=500)
        if any(s.session_id == sid and (s.phase, s.status) == (2, "active") for s in listed):
            break
        assert time.monotonic() < deadline, [s for s in listed if s.session_id == sid]
        await asyncio.sleep(0.3)
    r = await cli("list", "--workflow", "mini_v1", "--limit", "500")
    assert r.code == 0 and "SESSION" in r.out, r.err
    row = next(line for line in r.out.splitlines() if line.startswith(sid))
    assert "mini_v1" in row and "active" in row

    r = await cli("watch", sid, "--once")
    assert r.code == 0 and "phase 2 (3 of 3): Build" in r.out, r.err
    # --timeout (documented in the README) stops following an active session.
    r = await cli("watch", sid, "--timeout", "1", "--interval", "0.2", "--no-progress")
    assert r.code == 1 and "stopped after 1 s (--timeout)" in r.err, (r.code, r.err)
    assert "phase 2 (3 of 3): Build" in r.out

    r = await cli(
        "submit", sid, "--set", "tests_run=3", "--set", "tests_passed=3", "--set", "coverage=50"
    )
    assert r.code == 0, r.out + r.err
    assert "coverage:" in r.out and "completed" in r.out  # not strict: a warning

    # A finished session ends watch at once, exit 0.
    r = await cli("watch", sid, "--interval", "0.1")
    assert r.code == 0 and "completed" in r.out, r.err


async def test_spec_parse(offline, tmp_path):
    specs = sorted((REPO / "examples" / "specs").glob("*/tasks.md"))
    assert specs, "examples/specs/*/tasks.md missing"
    runs = await asyncio.gather(*(offline("spec", "parse", str(s.parent)) for s in specs))
    for spec, r in zip(specs, runs, strict=True):
        assert r.code == 0, f"{spec}: {r.err}"
        assert str(spec) in r.out and "Phase " in r.out

    todo = REPO / "examples" / "specs" / "todo-api" / "tasks.md"
    if todo.is_file():
        r = await offline("spec", "parse", str(todo), "--json")
        parsed = json.loads(r.out)
        assert [p["number"] for p in parsed["phases"]][:1] == [1]  # numbers as written
        assert parsed["phases"][0]["tasks"][0]["id"] == "1.1"

    no_phases = tmp_path / "tasks.md"
    no_phases.write_text("# Notes\n\nJust prose, nothing to do.\n")
    r = await offline("spec", "parse", str(tmp_path))
    assert r.code == 1 and r.out == ""
    assert r.err.startswith(f"error: {no_phases}:") and r.err.count("\n") == 1


async def test_library_commands(offline, tmp_path):
    broken = tmp_path / "lib"
    shutil.copytree(FIXTURES / "library" / "broken_v1", broken / "broken_v1")
    listed, shipped, bad = await asyncio.gather(
        offline("library", "list"),
        offline("library", "check", str(REPO / "library")),
        offline("library", "check", str(broken)),
    )
    assert listed.code == 0, listed.err
    assert "mini_v1" in listed.out and "spec_execution_v1" in listed.out
    assert "dynamic" in listed.out  # dyn_v1 has no fixed phase count
    assert shipped.code == 0 and "ok" in shipped.out, shipped.out
    assert bad.code == 1 and "error:" in bad.out and "phases/1" in bad.out, bad.out


async def test_unreachable_server(offline):
    port = free_port()
    r = await offline("--address", f"127.0.0.1:{port}", "status", "some-session")
    assert r.code == 1 and r.out == ""
    assert r.err == (
        f"error: cannot reach Temporal at 127.0.0.1:{port} "
        "(hint: start one with `phasegate server`, or point TEMPORAL_ADDRESS (or --address) "
        "at your cluster)\n"
    )


async def test_server_runs_in_foreground(offline, tmp_path):
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "phasegate.client.cli",
        "server",
        "--headless",
        "--port",
        str(port),
        "--db",
        str(tmp_path / "temporal.db"),
        cwd=REPO,
        env=_base_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.returncode is None and time.monotonic() < deadline
                await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode in (0, 130), out.decode()  # stopped by Ctrl-C (as test_dev_mode)
    assert f"127.0.0.1:{port}" in out.decode() and (tmp_path / "temporal.db").exists()


@pytest.mark.parametrize(
    "argv", [["submit", "x", "--set", "novalue"], ["reject", "x", "--as", "a"]]
)
def test_usage_errors_exit_1(argv, capsys):
    from phasegate.client.cli import main

    assert main(argv) == 1  # never 2, which means "gate failed"
    assert "error:" in capsys.readouterr().err
