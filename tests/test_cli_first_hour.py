"""A new user's first hour with the CLI (issue 9, items 4 and 5 and what came with them):
bad ``--file`` evidence is a one-line error, ``start`` checks TARGET, ``--spec`` and the
workflow type before any workflow exists, a session that failed to start says so and
why, ``submit``/``watch`` say when no worker polls and how long a verify check has run,
``status`` shows the audit trail and an abandon reason, ``sessions prune`` removes
failed starts. Real subprocesses against the shared dev server, as in test_cli.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
from cli_helpers import cli_argv
from ports import free_port
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from test_cli import FIXTURES, REPO, _base_env, _run

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import ControlRequest

SPEC = "## Phase 1: Setup\n\n- [ ] 1.1 Create the project\n"
SLOW_TEST = "import time\n\n\ndef test_slow():\n    time.sleep(4)\n"


@pytest.fixture
def offline():
    """The CLI with no server at its address (evidence is checked before connecting)."""
    env = _base_env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")

    async def cli(*args: str, stdin: str | None = None):
        return await _run(env, *args, stdin=stdin)

    return cli


@pytest.fixture
def online_cli(env, settings_for):
    """``(cli, settings, pg)``: the CLI on the test server and a fresh task queue; no
    worker runs unless the test starts one (``run_worker(settings)``)."""
    settings = settings_for(FIXTURES / "library")
    base = _base_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        PHASEGATE_TASK_QUEUE=settings.task_queue,
        PHASEGATE_LIBRARY=str(FIXTURES / "library"),
        PHASEGATE_HOME=settings.home,
    )

    async def cli(*args: str, stdin: str | None = None, **extra: str):
        return await _run({**base, **extra}, *args, stdin=stdin)

    cli.env = base  # type: ignore[attr-defined]
    return cli, settings, PhasegateClient(env.client, settings.task_queue)


async def _exists(pg: PhasegateClient, sid: str) -> bool:
    try:
        await pg.handle(sid).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def _until(check, what: str, timeout: float = 30.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while not (result := await check()):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(every)
    return result


def _one_line_error(r, *parts: str) -> None:
    assert r.code == 1 and r.out == "", r.out + r.err
    assert r.err.startswith("error: ") and r.err.count("\n") == 1, r.err
    for part in parts:
        assert part in r.err, (part, r.err)


async def test_bad_evidence_files_are_one_line_errors(offline, tmp_path):
    png = tmp_path / "shot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(64))
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"summary": "caf\xe9"}')
    bad = tmp_path / "bad.json"
    bad.write_text('{"modules_found": 3,\n "summary": }\n')
    listed = tmp_path / "list.json"
    listed.write_text('[{"modules_found": 3}]')
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"log": "x" * (600 * 1024)}))
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"log": "x" * (3 * 1024 * 1024)}))
    runs = await asyncio.gather(
        *(offline("submit", "s1", "--file", str(p)) for p in (png, latin, bad, listed, big, huge)),
        offline("submit", "s1", "--file", "-", stdin='"just text"'),
        offline("submit", "s1", "--file", str(tmp_path / "missing.json")),
    )
    what = "JSON object of the gate's fields"  # the hint: what to send instead
    png_r, latin_r, bad_r, list_r, big_r, huge_r, stdin_r, missing_r = runs
    _one_line_error(png_r, f"--file {png}: binary data, not JSON", "NUL byte", what)
    _one_line_error(latin_r, f"--file {latin}: binary data", "0xe9", what)
    _one_line_error(bad_r, f"--file {bad}:2: invalid JSON", "column", what)
    _one_line_error(list_r, f"--file {listed}: the evidence must be a JSON object, not a list")
    _one_line_error(big_r, f"--file {big}: the evidence is 600 KiB", "more than 512 KiB")
    _one_line_error(huge_r, f"--file {huge}: the evidence file is 3 MiB", "512 KiB")
    _one_line_error(stdin_r, "--file -: the evidence must be a JSON object, not a string")
    _one_line_error(missing_r, "missing.json: no such file", what)


async def test_start_checks_target_spec_and_type_before_starting(online_cli, tmp_path):
    cli, _, pg = online_cli
    project = tmp_path / "project"
    (project / "spec").mkdir(parents=True)
    (project / "spec" / "tasks.md").write_text("")
    (project / "notes.md").write_text("# Notes\n\nJust prose.\n")
    outside = tmp_path / "elsewhere" / "tasks.md"
    outside.parent.mkdir()
    outside.write_text(SPEC)
    cases = [
        (["mini_v1", str(tmp_path / "nope")], [f"TARGET {tmp_path / 'nope'}: no such folder"]),
        (["mini_v1", str(outside)], ["TARGET", "is a file, not a folder"]),
        (["mini_v9", str(project)], ["WORKFLOW_TYPE", "'mini_v9' not found", "mini_v1"]),
        (["dyn_v1", str(project)], ["--spec: workflow dyn_v1 builds its phases from a spec"]),
        (["dyn_v1", str(project), "--spec", str(project / "nope")], ["no such file or folder"]),
        (
            ["dyn_v1", str(project), "--spec", str(project / "spec")],
            [f"--spec {project / 'spec' / 'tasks.md'}:1: the file is empty"],
        ),
        (
            ["dyn_v1", str(project), "--spec", str(project / "notes.md")],
            [f"--spec {project / 'notes.md'}:1: no phases found"],
        ),
        (
            ["dyn_v1", str(project), "--spec", str(outside)],
            ["the spec is outside TARGET", "PHASEGATE_SPEC_ROOTS"],
        ),
    ]
    ids = [f"typo-{uuid.uuid4().hex[:8]}" for _ in cases]
    runs = await asyncio.gather(
        *(cli("start", *args, "--id", sid) for (args, _), sid in zip(cases, ids, strict=True))
    )
    for (args, parts), r in zip(cases, runs, strict=True):
        assert r.code == 1, (args, r.out, r.err)
        _one_line_error(r, *parts)
    # No workflow was started: nothing for the worker to fail on, nothing to prune.
    assert not any(await asyncio.gather(*(_exists(pg, sid) for sid in ids)))
    # The folder the worker also accepts specs from (PHASEGATE_SPEC_ROOTS) passes here too.
    ok = f"roots-{uuid.uuid4().hex[:8]}"
    r = await cli(
        "start", "dyn_v1", str(project), "--spec", str(outside), "--no-wait", "--id", ok,
        PHASEGATE_SPEC_ROOTS=str(outside.parent),
    )  # fmt: skip
    assert r.code == 0, r.err
    await pg.handle(ok).terminate("test over")


async def _raw_failed_start(cli, project: Path, sid: str, *, wait: bool = False) -> None:
    """Start dyn_v1 on an empty spec, bypassing the local checks (as any Temporal client
    could): the worker's load fails."""
    (project / "tasks.md").write_text("")
    flags = () if wait else ("--no-wait",)
    r = await cli("start", "dyn_v1", str(project), "--spec", str(project / "tasks.md"),
                  "--no-check", "--id", sid, *flags)  # fmt: skip
    if wait:  # start itself waits and reports the failure
        _one_line_error(r, "tasks.md:1: the file is empty")
    else:
        assert r.code == 0, r.err


