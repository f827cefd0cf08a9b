"""``phasegate task ...``, ``session use|current`` and ``doctor`` end to end: real
subprocesses against the shared dev server, a worker in this process, a ``tasks_v1``
session (tests/fixtures/library: a tasks.md whose phase gate waits for its tasks) with
its ``.workflow/`` files in the test's project folder.

Commands run from inside the project (a subfolder, even) so SESSION comes from the
active-session marker, as an agent in a repository would run them."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from cli_helpers import cli_argv
from ports import free_port

from phasegate.client.api import PhasegateClient

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

SPEC = """# Tasks: greeting

## Phase 1: Build

- [ ] T001 Write the greeting file
  - Acceptance: `greeting.txt` contains `hello`
- [ ] T002 Document it (depends on T001)
- [ ] T003 Tidy up

## Phase 2: Ship

- [ ] T004 Tag the release
"""


@dataclass
class Run:
    code: int
    out: str
    err: str


Cli = Callable[..., Awaitable[Run]]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


async def _run(env: dict[str, str], cwd: Path, *args: str, stdin: str | None = None) -> Run:
    proc = await asyncio.create_subprocess_exec(
        *cli_argv(),
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(
        proc.communicate(stdin.encode() if stdin is not None else None), 90
    )
    assert proc.returncode is not None
    run = Run(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in run.err, run.err
    assert "temporalio" not in run.err and "RPCError" not in run.err, run.err
    return run


@pytest_asyncio.fixture
async def online(env, settings_for, run_worker) -> AsyncIterator[tuple[Cli, PhasegateClient]]:
    """``cli(*args, cwd=..., **env)``: the CLI pointed at the test server (a worker on a
    fresh task queue), run in ``cwd``."""
    settings = settings_for(FIXTURES / "library")
    cli_env = _env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        PHASEGATE_TASK_QUEUE=settings.task_queue,
        PHASEGATE_LIBRARY=str(FIXTURES / "library"),
        PHASEGATE_HOME=settings.home,
    )

    async def cli(*args: str, cwd: Path = REPO, stdin: str | None = None, **extra: str) -> Run:
        return await _run({**cli_env, **extra}, cwd, *args, stdin=stdin)

    async with run_worker(settings):
        yield cli, PhasegateClient(env.client, settings.task_queue)


@pytest.fixture
def offline(tmp_path) -> Cli:
    """The CLI with no server: what must be refused before connecting."""
    cli_env = _env(
        PHASEGATE_LIBRARY=str(FIXTURES / "library"), TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}"
    )

    async def cli(*args: str, cwd: Path = tmp_path, **extra: str) -> Run:
        return await _run({**cli_env, **extra}, cwd, *args)

    return cli


async def _project(cli: Cli, pg: PhasegateClient, root: Path) -> tuple[str, str]:
    """A tasks_v1 session on ``root`` with task files, made the project's active
    session; returns its id and WFS folder."""
    (root / "tasks.md").write_text(SPEC)
    sid = f"tasks-{uuid.uuid4().hex[:8]}"
    r = await cli(
        "start",
        "tasks_v1",
        str(root),
        "--spec",
        str(root / "tasks.md"),
        "--task-files",
        "--id",
        sid,
    )
    assert r.code == 0, r.err
    folder = ""
    for _ in range(200):  # the first projection writes the folder
        folder = _folder(root)
        if folder:
            break
        await asyncio.sleep(0.05)
    assert folder, "the session never wrote its .workflow folder"

    r = await cli("session", "use", sid, "--root", str(root))
    assert r.code == 0, r.err
    assert sid in r.out and folder in r.out
    r = await cli("session", "current", "--root", str(root))
    assert r.code == 0 and r.out.split() == [sid, folder], r.out + r.err
    return sid, folder


def _folder(root: Path) -> str:
    found = sorted((root / ".workflow").glob("WFS-*/workflow-session.json"))
    return f".workflow/{found[0].parent.name}" if found else ""


async def test_work_the_tasks_of_a_session_from_the_project(online, tmp_path):
    cli, pg = online
    sid, folder = await _project(cli, pg, tmp_path)
    inside = tmp_path / "src" / "deep"
    inside.mkdir(parents=True)

    # SESSION comes from the marker, found walking up from a subfolder.
    r = await cli("task", "list", cwd=inside)
    assert r.code == 0, r.err
    assert f"session {sid} · phase 0 · 0 of 3 tasks done (session: 0 of 3)" in r.out
    assert "[ ] T002  Document it (depends on T001)  — waits for T001" in r.out
    assert "next ready: T001" in r.out

    # Who works: --as, else $PHASEGATE_AGENT; neither is an error that says so.
    r = await cli("task", "next", cwd=inside)
    assert r.code == 1 and "--as" in r.err and "PHASEGATE_AGENT" in r.err, r.err

    r = await cli("task", "next", "--as", "ann", cwd=inside)
    assert r.code == 0, r.err
    assert "claimed T001: Write the greeting file" in r.out
    assert "waits for: nothing" in r.out
    assert "- `greeting.txt` contains `hello`" in r.out  # what done checks
    done_cmd = f"phasegate task done {sid} T001 --as ann --summary 'what you did'"
    assert done_cmd in r.out

    # Another agent is refused, in the CLI's words; T002 still waits for T001.
    r = await cli("task", "start", "T001", cwd=inside, PHASEGATE_AGENT="bob")
    assert r.code == 1 and "error: task: T001 is claimed by ann" in r.err, r.err
    r = await cli("task", "start", sid, "T002", "--as", "bob", cwd=tmp_path)
    assert r.code == 1 and "T002 depends on T001, not complete yet" in r.err, r.err
    r = await cli("task", "start", "../x", "--as", "bob", cwd=inside)
    assert r.code == 1 and "error: task: '../x' is not a task id" in r.err, r.err
    assert "`phasegate task list` shows the ids" in r.err

    # done: the criterion is checked against the workspace; failing exits 2.
    r = await cli("task", "done", "T001", "--as", "ann", "--summary", "wrote it", cwd=inside)
    assert r.code == 2, r.out + r.err
    assert "T001 not completed: 1 of 1 criteria failed" in r.out
    assert "✗     `greeting.txt` contains `hello`" in r.out
    assert "what to do: fix what failed, then run again:" in r.out and done_cmd in r.out
    (tmp_path / "greeting.txt").write_text("hello world\n")
    evidence = tmp_path / "evidence.json"
    evidence.write_text(json.dumps({"files": ["greeting.txt"]}))
    r = await cli(
        "task",
        "done",
        "T001",
        "--as",
        "ann",
        "--summary",
        "wrote it",
        "--evidence-file",
        str(evidence),
        cwd=inside,
    )
    assert r.code == 0, r.out + r.err
    assert "T001 completed" in r.out and "✓     `greeting.txt` contains `hello`" in r.out
    assert f"next: T002 is ready: phasegate task next {sid} --as ann" in r.out

    # block releases the claim; split makes a container with progress.
    r = await cli("task", "start", "T003", "--as", "ann", cwd=inside)
    assert r.code == 0, r.err
    r = await cli(
        "task", "block", "T003", "--as", "ann", "--reason", "waits for design", cwd=inside
    )
    assert r.code == 0, r.err
    assert "T003 blocked: waits for design (claim released)" in r.out
    r = await cli(
        "task",
        "split",
        "T002",
        "--as",
        "ann",
        "--title",
        "Write docs.md",
        "--acceptance",
        "`docs.md` exists",
        cwd=inside,
    )
    assert r.code == 0 and "added T002.1: Write docs.md (subtask of T002" in r.out, r.err
    assert f"next: phasegate task start {sid} T002.1 --as ann" in r.out
    r = await cli(
        "task",
        "split",
        "T002",
        "--as",
        "ann",
        "--title",
        "Review them",
        "--depends-on",
        "T002.1",
        cwd=inside,
    )
    assert r.code == 0 and "waits for: T002.1" in r.out, r.out + r.err
    assert "task start" not in r.out  # never a start the session would refuse
    assert "next: T002.1 is ready: phasegate task next" in r.out, r.out
    r = await cli("task", "split", "T002.1", "--as", "ann", "--title", "deeper", cwd=inside)
    assert r.code == 1 and "two levels at most" in r.err, r.err

    r = await cli("task", "list", cwd=inside)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert "  ▸   T002  Document it (depends on T001)  (0/2 done)" in lines, r.out
    assert "    [ ] T002.1  Write docs.md" in lines
    assert "    [ ] T002.2  Review them  — waits for T002.1" in lines
    assert "  [!] T003  Tidy up  — blocked: waits for design" in lines
    assert "  [x] T001  Write the greeting file" in lines
    assert lines.index("  ▸   T002  Document it (depends on T001)  (0/2 done)") + 1 == lines.index(
        "    [ ] T002.1  Write docs.md"
    )  # subtasks right under their parent
    assert "next ready: T002.1" in r.out

    r = await cli("task", "list", "--json", cwd=inside)
    board = json.loads(r.out)
    assert board["next_task"] == "T002.1" and board["counts"]["container"] == 1
    r = await cli("task", "show", "T002", cwd=inside)
    assert r.code == 0 and "▸ T002: Document it (depends on T001)  (container)" in r.out, (
        r.out + r.err
    )
    assert "subtasks:" in r.out and "T002.2  Review them  — waits for T002.1" in r.out

    # The phase's rendered task text: `show --phase`, and the earlier `task S P T`.
    r = await cli("task", "show", "T001", "--phase", "0", cwd=inside)
    assert r.code == 0 and "Task T001" in r.out and "greeting.txt" in r.out, r.out + r.err
    legacy = await cli("task", sid, "0", "1")
    assert legacy.code == 0 and legacy.out == r.out, legacy.err
    r = await cli("task", sid, "1", "1")
    assert r.code == 3 and r.out == "" and "phase 1" in r.err, r.err

    # The files are views of this state: ▸ and the progress in TODO_LIST.md.
    todo = ""
    for _ in range(100):
        todo = (tmp_path / folder / "TODO_LIST.md").read_text()
        if "T002.2" in todo:
            break
        await asyncio.sleep(0.05)
    assert "▸ **T002**" in todo and "(0/2 done)" in todo, todo

    # doctor: the folder gone, its marker is orphaned; --fix removes it.
    shutil.rmtree(tmp_path / folder)
    r = await cli("doctor", "--root", str(tmp_path))
    assert r.code == 1 and "orphaned_marker" in r.out and "which is gone" in r.out, r.out
    r = await cli("doctor", "--fix", "--root", str(tmp_path))
    assert r.code == 0 and r.out.startswith("fixed: "), r.out + r.err
    assert not list((tmp_path / ".workflow").glob(".active-*"))
    r = await cli("doctor", "--root", str(tmp_path))
    assert r.code == 0 and "no problems found" in r.out, r.out + r.err
    r = await cli("task", "list", cwd=inside)
    assert r.code == 1 and "marks no active session" in r.err, r.err
    assert f"phasegate session use SESSION --root {tmp_path}" in r.err


async def test_a_wait_shows_what_it_waits_for(env, settings_for, tmp_path):
    """No worker polls the session's queue: within seconds stderr says so (and stdout
    stays clean for --json); the command is then interrupted."""
    settings = settings_for(FIXTURES / "library")
    pg = PhasegateClient(env.client, settings.task_queue)
    sid = await pg.start("tasks_v1", str(tmp_path), wait=False)  # no worker: never loads
    cli_env = _env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        PHASEGATE_TASK_QUEUE=settings.task_queue,
        PHASEGATE_HOME=settings.home,
    )
    proc = await asyncio.create_subprocess_exec(
        *cli_argv(),
        "task",
        "list",
        sid,
        "--json",
        cwd=tmp_path,
        env=cli_env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        line = await asyncio.wait_for(proc.stderr.readline(), 20)
        assert b"no worker is polling task queue" in line, line
        assert b"phasegate worker" in line
    finally:
        proc.kill()
        out, _ = await proc.communicate()
    assert out == b""


async def test_refused_before_connecting(offline, tmp_path):
    # No .workflow anywhere above: say how to name or choose a session.
    r = await offline("task", "list")
    assert r.code == 1, r.err
    assert "no .workflow/ folder in" in r.err and "phasegate session use SESSION" in r.err
    r = await offline("task", "next", "S")
    assert r.code == 1 and "who is working on the task?" in r.err, r.err

    bad = tmp_path / "e.json"
    bad.write_text("[1, 2]")
    r = await offline(
        "task", "done", "S", "T1", "--as", "a", "--summary", "s", "--evidence-file", str(bad)
    )
    assert r.code == 1 and f"--evidence-file {bad}: the evidence must be a JSON object" in r.err

    # A Claude-Code-Workflow marker (an empty file) names a session phasegate does not keep.
    ccw = "Johnhpure__music__two-sessions"
    shutil.copytree(FIXTURES / "workflow_folders" / ccw / ".workflow", tmp_path / ".workflow")
    r = await offline("task", "list")
    assert r.code == 1 and "phasegate does not keep" in r.err, r.err
    assert "phasegate start workflow_tasks_v1" in r.err


def test_documented_task_commands_parse():
    """Every `phasegate ...` command in docs/tasks.md and the README's task section is
    one the CLI takes, as written (synopsis lines with [optional] parts aside)."""
    import re
    import shlex

    from phasegate.client.cli import build_parser
    from phasegate.client.cli.tasks import legacy_words

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Task state") : readme.index("## Orchestrations")]
    text = (REPO / "docs" / "tasks.md").read_text(encoding="utf-8") + section
    blocks = re.findall(r"```(?:sh|console)\n(.*?)```", text, re.DOTALL)
    commands = []
    joined = [b.replace("\\\n", " ") for b in blocks]  # continuation lines as one
    for line in (ln.removeprefix("$ ").strip() for b in joined for ln in b.splitlines()):
        for part in re.split(r"&&|;", line.split("   #")[0].split(" >")[0]):
            words = shlex.split(part.split(" # ")[0])
            if words and words[0] == "phasegate" and not any(w[0] == "[" for w in words):
                commands.append(words[1:])  # a synopsis ([--root DIR]) is no command
    assert len(commands) >= 20, commands
    parser = build_parser()
    for argv in commands:
        parser.parse_args(legacy_words(argv))
