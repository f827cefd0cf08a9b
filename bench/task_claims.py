"""Task state: a claim (``start_task``) and a completion (``complete_task``) vs a raw
Temporal update, and the projection of a 500-task board to ``.workflow/`` files.

One session of ``tasks_v1`` (tests/fixtures/library: a dynamic workflow whose phase gate
waits for its tasks, as the shipped ``workflow_tasks_v1``'s task phases do) holds
``--tasks`` tasks in one phase, half with a file acceptance criterion (``notes.txt``
contains ``ok``: a reading check, run on the session worker) and half with prose (a
claim, no check). Before each call the same client times one raw update on a trivial
workflow (interleaved, same server, same worker process, same run). Target: claim and
completion p50 <= 1.3x the raw update's p50 (a checked completion against a raw update
awaiting one trivial local activity, the floor of any design that reads the workspace).

    .venv/bin/python bench/task_claims.py [--tasks 60] [--board 500]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import _common
from _common import bench_environment, ms, pct, start_bench_worker, stop_bench_worker
from baseline import RawUpdateWorkflow
from temporalio.client import Client, WorkflowHandle

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.tasks.board import TaskBoard
from phasegate.domain.tasks.files import TaskFilesSource
from phasegate.domain.tasks.messages import BoardQuery, BoardView, CompleteTask, StartTask, TaskResult
from phasegate.domain.tasks.model import TaskSpec
from phasegate.domain.tasks.projection import render_files

LIBRARY = _common.REPO / "tests" / "fixtures" / "library"


def spec(tasks: int) -> str:
    lines = ["# Tasks: bench", "", "## Phase 1: Work", ""]
    for n in range(1, tasks + 1):
        lines.append(f"- [ ] T{n:03d} Task number {n}")
        if n % 2:
            lines.append("  - Acceptance: `notes.txt` contains `ok`")
        else:
            lines.append("  - Acceptance: the work reads well")
    return "\n".join(lines) + "\n"


async def timed(call) -> float:
    began = time.perf_counter()
    await call
    return time.perf_counter() - began


async def measure(client: Client, tasks: int, tmp: Path) -> dict[str, list[float]]:
    pg = PhasegateClient(client, "bench")
    raw = await client.start_workflow(
        RawUpdateWorkflow.run, id=f"raw-{uuid.uuid4()}", task_queue="bench-raw"
    )
    work = tmp / "work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("ok\n")
    (work / "tasks.md").write_text(spec(tasks))
    session = await pg.start(
        "tasks_v1", str(work), options=SessionOptions(spec_path=str(work / "tasks.md"))
    )
    handle: WorkflowHandle = pg.handle(session)
    for _ in range(200):
        try:
            await handle.query("tasks", BoardQuery(), result_type=BoardView)
            break
        except Exception:  # noqa: BLE001 - loading
            await asyncio.sleep(0.05)
    figures: dict[str, list[float]] = {
        k: [] for k in ("raw", "raw_local", "claim", "complete_claim", "complete_checked")
    }
    for n in range(1, tasks + 1):
        task = f"T{n:03d}"
        figures["raw"].append(await timed(raw.execute_update(RawUpdateWorkflow.bump, {})))
        figures["claim"].append(
            await timed(
                handle.execute_update(
                    "start_task", StartTask(agent="bench", task=task), result_type=TaskResult
                )
            )
        )
        figures["raw_local"].append(
            await timed(raw.execute_update(RawUpdateWorkflow.bump_local, {}))
        )
        done = CompleteTask(agent="bench", task=task, summary="done")
        key = "complete_checked" if n % 2 else "complete_claim"
        figures[key].append(
            await timed(handle.execute_update("complete_task", done, result_type=TaskResult))
        )
    await raw.signal(RawUpdateWorkflow.finish)
    return figures


def board_source(size: int) -> TaskFilesSource:
    now = datetime.now(timezone.utc)
    board = TaskBoard()
    specs = []
    for n in range(1, size // 5 + 1):
        specs.append(TaskSpec(id=f"IMPL-{n}", title=f"Feature {n}", acceptance=["works"]))
        specs += [
            TaskSpec(id=f"IMPL-{n}.{k}", title=f"Part {k} of {n}", parent=f"IMPL-{n}")
            for k in range(1, 5)
        ]
    board.enter_phase(1, specs[:size], now)
    return TaskFilesSource(
        session_id="bench",
        workflow_type="workflow_tasks_v1",
        name="bench",
        folder=".workflow/WFS-bench",
        status="active",
        current_phase=1,
        total_phases=2,
        board=board,
    )


def projection(size: int, tmp: Path) -> tuple[float, float, int]:
    """Seconds to render ``size`` tasks' files, seconds to write them, bytes."""
    src = board_source(size)
    began = time.perf_counter()
    files = render_files(src)
    rendered = time.perf_counter() - began
    folder = tmp / "proj"
    began = time.perf_counter()
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".tmp")
        part.write_text(text, encoding="utf-8")
        part.replace(path)
    written = time.perf_counter() - began
    return rendered, written, sum(len(t.encode()) for t in files.values())


def report(figures: dict[str, list[float]]) -> None:
    raw, local = pct(figures["raw"], 50), pct(figures["raw_local"], 50)
    print(f"raw update p50 {ms(raw)}; raw update + local activity p50 {ms(local)}")
    rows = (
        ("claim (start_task)", "claim", raw, "raw"),
        ("completion, a claim only", "complete_claim", raw, "raw"),
        ("completion, file check", "complete_checked", raw, "raw"),
        ("completion, file check", "complete_checked", local, "raw+local"),
    )
    for label, key, base, name in rows:
        p50, p95 = pct(figures[key], 50), pct(figures[key], 95)
        print(f"{label:28} p50 {ms(p50)} p95 {ms(p95)}  {p50 / base:.2f}x {name} (target <= 1.3x)")


async def main(tasks: int, board: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-bench-tasks-"))
    try:
        rendered, written, size = projection(board, tmp)
        print(
            f"projection of {board} tasks: render {ms(rendered)}, write {ms(written)} "
            f"({size // 1024} KiB in {board + 3}+ files)",
            flush=True,
        )
        async with await bench_environment() as env:
            worker = start_bench_worker(
                env.client.service_client.config.target_host,
                "bench",
                str(LIBRARY),
                str(tmp / "home"),
                {"allow_unsigned_approvals": True},
            )
            try:
                await measure(env.client, 6, tmp / "warm")  # warm-up, not counted
                report(await measure(env.client, tasks, tmp))
            finally:
                stop_bench_worker(worker)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--board", type=int, default=500)
    args = parser.parse_args()
    _common.run(main(args.tasks, args.board))