async def _listed_failed(pg: PhasegateClient, *ids: str) -> None:
    async def listed():
        rows = await pg.failed_starts(workflow_type="dyn_v1", limit=500)
        return set(ids) <= {row.session_id for row in rows}

    await _until(listed, "visibility never listed the failed starts")


async def test_a_failed_start_says_it_failed_and_why(online_cli, run_worker, tmp_path):
    cli, settings, pg = online_cli
    bad, waited = (f"{k}-{uuid.uuid4().hex[:8]}" for k in ("bad", "waited"))
    async with run_worker(settings):
        await _raw_failed_start(cli, tmp_path, bad)
        await _raw_failed_start(cli, tmp_path, waited, wait=True)

        async def closed():
            desc = await pg.handle(bad).describe()
            return desc.status == WorkflowExecutionStatus.FAILED

        await _until(closed, "the bad start did not fail")
        status, watch = await asyncio.gather(cli("status", bad), cli("watch", bad))
        for r in (status, watch):  # not "still starting" forever
            _one_line_error(
                r, f"session {bad} failed to start", "tasks.md:1: the file is empty",
                "phasegate start", "phasegate sessions prune",
            )  # fmt: skip
    await _listed_failed(pg, bad, waited)
    r = await cli("list", "--failed", "--workflow", "dyn_v1", "--limit", "500")
    assert r.code == 0, r.err
    row = next(line for line in r.out.splitlines() if line.startswith(bad))
    assert "failed to start (failed)" in row
    assert f"  {bad}: " in r.out and f"  {waited}: " in r.out and "the file is empty" in r.out


