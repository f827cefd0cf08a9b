"""The ``project_task_files`` activity (``activities/task_files.py``) on real files.

Most tests hand the activity its :class:`TaskFilesSource` directly (an injected source
reader) and run it in an ``ActivityEnvironment``; one runs it in a real worker whose
fake session answers the ``task_files`` query, as ``GatedSession`` will.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from phasegate.activities.task_files import LOCK_FILE, MANIFEST, ORIGINALS, TaskFileActivities
from phasegate.domain.tasks.board import TaskBoard
from phasegate.domain.tasks.files import ProjectRequest, ProjectResult, TaskFilesSource
from phasegate.domain.tasks.messages import CompleteTask, StartTask
from phasegate.domain.tasks.model import TaskSpec
from phasegate.domain.tasks.projection import digest, render_files

FOLDER = ".workflow/WFS-demo"
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def board_of(tasks: int, subtasks: int = 0) -> TaskBoard:
    """``tasks`` top-level tasks, each with ``subtasks`` subtasks, each depending on the
    one before."""
    specs = []
    for n in range(1, tasks + 1):
        deps = [f"IMPL-{n - 1}"] if n > 1 else []
        specs.append(TaskSpec(id=f"IMPL-{n}", title=f"Task {n}", depends_on=deps))
        specs += [
            TaskSpec(id=f"IMPL-{n}.{k}", title=f"Part {k} of {n}", parent=f"IMPL-{n}")
            for k in range(1, subtasks + 1)
        ]
    board = TaskBoard()
    board.enter_phase(1, specs, T0)
    return board


def advance(board: TaskBoard, task_id: str, minutes: int) -> TaskBoard:
    """Complete ``task_id`` (a new board version)."""
    board = board.model_copy(deep=True)
    now = T0 + timedelta(minutes=minutes)
    board.apply_start(StartTask(agent="a", task=task_id), 1, now, [])
    done = CompleteTask(agent="a", task=task_id, summary=f"did {task_id}", evidence={"n": minutes})
    board.apply_complete(done, 1, now, [], [])
    return board


def source(board: TaskBoard, target: Path) -> TaskFilesSource:
    return TaskFilesSource(
        session_id="sess-1",
        workflow_type="spec_execution_v1",
        name="Demo",
        target=str(target),
        folder=FOLDER,
        status="active",
        current_phase=1,
        total_phases=2,
        board=board,
    )


def activities(src: TaskFilesSource, **kwargs: object) -> TaskFileActivities:
    async def read(req: ProjectRequest) -> TaskFilesSource:
        assert req.session_id == src.session_id
        return src

    return TaskFileActivities(source_reader=read, **kwargs)  # type: ignore[arg-type]


async def project(
    src: TaskFilesSource, previous: dict[str, str] | None = None, **kwargs: object
) -> tuple[ProjectResult, list[object]]:
    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    req = ProjectRequest(
        session_id=src.session_id,
        target=src.target,
        folder=src.folder,
        version=src.board.version,
        hashes=previous or {},
    )
    result = await env.run(activities(src, **kwargs).project, req)
    return result, beats


def on_disk(target: Path) -> dict[str, str]:
    """The view files (not the manifest, kept originals or a killed writer's temp files)."""
    base = target / FOLDER
    return {
        p.relative_to(base).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(base.rglob("*"))
        if p.is_file()
        and p.name not in (MANIFEST, LOCK_FILE)
        and ORIGINALS not in p.parts
        and p.suffix != ".tmp"
    }


def temp_files(target: Path) -> list[Path]:
    return [p for p in (target / FOLDER).rglob("*.tmp")]


# --------------------------------------------------------------------------- projections


async def test_first_projection_writes_every_file_and_the_next_writes_nothing(
    tmp_path: Path,
) -> None:
    src = source(advance(board_of(3, 2), "IMPL-1.1", 5), tmp_path)
    result, _ = await project(src)
    files = render_files(src)
    assert on_disk(tmp_path) == files
    assert result.written == len(files) and result.edits == [] and result.rebuilt == []
    assert result.hashes == {rel: digest(text.encode()) for rel, text in files.items()}
    assert result.version == src.board.version and result.folder == FOLDER
    again, _ = await project(src, result.hashes)
    assert (again.written, again.edits, again.rebuilt, again.hashes) == (0, [], [], result.hashes)


async def test_a_change_rewrites_only_what_changed(tmp_path: Path) -> None:
    before = source(board_of(3, 2), tmp_path)
    first, _ = await project(before)
    after = source(advance(before.board, "IMPL-1.1", 5), tmp_path)
    second, _ = await project(after, first.hashes)
    changed = {rel for rel, h in second.hashes.items() if first.hashes.get(rel) != h}
    assert second.written == len(changed) < len(second.hashes)
    assert ".summaries/IMPL-1.1-summary.md" in changed and on_disk(tmp_path) == render_files(after)


async def test_a_hand_edit_is_reported_and_overwritten(tmp_path: Path) -> None:
    src = source(board_of(2), tmp_path)
    first, _ = await project(src)
    todo = tmp_path / FOLDER / "TODO_LIST.md"
    todo.write_text(todo.read_text().replace("- [ ]", "- [x]"))
    task = tmp_path / FOLDER / ".task" / "IMPL-2.json"
    task.write_text(task.read_text().replace('"pending"', '"completed"'))
    second, _ = await project(src, first.hashes)
    assert sorted(second.edits) == [".task/IMPL-2.json", "TODO_LIST.md"] and second.rebuilt == []
    assert on_disk(tmp_path) == render_files(src) and second.written == 2


async def test_deleted_and_corrupted_files_are_rebuilt(tmp_path: Path) -> None:
    src = source(board_of(3), tmp_path)
    first, _ = await project(src)
    base = tmp_path / FOLDER
    (base / "IMPL_PLAN.md").unlink()
    (base / ".task" / "IMPL-1.json").write_text('{"id": "IMPL-1", "title": ')
    (base / ".task" / "IMPL-2.json").write_bytes(b"\xff\xfe not text")
    (base / ".task" / "IMPL-3.json").unlink()
    os.mkfifo(base / ".task" / "IMPL-3.json")  # never read: no hang
    second, _ = await project(src, first.hashes)
    assert sorted(second.rebuilt) == [
        ".task/IMPL-1.json",
        ".task/IMPL-2.json",
        ".task/IMPL-3.json",
        "IMPL_PLAN.md",
    ]
    assert second.edits == [] and on_disk(tmp_path) == render_files(src)


async def test_files_phasegate_never_wrote_are_kept_once_then_replaced(tmp_path: Path) -> None:
    base = tmp_path / FOLDER
    (base / ".task").mkdir(parents=True)
    (base / "IMPL_PLAN.md").write_text("# The team's own plan\n")
    (base / ".task" / "IMPL-1.json").write_text('{"id": "IMPL-1", "custom": true}\n')
    (base / "NOTES.md").write_text("not a view\n")
    src = source(board_of(2), tmp_path)
    result, _ = await project(src)
    assert sorted(result.edits) == [".task/IMPL-1.json", "IMPL_PLAN.md"]
    kept = base / ORIGINALS
    assert (kept / "IMPL_PLAN.md").read_text() == "# The team's own plan\n"
    assert json.loads((kept / ".task" / "IMPL-1.json").read_text()) == {
        "id": "IMPL-1",
        "custom": True,
    }
    assert (base / "NOTES.md").read_text() == "not a view\n"


async def test_files_no_longer_rendered_are_deleted_and_nothing_else(tmp_path: Path) -> None:
    src = source(board_of(2), tmp_path)
    first, _ = await project(src)
    (tmp_path / FOLDER / ".task" / "IMPL-9.json").write_text("{}")
    (tmp_path / "keep.txt").write_text("mine")
    previous = {**first.hashes, ".task/IMPL-9.json": "0" * 64, "../../keep.txt": "0" * 64}
    second, _ = await project(src, previous)
    assert not (tmp_path / FOLDER / ".task" / "IMPL-9.json").exists()
    assert (tmp_path / "keep.txt").read_text() == "mine" and "../../keep.txt" not in second.hashes


# --------------------------------------------------------------------------- containment


@pytest.mark.parametrize("link", [".workflow", FOLDER, f"{FOLDER}/.task"])
async def test_a_symlinked_folder_is_refused(tmp_path: Path, link: str) -> None:
    target, outside = tmp_path / "project", tmp_path / "outside"
    outside.mkdir()
    (target / link).parent.mkdir(parents=True, exist_ok=True)
    (target / link).symlink_to(outside, target_is_directory=True)
    with pytest.raises(ApplicationError) as err:
        await project(source(board_of(2), target))
    assert err.value.type == "workspace_refused" and err.value.non_retryable
    assert "symbolic link" in str(err.value) and "remove the link" in str(err.value)
    assert list(outside.iterdir()) == []


async def test_a_symlinked_file_is_replaced_never_followed(tmp_path: Path) -> None:
    src = source(board_of(2), tmp_path)
    first, _ = await project(src)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not touch\n")
    link = tmp_path / FOLDER / ".task" / "IMPL-1.json"
    link.unlink()
    link.symlink_to(secret)
    second, _ = await project(src, first.hashes)
    assert second.rebuilt == [".task/IMPL-1.json"] and not link.is_symlink()
    assert secret.read_text() == "do not touch\n" and on_disk(tmp_path) == render_files(src)


@pytest.mark.parametrize(
    "folder", ["../../etc", ".workflow/WFS-x/../../..", ".workflow/active/WFS-x"]
)
async def test_a_folder_that_is_not_a_task_folder_is_refused(tmp_path: Path, folder: str) -> None:
    src = source(board_of(1), tmp_path).model_copy(update={"folder": folder})
    with pytest.raises(ApplicationError, match="not a task folder") as err:
        await project(src)
    assert err.value.type == "workspace_refused"


async def test_targets_outside_the_workers_roots_and_oversize_boards_are_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "allowed").mkdir()
    src = source(board_of(1), tmp_path)
    with pytest.raises(ApplicationError, match="PHASEGATE_TARGET_ROOTS") as err:
        await project(src, target_roots=[str(tmp_path / "allowed")])
    assert err.value.type == "workspace_refused"
    with pytest.raises(ApplicationError, match="largest is") as err:
        await project(src, max_bytes=2000)
    assert err.value.type == "payload_too_large" and not (tmp_path / ".workflow").exists()


