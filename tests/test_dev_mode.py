"""One-terminal dev mode (``phasegate dev``), one server per SQLite file, dev-file
discovery, and stdio MCP stopping on one Ctrl-C: real processes on free ports, every
process checked gone at the end."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tty
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cli_helpers import cli_argv
from ports import free_port

from phasegate.client.devserver import DatabaseInUse, DevServer, choose_port
from phasegate.domain.errors import PhasegateError
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import load_gate
from phasegate.temporal import load_settings

REPO = Path(__file__).resolve().parent.parent
SPEC = "examples/specs/todo-api"
EVIDENCE = REPO / SPEC / "evidence.json"


# ---------------------------------------------------------------- helpers


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    env.update(
        PYTHONUNBUFFERED="1",
        PHASEGATE_HOME=str(tmp_path / "home"),
        PHASEGATE_CONFIG_DIR=str(tmp_path / "config"),
        TEMPORAL_CONFIG_FILE=str(tmp_path / "no-temporal.toml"),  # no user profile
        **extra,
    )
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [*cli_argv(), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr
    return run


class Proc:
    """A long-running CLI process whose output is collected by a thread."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "phasegate.client.cli", *args],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def out(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, marker: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while marker not in self.out:
            assert self.proc.poll() is None or marker in self.out, self.out
            assert time.monotonic() < deadline, f"no {marker!r} in:\n{self.out}"
            time.sleep(0.05)
        return self.out

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)
        return code


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes naming ``text`` (our temp folder): leftovers."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in argv and str(os.getpid()) != cmdline.parent.name:
            found.append(argv)
    return found


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something listens on (a stand-in for a running server's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


# ---------------------------------------------------------------- phasegate dev


def test_dev_runs_server_and_worker_until_one_ctrl_c(tmp_path, listening):
    env = _env(tmp_path, PHASEGATE_UI_PORT=str(listening))  # the UI port is taken
    assert _cli(env, "keys", "new", "lead").returncode == 0
    port = free_port()
    dev = Proc(env, "dev", "--port", str(port), "--approver-key", "lead")
    try:
        out = dev.wait_for("Ctrl-C stops")
        assert re.search(rf"Temporal\s+127\.0\.0\.1:{port}\b", out), out
        ui = re.search(r"Web UI\s+http://localhost:(\d+)", out)
        assert ui and int(ui.group(1)) != listening, out  # a free port, printed
        ui_port = int(ui.group(1))
        assert "ready in" in out and "signed by lead" in out and "phasegate start" in out
        dev_file = json.loads((tmp_path / "home" / "dev.json").read_text())
        assert dev_file["address"] == f"127.0.0.1:{port}"
        assert dev_file["ui_url"] == f"http://localhost:{ui_port}"
        server_pid = dev_file["server_pid"]
        assert dev_file["pid"] == dev.proc.pid and _alive(server_pid)

        # Another terminal: no TEMPORAL_ADDRESS; the dev file leads to the server.
        listed = _cli(env, "list")
        assert listed.returncode == 0 and "no sessions" in listed.stdout, listed.stderr
        started = _cli(env, "start", "spec_execution_v1", SPEC, "--spec", SPEC, "--json")
        assert started.returncode == 0, started.stdout + started.stderr
        data = json.loads(started.stdout)
        sid = data["session_id"]
        assert data["ui_url"].startswith(f"http://localhost:{ui_port}/"), data  # not 8233

        submitted = _cli(env, "submit", sid, "--file", str(EVIDENCE))
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        approved = _cli(env, "approve", sid, "--as", "lead", "--comment", "plan looks right")
        assert approved.returncode == 0, approved.stdout + approved.stderr
        status = json.loads(_cli(env, "status", sid, "--json").stdout)
        assert status["current_phase"] == 1 and status["status"] == "active", status
        assert sid in _cli(env, "list").stdout
        before_stop = len(dev.lines)
    finally:
        code = dev.stop(signal.SIGINT)  # one Ctrl-C
    stop_output = "\n".join(dev.lines[before_stop:])
    assert code == 0, dev.out
    assert "stopped" in stop_output and "WARN" not in stop_output, stop_output
    assert "Traceback" not in dev.out and "WARN" not in dev.out, dev.out
    assert not _alive(server_pid), "the Temporal server outlived phasegate dev"
    assert _processes_mentioning(str(tmp_path)) == []
    assert not (tmp_path / "home" / "dev.json").exists()


def test_second_server_on_the_same_database_is_refused(tmp_path):
    env = _env(tmp_path)
    db = tmp_path / "shared.db"
    port = free_port()
    first = Proc(env, "server", "--port", str(port), "--headless", "--db", str(db))
    try:
        first.wait_for("Ctrl-C stops")
        for command in ("server", "dev"):
            again = _cli(env, command, "--port", str(free_port()), "--headless", "--db", str(db))
            assert again.returncode == 1, again.stdout + again.stderr
            err = again.stderr
            assert err.startswith(f"error: {db}: the database is in use"), err
            assert f"serving 127.0.0.1:{port}" in err and "started by `phasegate server`" in err
            assert f"TEMPORAL_ADDRESS=127.0.0.1:{port}" in err and "--db OTHER.db" in err
            assert "starting Temporal" not in again.stdout  # refused before anything started
        taken = _cli(env, "server", "--port", str(port), "--headless", "--db", str(tmp_path / "b"))
        assert taken.returncode == 1 and f"--port: port {port} is already in use" in taken.stderr
    finally:
        code = first.stop(signal.SIGTERM)
    assert code == 0, first.out
    assert "WARN" not in first.out and _processes_mentioning(str(tmp_path)) == []


def test_the_server_process_holds_the_lock(tmp_path):
    """The lock lives exactly as long as the server: a killed server frees the file
    (the benchmarks restart one on the same file), a running one refuses a second."""
    db = str(tmp_path / "t.db")
    first = DevServer(db=db, log_file=str(tmp_path / "log"), owner="test").start()
    try:
        with pytest.raises(DatabaseInUse) as refused:
            DevServer(db=db).start()
        assert refused.value.holder["address"] == first.address
        assert refused.value.holder["pid"] == first.proc.pid  # type: ignore[union-attr]
        assert first.proc is not None
        first.proc.kill()  # SIGKILL: no clean-up of any kind
        first.proc.wait()
        second = DevServer(db=db, log_file=str(tmp_path / "log")).start()
        second.stop()
    finally:
        first.stop()
    assert _processes_mentioning(str(tmp_path)) == []


# ---------------------------------------------------------------- discovery and ports


def test_settings_find_the_running_dev_server(tmp_path, listening, capsys):
    home = tmp_path / "home"
    home.mkdir()
    env = {"PHASEGATE_HOME": str(home), "TEMPORAL_CONFIG_FILE": str(tmp_path / "none.toml")}
    dev = {
        "address": f"127.0.0.1:{listening}",
        "ui_url": "http://localhost:9411",
        "pid": os.getpid(),
    }
    (home / "dev.json").write_text(json.dumps(dev))
    found = load_settings(env)
    assert found.temporal_address == f"127.0.0.1:{listening}"
    assert found.ui_port == 9411 and found.web_ui_url == "http://localhost:9411"
    explicit = load_settings({**env, "TEMPORAL_ADDRESS": "10.0.0.1:7233"})
    assert explicit.temporal_address == "10.0.0.1:7233"
    assert explicit.ui_url is None  # another server's UI is unknown: no link to this one's
    profile = tmp_path / "temporal.toml"
    profile.write_text('[profile.default]\naddress = "10.0.0.2:7233"\n')
    by_profile = load_settings({**env, "TEMPORAL_CONFIG_FILE": str(profile)})
    assert by_profile.temporal_address == "10.0.0.2:7233"
    # The running server's UI wins over the port a server would be asked to use.
    assert load_settings({**env, "PHASEGATE_UI_PORT": "9000"}).ui_port == 9411
    linked = load_settings({**env, "PHASEGATE_UI_URL": "https://temporal.example.com/"})
    assert linked.web_ui_url == "https://temporal.example.com"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("stale", ["dead pid", "closed port", "garbage"])
def test_a_stale_dev_file_is_ignored_with_a_note(tmp_path, capsys, stale):
    home = tmp_path / "home"
    home.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid = dead.pid if stale == "dead pid" else os.getpid()
    dev = {"address": f"127.0.0.1:{free_port()}", "ui_url": None, "pid": pid}
    text = "{not json" if stale == "garbage" else json.dumps(dev)
    (home / "dev.json").write_text(text)
    env = {"PHASEGATE_HOME": str(home), "TEMPORAL_CONFIG_FILE": str(tmp_path / "none.toml")}
    assert load_settings(env).temporal_address == "localhost:7233"
    err = capsys.readouterr().err
    assert f"note: ignoring {home}/dev.json" in err and "`phasegate dev`" in err, err
    reason = {"dead pid": "has exited", "closed port": "nothing answers", "garbage": "not a dev"}
    assert reason[stale] in err
    load_settings(env)
    assert capsys.readouterr().err == ""  # said once


def test_choose_port(listening):
    assert choose_port(None, listening, "--port") != listening  # taken: another, free one
    with pytest.raises(PhasegateError, match=rf"--port: port {listening} is already in use"):
        choose_port(listening, 7233, "--port")
    free = free_port()
    assert choose_port(None, free, "--port") == free


# ---------------------------------------------------------------- walkthrough evidence


def test_walkthrough_evidence_passes_phase_0():
    path = REPO / "library" / "spec_execution_v1" / "phases" / "0" / "gate-definition.yaml"
    gate = load_gate(yaml.safe_load(path.read_text(encoding="utf-8")), source=str(path))
    result = evaluate_gate(gate, json.loads(EVIDENCE.read_text(encoding="utf-8")))
    assert result.passed, result.problems


# ---------------------------------------------------------------- MCP over stdio


def _mcp(tmp_path: Path, stdin: int | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "phasegate.client.cli", "mcp"],
        cwd=REPO, env=_env(tmp_path, TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}"),
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


@contextlib.contextmanager
def _serving_mcp(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``phasegate mcp`` on a terminal (a raw pty as stdin), initialized: it is serving,
    its threads started. Killed on the way out if it is still running."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    proc = _mcp(tmp_path, slave)
    os.close(slave)
    try:
        os.write(master, (json.dumps(_INIT) + "\n").encode())
        assert proc.stdout is not None
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == 1 and "result" in reply
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_stdio_mcp_stops_on_one_ctrl_c(tmp_path):
    """On a terminal the transport's stdin thread blocks in read(); one SIGINT ends it."""
    with _serving_mcp(tmp_path) as proc:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=10)
    assert code in (0, 130)
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read().decode()


def _unblocked(pid: int, signum: int) -> list[int]:
    """Threads of ``pid`` that do not block ``signum`` (from /proc's SigBlk masks)."""
    unblocked = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        blocked = re.search(r"^SigBlk:\s*([0-9a-f]+)$", status, re.MULTILINE)
        assert blocked is not None, status
        if not int(blocked.group(1), 16) & (1 << (signum - 1)):
            unblocked.append(int(task.name))
    return unblocked


def test_stdio_mcp_takes_ctrl_c_on_one_waiting_thread(tmp_path):
    """The kernel gives a process's signal to any thread that does not block it.

    Before, every thread took SIGINT, and one landing on the stdin thread left the main
    thread asleep in its event loop, so Ctrl-C did nothing (a CI run saw it hang 10 s).
    Now exactly one thread, which only waits for the signal, can take it.
    """
    with _serving_mcp(tmp_path) as proc:
        threads = list(Path(f"/proc/{proc.pid}/task").iterdir())
        assert len(threads) >= 3  # main, the stdin reader, the signal waiter
        for signum in (signal.SIGINT, signal.SIGTERM):
            takers = _unblocked(proc.pid, signum)
            assert len(takers) == 1 and takers[0] != proc.pid, (signum, takers)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_stdio_mcp_stops_when_the_client_closes_stdin(tmp_path):
    proc = _mcp(tmp_path, subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(_INIT) + "\n").encode())
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    proc.stdin.close()
    try:
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read().decode()
