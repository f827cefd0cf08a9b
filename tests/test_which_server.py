"""Which server a command talks to (issue 19, part 5): two projects, each with its own
server on non-default ports (``phasegate dev`` in one, ``phasegate server`` in the
other), the CLI run as a subprocess in each, in a subfolder, in a nested repository,
and with a ``TEMPORAL_ADDRESS`` / ``PHASEGATE_HOME`` that points at the other project.

The rule: the nearest ``.phasegate/dev.json`` from the current folder up to the project
root (``.git``) decides; a command says which server it uses when that is not the
obvious one (a parent folder's, or another project's while this one runs its own), and
how it found it; errors and hints say it too; Web UI links follow the server used."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import cli_argv
from ports import free_port

from phasegate.temporal import load_settings, unreachable

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "examples" / "specs" / "todo-api"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    env.update(
        PYTHONUNBUFFERED="1",
        PHASEGATE_CONFIG_DIR=str(tmp_path / "config"),
        TEMPORAL_CONFIG_FILE=str(tmp_path / "no-temporal.toml"),  # no user profile
        **extra,
    )
    return env


def _cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [*cli_argv(), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=90,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr
    return run


class Server:
    """``phasegate dev`` or ``phasegate server`` running in ``cwd``."""

    def __init__(self, cwd: Path, env: dict[str, str], command: str) -> None:
        self.port, self.ui_port = free_port(), free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "phasegate.client.cli", command,
             "--port", str(self.port), "--ui-port", str(self.ui_port)],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 90
        while "Ctrl-C stops" not in "\n".join(self.lines):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.lines
            time.sleep(0.05)
        self.address = f"127.0.0.1:{self.port}"
        self.ui = f"http://localhost:{self.ui_port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def projects(tmp_path: Path) -> Iterator[tuple[Server, Server, dict[str, str]]]:
    """Project a/ runs ``phasegate dev``, project b/ ``phasegate server``, both on free
    ports; tmp_path is a repository root, so no walk leaves it."""
    (tmp_path / ".git").mkdir()
    for folder in ("a/sub/deeper", "a/nested/.git", "b", "c"):
        (tmp_path / folder).mkdir(parents=True)
    env = _env(tmp_path)
    a = Server(tmp_path / "a", env, "dev")
    try:
        b = Server(tmp_path / "b", env, "server")
        try:
            yield a, b, env
        finally:
            b.stop()
    finally:
        a.stop()
    assert not (tmp_path / "a" / ".phasegate" / "dev.json").exists()


def _header(run: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in run.stderr.splitlines() if ln.startswith("phasegate: Temporal at")]


@pytest.mark.timeout(300)
def test_each_folder_reaches_its_projects_server_and_says_so(projects, tmp_path):
    a, b, env = projects
    root = tmp_path

    # The project's own folder: its server, nothing said.
    here = _cli(root / "a", env, "list")
    assert here.returncode == 0 and "no sessions" in here.stdout, here.stderr
    assert _header(here) == [], here.stderr

    # A subfolder finds the project's server (it reached localhost:7233 before), and says
    # where the address came from.
    deeper = root / "a" / "sub" / "deeper"
    listed = _cli(deeper, env, "list")
    assert listed.returncode == 0 and "no sessions" in listed.stdout, listed.stderr
    said = f"phasegate: Temporal at {a.address} (from .phasegate/dev.json in {root / 'a'}, "
    assert _header(listed) == [said + "`phasegate dev`)"], listed.stderr
    which = json.loads(_cli(deeper, env, "which", "--json").stdout)
    assert which["address"] == a.address and which["found"] == "dev.json", which
    assert which["dev_file"] == str(root / "a" / ".phasegate" / "dev.json")
    assert which["workers"] == 1 and which["ui_url"] == a.ui and which["error"] is None

    # A repository nested in the project is a project of its own: never the parent's.
    nested = json.loads(_cli(root / "a" / "nested", env, "which", "--json").stdout)
    assert nested["address"] == "localhost:7233" and nested["found"] == "default", nested
    assert f"up to {root / 'a' / 'nested'}" not in nested["how"]  # its own folder is the root
    assert f"no .phasegate/dev.json in {root / 'a' / 'nested'}" in nested["how"], nested

    # The other project: its own server, whose command runs no worker, said in its words.
    there = _cli(root / "b", env, "which")
    assert there.returncode == 0, there.stdout + there.stderr
    assert f"Temporal  {b.address} (from .phasegate/dev.json in {root / 'b'}, " in there.stdout
    assert (
        f"0 workers polling; `phasegate server` runs no worker: run `phasegate worker` in "
        f"{root / 'b'}" in there.stdout
    ), there.stdout

    # An environment pointing at project a's server, used in project b: it wins, and the
    # command says that project b runs another server (it was silent before).
    for extra, fix in (
        ({"TEMPORAL_ADDRESS": a.address}, "unset TEMPORAL_ADDRESS"),
        ({"PHASEGATE_HOME": str(root / "a" / ".phasegate")}, "unset PHASEGATE_HOME"),
    ):
        crossed = _cli(root / "b", {**env, **extra}, "list")
        assert crossed.returncode == 0, crossed.stderr
        (line,) = _header(crossed)
        assert line.startswith(f"phasegate: Temporal at {a.address} (from "), line
        assert (
            f"note: this project's `phasegate server` (.phasegate/dev.json in {root / 'b'}) "
            f"serves {b.address}: {fix} to use it" in line
        ), line
    # Where no project runs a server, an explicit address is the obvious one: quiet.
    plain = _cli(root / "c", {**env, "TEMPORAL_ADDRESS": a.address}, "list")
    assert plain.returncode == 0 and _header(plain) == [], plain.stderr


@pytest.mark.timeout(300)
def test_web_ui_links_and_hints_follow_the_server_used(projects, tmp_path):
    a, _, env = projects
    args = ("start", "spec_execution_v1", str(SPEC), "--spec", str(SPEC), "--json", "--no-wait")
    # TEMPORAL_ADDRESS naming the project's running server (what `phasegate dev` prints
    # under "Elsewhere"): the link is that server's UI, not localhost:8233.
    for cwd, extra in (
        (tmp_path / "a", {"TEMPORAL_ADDRESS": a.address}),
        (tmp_path / "a" / "sub", {}),
        (tmp_path / "a", {"PHASEGATE_UI_PORT": "9999"}),  # the running server's UI wins
    ):
        started = _cli(cwd, {**env, **extra}, *args)
        assert started.returncode == 0, started.stderr
        link = json.loads(started.stdout)["ui_url"]
        assert link.startswith(f"{a.ui}/namespaces/default/workflows/"), (extra, link)
    linked = _cli(tmp_path / "a", {**env, "PHASEGATE_UI_URL": "https://ui.example/"}, *args)
    assert json.loads(linked.stdout)["ui_url"].startswith("https://ui.example/namespaces/")

    # The worker's refusal (no approver keys) names the command this person runs.
    refused = _cli(tmp_path / "a" / "sub", env, *args[:-2])  # waits for the worker's answer
    assert refused.returncode == 1 and "nobody could approve" in refused.stderr, refused.stderr
    assert '"$(phasegate keys export NAME)" phasegate dev' in refused.stderr, refused.stderr
    assert "phasegate worker" not in refused.stderr


# ---------------------------------------------------------------- in one process


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_web_ui_of_an_explicit_address(tmp_path, listening):
    """No dev.json names the server: a server on this machine has its UI where the
    Temporal dev server puts it (frontend port + 1000, or PHASEGATE_UI_PORT) if something
    answers there; elsewhere the UI is unknown (links left out) unless PHASEGATE_UI_URL."""
    env = {"PHASEGATE_HOME": str(tmp_path), "TEMPORAL_CONFIG_FILE": str(tmp_path / "none")}
    local = load_settings({**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{listening - 1000}"})
    assert local.ui_url == f"http://localhost:{listening}"
    asked = load_settings(
        {**env, "TEMPORAL_ADDRESS": "localhost:7", "PHASEGATE_UI_PORT": str(listening)}
    )
    assert asked.ui_url == f"http://localhost:{listening}"
    assert load_settings({**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}).ui_url is None
    assert load_settings({**env, "TEMPORAL_ADDRESS": "temporal.example:7233"}).ui_url is None
    told = {**env, "TEMPORAL_ADDRESS": "temporal.example:7233", "PHASEGATE_UI_URL": "https://u/"}
    assert load_settings(told).web_ui_url == "https://u"


def _dev_file(folder: Path, address: str, command: str, queue: str | None) -> None:
    (folder / ".phasegate").mkdir(parents=True, exist_ok=True)
    data = {"address": address, "ui_url": None, "pid": os.getpid(), "command": command,
            "task_queue": queue}  # fmt: skip
    (folder / ".phasegate" / "dev.json").write_text(json.dumps(data))


async def test_hints_name_the_command_that_runs_the_server(env, tmp_path):
    """A `phasegate dev` user is told about `phasegate dev`, never `phasegate worker` or
    `phasegate server` (the hints named those whatever ran the server)."""
    from phasegate.client.api import PhasegateClient

    address = env.client.service_client.config.target_host
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    _dev_file(project, address, "phasegate dev", "phasegate")
    home = {"PHASEGATE_HOME": str(project / ".phasegate"), "TEMPORAL_CONFIG_FILE": "/none"}
    settings = load_settings(home)
    assert settings.temporal_address == address
    pg = PhasegateClient(env.client, "phasegate")
    hint = pg._no_answer("session s1").hint or ""
    assert f"check that `phasegate dev` is still running in {project}" in hint, hint
    assert "phasegate worker" not in hint and "phasegate server" not in hint
    other = PhasegateClient(env.client, "elsewhere")._no_answer("session s1").hint or ""
    assert "serves task queue 'phasegate', not 'elsewhere'" in other, other

    _dev_file(project, address, "phasegate server", None)
    load_settings(home)
    hint = pg._no_answer("session s1").hint or ""
    assert f"`phasegate server` runs no worker: run `phasegate worker` in {project}" in hint


def test_unreachable_says_where_the_address_came_from(tmp_path, monkeypatch, capsys):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (project / ".phasegate").mkdir()
    stale = {"address": f"127.0.0.1:{free_port()}", "pid": dead.pid, "command": "phasegate dev"}
    (project / ".phasegate" / "dev.json").write_text(json.dumps(stale))
    monkeypatch.chdir(project / "src")
    settings = load_settings({"TEMPORAL_CONFIG_FILE": str(tmp_path / "none")})
    err = unreachable(settings)
    assert err.message == (
        f"cannot reach Temporal at localhost:7233 (the default: {project}/.phasegate/dev.json "
        f"is ignored (process {dead.pid} that wrote it has exited))"
    ), err.message
    assert err.hint is not None and err.hint.startswith("start `phasegate dev` in your project")
    assert "note: ignoring" in capsys.readouterr().err
    (project / ".phasegate" / "dev.json").unlink()
    err = unreachable(load_settings({"TEMPORAL_CONFIG_FILE": str(tmp_path / "none")}))
    assert f"no .phasegate/dev.json in {project / 'src'} or a parent up to {project}" in str(err)