# --------------------------------------------------------------------------- killed workers

_WRITER = """
import json, sys, time
from pathlib import Path
import phasegate.activities.task_files as tf
from phasegate.domain.tasks.files import TaskFilesSource
from phasegate.domain.tasks.projection import render_files
root, mode, pause_at, *sources = sys.argv[1:]
tf.HEARTBEAT_EVERY = 1
rendered = [render_files(TaskFilesSource.model_validate_json(Path(s).read_text())) for s in sources]
def progress(done):
    if done == int(pause_at):
        print("paused", flush=True)
        time.sleep(120)  # killed here, between two files
print("started", flush=True)
while True:
    for files in rendered:
        tf.write_views(Path(root), ".workflow/WFS-demo", files, {}, progress)
    if mode == "once":
        break
"""


def writer(
    tmp_path: Path, mode: str, pause_at: int, *sources: TaskFilesSource
) -> subprocess.Popen[str]:
    paths = []
    for n, src in enumerate(sources):
        path = tmp_path / f"source-{n}.json"
        path.write_text(src.model_dump_json())
        paths.append(str(path))
    argv = [sys.executable, "-c", _WRITER, sources[0].target, mode, str(pause_at), *paths]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def each_file_is_one_of(target: Path, *versions: dict[str, str]) -> None:
    for rel, text in on_disk(target).items():
        assert any(text == v.get(rel) for v in versions), f"{rel} is neither version (torn?)"
        if rel.endswith(".json"):
            json.loads(text)