@pytest.mark.timeout(300)  # Temporal deletes in the background: about 35 s on the dev server
async def test_sessions_prune_removes_failed_starts_only(online_cli, run_worker, tmp_path):
    cli, settings, pg = online_cli
    bad, good = (f"{k}-{uuid.uuid4().hex[:8]}" for k in ("bad", "good"))
    async with run_worker(settings):
        await _raw_failed_start(cli, tmp_path, bad)
        r = await cli("start", "mini_v1", str(tmp_path), "--id", good)
        assert r.code == 0, r.err
    await _listed_failed(pg, bad)
    dry, recent = await asyncio.gather(
        cli("sessions", "prune", "--workflow", "dyn_v1", "--limit", "500"),
        cli("sessions", "prune", "--workflow", "dyn_v1", "--older-than", "1h", "--limit", "500"),
    )
    assert dry.code == 0 and bad in dry.out and "run again with --yes" in dry.out, dry.err
    assert recent.code == 0 and bad not in recent.out, recent.out  # started just now
    assert await _exists(pg, bad)  # a dry run deletes nothing
    r = await cli("sessions", "prune", "--yes", "--json", "--limit", "500")
    assert r.code == 0, r.err
    deleted = {row["session_id"] for row in json.loads(r.out)["deleted"]}
    assert bad in deleted and good not in deleted

    async def gone():
        return not await _exists(pg, bad)

    await _until(gone, "the failed start was not deleted", timeout=150, every=2)
    desc = await pg.handle(good).describe()
    assert desc.status == WorkflowExecutionStatus.RUNNING  # a running session stays
    await pg.handle(good).terminate("test over")
    r = await cli("sessions", "prune", "--older-than", "soon")
    _one_line_error(r, "--older-than: expected a duration like 30m")


async def test_submit_says_when_no_worker_polls(online_cli, run_worker, tmp_path):
    cli, settings, pg = online_cli
    # A queue no worker ever polled.
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    lonely = f"lonely-{uuid.uuid4().hex[:8]}"
    r = await cli("start", "mini_v1", str(tmp_path), "--no-wait", "--id", lonely,
                  PHASEGATE_TASK_QUEUE=queue)  # fmt: skip
    assert r.code == 0, r.err
    # A worker that was there and stopped (the server still lists it for minutes).
    async with run_worker(settings):
        sid = await pg.start("mini_v1", str(tmp_path))
    # The three submissions wait out their timeouts side by side (no answer comes).
    nobody, stopped, quiet = await asyncio.gather(
        cli("submit", lonely, "--phase", "0", "--set", "modules_found=1", "--timeout", "4"),
        cli("submit", sid, "--set", "modules_found=1", "--timeout", "9"),
        # --no-progress: only the error.
        cli("submit", sid, "--phase", "0", "--set", "a=1", "--timeout", "2", "--no-progress"),
    )
    r = nobody
    assert r.code == 1 and r.out == "", r.out
    assert f"no worker is polling task queue '{queue}'" in r.err, r.err
    assert "phasegate worker" in r.err
    assert f"error: no answer from session {lonely} within 4 s" in r.err
    assert "--id " in r.err and f"phasegate status {lonely}" in r.err
    await pg.handle(lonely).terminate("test over")

    r = stopped
    assert r.code == 1, r.out + r.err
    assert "no worker" in r.err and "phasegate worker" in r.err, r.err
    assert f"no answer from session {sid} within 9 s" in r.err
    _one_line_error(quiet, "within 2 s")
    await pg.handle(sid).terminate("test over")


