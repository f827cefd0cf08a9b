"""500 tasks in one session, within Temporal's limits: every task claimed and completed
with the most evidence a completion takes (8 KB), across continue-as-new; the board,
the gate and the task files hold, and the carried state stays under the blob limit."""

from __future__ import annotations

import asyncio
import json
import time

from test_task_state import _board, _until, _update

from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.tasks.messages import CompleteTask, StartTask

TASKS = 500


async def test_five_hundred_tasks_fit_one_session(session_env, tmp_path):
    pg, _ = session_env
    lines = ["# Tasks: scale", "", "## Phase 1: All of it", ""]
    lines += [f"- [ ] T{n:03d} Task {n}" for n in range(1, TASKS + 1)]
    lines += ["", "## Phase 2: After", "", "- [ ] T999 Last"]
    (tmp_path / "tasks.md").write_text("\n".join(lines) + "\n")
    session_id = await pg.start(
        "tasks_v1",
        str(tmp_path),
        options=SessionOptions(
            spec_path=str(tmp_path / "tasks.md"),
            task_files=True,
            continue_as_new_after_events=400,
        ),
    )
    handle = pg.handle(session_id)
    await _until(lambda: (tmp_path / ".workflow").is_dir(), "the first projection", 60)
    evidence = {"notes": "n" * 8000}
    began = time.perf_counter()

    async def work(n: int) -> None:
        task = f"T{n:03d}"
        await _update(handle, "start_task", StartTask(agent=f"a{n % 8}", task=task))
        await _update(
            handle,
            "complete_task",
            CompleteTask(agent=f"a{n % 8}", task=task, summary=f"did {n}", evidence=evidence),
        )

    for first in range(1, TASKS + 1, 8):  # eight agents at a time
        await asyncio.gather(*(work(n) for n in range(first, min(first + 8, TASKS + 1))))
    elapsed = time.perf_counter() - began
    print(f"{TASKS} claims + completions in {elapsed:.1f} s")

    board = await _board(handle, limit=1000)
    assert board.total == TASKS and board.counts == {"completed": TASKS}
    assert board.next_task is None
    passed = await pg.submit(session_id, 0, {"summary": "all five hundred"})
    assert passed.passed, passed.problems
    # What the projection reads stays under the server's blob limit.
    source = await handle.query("task_files")
    assert len(json.dumps(source)) < 1_200_000
    state = await pg.status(session_id)
    assert len(state.run_chain) >= 2, "the session continued as new along the way"
    todo = tmp_path / ".workflow" / "WFS-tasks-gate-the-phase" / "TODO_LIST.md"
    await _until(lambda: todo.read_text().count("- [x] **T") == TASKS, "every task checked", 60)