async def test_a_projection_killed_between_files_is_finished_by_the_next(tmp_path: Path) -> None:
    target = tmp_path / "project"
    target.mkdir()
    v1 = source(board_of(20, 2), target)
    first, _ = await project(v1)
    v2 = source(advance(v1.board, "IMPL-1.1", 5), target)
    proc = writer(tmp_path, "once", 7, v2)
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    assert proc.stdout.readline() == "paused\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    each_file_is_one_of(target, render_files(v1), render_files(v2))
    assert on_disk(target) != render_files(v1)  # some files are new already
    v3 = source(advance(v2.board, "IMPL-1.2", 6), target)  # and the board moved on
    second, _ = await project(v3, first.hashes)
    assert second.edits == [] and on_disk(target) == render_files(v3) and not temp_files(target)


async def test_a_worker_killed_at_any_moment_leaves_no_torn_file(tmp_path: Path) -> None:
    target = tmp_path / "project"
    target.mkdir()
    big = board_of(60, 3)
    for n in range(1, 61):
        big.tasks[f"IMPL-{n}"].spec.description = "x" * 3000  # larger files: longer writes
    v1 = source(big, target)
    v2 = source(advance(big, "IMPL-1.1", 5), target)
    versions = (render_files(v1), render_files(v2))
    differ = {rel for rel in versions[1] if versions[0].get(rel) != versions[1][rel]}
    rng, interrupted = random.Random(17), 0
    for _ in range(6):
        proc = writer(tmp_path, "loop", 0, v1, v2)
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        await asyncio.sleep(rng.uniform(0.01, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        each_file_is_one_of(target, *versions)
        files = on_disk(target)
        mixed = {files.get(rel) == versions[1][rel] for rel in differ}
        interrupted += len(mixed) > 1 or bool(temp_files(target))
    print(f"\n{interrupted} of 6 kills landed inside a projection")
    assert interrupted  # the kills did cut projections short
    result, _ = await project(v2)
    assert on_disk(target) == versions[1] and not temp_files(target) and result.edits == []


# --------------------------------------------------------------------------- size


async def test_five_hundred_tasks(tmp_path: Path) -> None:
    src = source(board_of(100, 4), tmp_path)
    assert len(src.board.tasks) == 500
    started = time.perf_counter()
    result, beats = await project(src)
    first = time.perf_counter() - started
    started = time.perf_counter()
    again, _ = await project(src, result.hashes)
    unchanged = time.perf_counter() - started
    moved = source(advance(src.board, "IMPL-1.1", 5), tmp_path)
    started = time.perf_counter()
    third, _ = await project(moved, again.hashes)
    one_change = time.perf_counter() - started
    print(
        f"\n500 tasks, {len(result.hashes)} files, {sum(map(len, render_files(src).values()))} "
        f"bytes: first projection {first:.2f} s, unchanged {unchanged:.2f} s, one task "
        f"completed {one_change:.2f} s ({third.written} files written)"
    )
    assert result.written == len(result.hashes) == 503 and again.written == 0
    assert len(beats) >= len(result.hashes) // 50 and beats[-1] == (len(result.hashes),)


# --------------------------------------------------------------------------- through Temporal


class FakeStart(BaseModel):
    source: TaskFilesSource
    request: ProjectRequest


@workflow.defn(sandboxed=False)
class FakeSession:
    """Answers ``task_files`` as ``GatedSession`` does, and runs one projection."""

    def __init__(self) -> None:
        self.source: TaskFilesSource | None = None

    @workflow.run
    async def run(self, start: FakeStart) -> ProjectResult:
        self.source = start.source
        return await workflow.execute_activity_method(
            TaskFileActivities.project,
            start.request,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )

    @workflow.query(name="task_files")
    def task_files(self) -> TaskFilesSource:
        assert self.source is not None
        return self.source


async def test_the_activity_reads_the_session_with_its_task_files_query(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    session_id, queue = f"sess-{uuid.uuid4().hex[:8]}", f"tq-{uuid.uuid4().hex[:8]}"
    src = source(advance(board_of(3, 1), "IMPL-1.1", 5), tmp_path)
    src = src.model_copy(update={"session_id": session_id})
    req = ProjectRequest(session_id=session_id, target=str(tmp_path), folder=FOLDER, version=1)
    acts = TaskFileActivities(target_roots=[str(tmp_path)])
    async with Worker(
        env.client, task_queue=queue, workflows=[FakeSession], activities=acts.activities
    ):
        result = await env.client.execute_workflow(
            FakeSession.run, FakeStart(source=src, request=req), id=session_id, task_queue=queue
        )
    assert result.version == src.board.version and on_disk(tmp_path) == render_files(src)
    missing = req.model_copy(update={"session_id": f"gone-{uuid.uuid4().hex[:8]}"})
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment(client=env.client).run(acts.project, missing)
    assert err.value.type == "session_not_found" and err.value.non_retryable