async def test_submit_and_watch_show_a_running_verify_check(
    online_cli, run_worker, tmp_path, monkeypatch
):
    cli, settings, pg = online_cli
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "tests" / "test_slow.py").write_text(SLOW_TEST)
    (ws / "NOTES.md").write_text("notes\n")
    # The check runs `python3 -m pytest`: this virtualenv's python3 has pytest.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    async with run_worker(settings):
        sid = await pg.start("verified_v1", str(ws))
        watch = await asyncio.create_subprocess_exec(
            *cli_argv(), "watch", sid, "--interval", "0.5",
            cwd=REPO, env=cli.env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            r = await cli("submit", sid, "--set", "tests_passing=true", "--set", "test_path=tests")
            assert r.code == 0 and "passed: phase 0" in r.out, r.out + r.err
            assert re.search(r"verify phase 0: running for \d+ s \(attempt 1\)", r.err), r.err
            await asyncio.sleep(1.5)  # watch prints the advance
        finally:
            watch.send_signal(signal.SIGINT)
            out, err = await asyncio.wait_for(watch.communicate(), 30)
    text = out.decode()
    assert watch.returncode == 0, err.decode()
    assert re.search(r"verify phase 0: running for \d+ s \(attempt 1\)", text), text
    assert "phase 1 (2 of 2): Ship" in text and "Traceback" not in err.decode()


async def test_status_shows_audit_trail_and_abandon_reason(online_cli, run_worker, tmp_path):
    cli, settings, pg = online_cli
    async with run_worker(settings):
        sid = await pg.start("mini_v1", str(tmp_path))
        for action, reason in (("pause", "lunch"), ("resume", ""), ("abandon", "spec withdrawn")):
            await pg.control(sid, ControlRequest(action=action, reason=reason, actor="carol"))
        r = await cli("status", sid)
    assert r.code == 0, r.err
    assert "abandoned at phase 0 (1 of 3): Analyse by carol: spec withdrawn" in r.out, r.out
    trail = r.out[r.out.index("audit trail:") :].splitlines()
    assert [line.strip().split(" ", 4)[-1] for line in trail[1:]] == [
        "pause by carol: lunch",
        "resume by carol",
        "abandon by carol: spec withdrawn",
    ], trail
    assert all(" phase 0 " in line for line in trail[1:])
    assert not re.search(r"\b(None|True|False)\b", r.out), r.out
    assert "1/3" not in r.out


def _library_with(folder: Path, workflow_type: str) -> Path:
    """A library folder holding ``workflow_type`` (mini_v1 under another name)."""
    import shutil

    shutil.copytree(FIXTURES / "library" / "mini_v1", folder / workflow_type)
    meta = json.loads((folder / workflow_type / "metadata.json").read_text())
    meta["workflow_type"] = workflow_type
    (folder / workflow_type / "metadata.json").write_text(json.dumps(meta))
    return folder


async def test_workflow_not_found_says_whose_library(online_cli, offline, run_worker, tmp_path):
    """Issue 19: "workflow 'x' not found … add a library folder with PHASEGATE_LIBRARY"
    while that variable was set (it was another worker's library). The error says which
    library was searched, this shell's (start's own check) or the worker's, and what to do."""
    cli, settings, _ = online_cli
    shell_lib = _library_with(tmp_path / "shell-lib", "only_here_v1")
    # This shell has the workflow, the worker does not: the worker's library answers.
    async with run_worker(settings):
        r = await cli("start", "only_here_v1", str(tmp_path), PHASEGATE_LIBRARY=str(shell_lib))
    _one_line_error(r, "workflow 'only_here_v1' not found in the worker's library (")
    assert str(FIXTURES / "library") in r.err and str(shell_lib) not in r.err.split("(hint")[0]
    assert "the worker reads PHASEGATE_LIBRARY where it starts: set it there and restart" in r.err
    assert f"(this shell's PHASEGATE_LIBRARY={shell_lib} does not reach it)" in r.err, r.err
    # This shell's library lacks it: start's own check says it searched this shell's.
    r = await offline("start", "mini_v1", str(tmp_path))  # no PHASEGATE_LIBRARY here
    _one_line_error(r, "WORKFLOW_TYPE: workflow 'mini_v1' not found in this shell's library (")
    assert "PHASEGATE_LIBRARY is not set" in r.err and "--no-check" in r.err, r.err
