"""Task state in a gated session, on a real dev server: claims (exactly one of two
agents wins; 20 agents claim every task once), dependency order, acceptance checks
against the workspace, containers derived from dynamic subtasks, a phase gated on its
tasks, and the refusals a hostile agent gets."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from phasegate.client._base import transient
from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import CheckpointSubmission, SessionOptions
from phasegate.domain.tasks.messages import (
    AddSubtask,
    BlockTask,
    BoardQuery,
    BoardView,
    CompleteTask,
    StartTask,
    TaskResult,
)

FIXTURES = Path(__file__).parent / "fixtures"

SPEC = """# Tasks: greeting

## Phase 1: Build

- [ ] T001 Write the greeting file
  - Acceptance: `greeting.txt` contains `hello`
- [ ] T002 Document it (depends on T001)
- [ ] T003 Tidy up

## Phase 2: Ship

- [ ] T004 Tag the release
"""


async def _session(
    pg: PhasegateClient, tmp_path: Path, spec: str = SPEC, **options: Any
) -> WorkflowHandle[Any, Any]:
    (tmp_path / "tasks.md").write_text(spec)
    session_id = await pg.start(
        "tasks_v1",
        str(tmp_path),
        options=SessionOptions(spec_path=str(tmp_path / "tasks.md"), **options),
    )
    handle = pg.handle(session_id)
    for _ in range(100):
        try:
            await handle.query("tasks", BoardQuery(), result_type=BoardView)
            return handle
        except Exception:  # noqa: BLE001 - still loading its definition
            await asyncio.sleep(0.05)
    raise AssertionError("the session never loaded")


async def _update(handle: WorkflowHandle[Any, Any], name: str, msg: Any) -> TaskResult:
    """The update, retried (same id) while a continued run loads its carried state or a
    workflow task is superseded, as phasegate's clients do (``client._base``)."""
    update_id = str(uuid.uuid4())
    for _ in range(50):
        try:
            result: TaskResult = await handle.execute_update(
                name, msg, id=update_id, result_type=TaskResult
            )
            return result
        except WorkflowUpdateFailedError as exc:
            if "still loading" not in str(exc.cause):
                raise
            await asyncio.sleep(0.1)
        except RPCError as exc:  # a workflow task superseded by continue-as-new
            if not transient(exc):
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("the session kept loading")


async def _refused(handle: WorkflowHandle[Any, Any], name: str, msg: Any) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(name, msg, result_type=TaskResult)
    return str(caught.value.cause)


async def _board(handle: WorkflowHandle[Any, Any], **query: Any) -> BoardView:
    view: BoardView = await handle.query("tasks", BoardQuery(**query), result_type=BoardView)
    return view


async def test_dependencies_acceptance_and_the_phase_gate(session_env, tmp_path):
    pg, _ = session_env
    handle = await _session(pg, tmp_path)
    board = await _board(handle)
    assert [(t.id, t.status, t.waiting_for) for t in board.lines] == [
        ("T001", "pending", []),
        ("T002", "pending", ["T001"]),
        ("T003", "pending", []),
    ]
    assert board.next_task == "T001"
    assert board.lines[0].title == "Write the greeting file"

    # T002 waits for T001; the phase cannot be handed in with open tasks.
    assert "depends on T001" in await _refused(
        handle, "start_task", StartTask(agent="ann", task="T002")
    )
    result = await pg.submit(handle.id, 0, {"summary": "done?"})
    assert not result.passed
    assert any(
        p.rule == "tasks_complete" and "T001 (pending)" in p.message for p in result.problems
    )

    started = await _update(handle, "start_task", StartTask(agent="ann"))  # the next ready
    assert started.task.id == "T001" and started.task.claimed_by == "ann"
    assert "claimed by ann" in await _refused(
        handle, "start_task", StartTask(agent="bob", task="T001")
    )
    assert "claimed by ann, not bob" in await _refused(
        handle, "complete_task", CompleteTask(agent="bob", task="T001", summary="mine")
    )

    # The acceptance criterion is checked against the workspace: not there yet.
    failed = await _update(
        handle, "complete_task", CompleteTask(agent="ann", task="T001", summary="wrote it")
    )
    assert not failed.ok and failed.task.status == "active"
    assert failed.criteria[0].check and failed.criteria[0].passed is False
    (tmp_path / "greeting.txt").write_text("hello world\n")
    done = await _update(
        handle, "complete_task", CompleteTask(agent="ann", task="T001", summary="wrote it")
    )
    assert done.ok and done.task.status == "completed" and done.criteria[0].passed is True
    assert done.next_task == "T002"

    for task in ("T002", "T003"):
        await _update(handle, "start_task", StartTask(agent="ann", task=task))
        last = await _update(
            handle, "complete_task", CompleteTask(agent="ann", task=task, summary="ok")
        )
    assert last.phase_ready
    passed = await pg.submit(handle.id, 0, {"summary": "built"})
    assert passed.passed and passed.current_phase == 1
    board = await _board(handle)
    assert [t.id for t in board.lines] == ["T004"]
    assert "earlier phase" in await _refused(
        handle, "start_task", StartTask(agent="ann", task="T002")
    )


async def test_subtasks_make_a_container_and_twenty_agents_claim_each_task_once(
    session_env, tmp_path
):
    pg, _ = session_env
    handle = await _session(pg, tmp_path, complexity="medium")
    assert (await _board(handle)).complexity == "medium"  # 3 tasks, raised by the starter
    await _update(handle, "start_task", StartTask(agent="ann", task="T003"))
    ids = []
    for n in range(24):
        added = await _update(
            handle, "add_subtask", AddSubtask(agent="ann", parent="T003", title=f"piece {n}")
        )
        ids.append(added.task.id)
    assert ids[:2] == ["T003.1", "T003.2"]
    board = await _board(handle)
    container = next(t for t in board.lines if t.id == "T003")
    assert container.status == "container" and container.progress == "0/24"
    assert container.claimed_by == ""  # a container never runs
    assert "itself a subtask" in await _refused(
        handle, "add_subtask", AddSubtask(agent="ann", parent="T003.1", title="too deep")
    )
    assert "not one of the commands" in await _refused(
        handle,
        "add_subtask",
        AddSubtask(agent="ann", parent="T003", title="x", acceptance=["`rm -rf .` exits 0"]),
    )

    async def claim(agent: str) -> str | None:
        try:
            return (await _update(handle, "start_task", StartTask(agent=agent))).task.id
        except WorkflowUpdateFailedError:
            return None

    won = await asyncio.gather(*(claim(f"agent-{n}") for n in range(20)))
    claimed = [w for w in won if w is not None]
    assert len(claimed) == len(set(claimed)) == 20  # T001 and 19 of T003's pieces
    board = await _board(handle, limit=100)
    assert board.complexity == "complex"  # 27 tasks now: raised, never lowered
    holders = {t.id: t.claimed_by for t in board.lines if t.status == "active"}
    assert sorted(holders) == sorted(claimed)
    assert len(set(holders.values())) == 20

    # Blocking releases the claim; the container completes only with every piece.
    holder = holders.get(ids[0], "x")
    assert (
        "only they block it"
        in await _refused(
            handle, "block_task", BlockTask(agent="mallory", task=ids[0], reason="mine now")
        )
        or holder == "x"
    )
    blocked = await _update(handle, "block_task", BlockTask(agent=holder, task=ids[0], reason="no"))
    assert blocked.task.status == "blocked" and blocked.task.claimed_by == ""
    assert "a container never runs" in await _refused(
        handle, "start_task", StartTask(agent="ann", task="T003")
    )
    assert "container" in await _refused(
        handle, "complete_task", CompleteTask(agent="ann", task="T003", summary="all")
    )


async def test_hostile_task_messages_are_refused_and_the_session_answers(session_env, tmp_path):
    pg, _ = session_env
    handle = await _session(pg, tmp_path)
    await _update(handle, "start_task", StartTask(agent="ann", task="T003"))
    big = {"blob": "x" * 9_000}
    assert "8192" in await _refused(
        handle, "complete_task", CompleteTask(agent="ann", task="T003", summary="s", evidence=big)
    )
    assert "no task T999" in await _refused(
        handle, "start_task", StartTask(agent="ann", task="T999")
    )
    with pytest.raises(Exception):  # an id no task may have: refused before the workflow
        await handle.execute_update(
            "start_task", {"agent": "ann", "task": "../../etc"}, result_type=TaskResult
        )
    with pytest.raises(Exception):
        await handle.execute_update("start_task", {"agent": "", "task": "T001"})
    assert "depends_on names T777" in await _refused(
        handle,
        "add_subtask",
        AddSubtask(agent="ann", parent="T003", title="x", depends_on=["T777"]),
    )
    board = await _board(handle)  # still answering, nothing changed by the refusals
    assert {t.id: t.status for t in board.lines} == {
        "T001": "pending",
        "T002": "pending",
        "T003": "active",
    }
    sub = CheckpointSubmission(phase=0, evidence={"summary": "x"})
    assert not (await pg.submit(handle.id, sub.phase, sub.evidence)).passed


async def _until(predicate: Any, what: str, seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_task_files_are_views_projected_from_the_session(session_env, tmp_path):
    """The .workflow/ files follow every change; a hand edit is reported and overwritten,
    a deleted file is rebuilt; nothing is ever read back from them."""
    pg, _ = session_env
    (tmp_path / "tasks.md").write_text(SPEC)
    session_id = await pg.start(
        "tasks_v1",
        str(tmp_path),
        options=SessionOptions(spec_path=str(tmp_path / "tasks.md"), task_files=True),
    )
    handle = pg.handle(session_id)
    folder = tmp_path / ".workflow" / "WFS-tasks-gate-the-phase"
    todo = folder / "TODO_LIST.md"
    await _until(todo.is_file, "the first projection")
    assert (folder / ".task" / "T001.json").is_file()
    assert "- [ ] **T001**" in todo.read_text()

    await _update(handle, "start_task", StartTask(agent="ann", task="T003"))
    await _update(handle, "complete_task", CompleteTask(agent="ann", task="T003", summary="tidy"))
    await _until(lambda: "- [x] **T003**" in todo.read_text(), "T003 checked in TODO_LIST.md")
    summary = folder / ".summaries" / "T003-summary.md"
    await _until(summary.is_file, "T003's summary")
    assert "tidy" in summary.read_text()

    # A hand edit that marks T001 done is not believed, and is written over.
    todo.write_text(todo.read_text().replace("- [ ] **T001**", "- [x] **T001**"))
    (folder / ".task" / "T002.json").unlink()
    await _update(handle, "start_task", StartTask(agent="ann", task="T001"))
    await _until(lambda: "- [ ] **T001**" in todo.read_text(), "the hand edit overwritten")
    await _until((folder / ".task" / "T002.json").is_file, "T002.json rebuilt")
    board = await _board(handle, task="T001")
    assert board.task is not None and board.task.status == "active"
    state = await pg.status(session_id)
    assert any(
        a.action == "task_files" and "TODO_LIST.md was edited by hand" in a.detail
        for a in state.audit
    )


async def test_a_split_task_still_answers_for_its_own_criteria(session_env, tmp_path):
    """T001's criterion is checked when its last subtask completes; splitting it does not
    skip it (a hostile review's finding)."""
    pg, _ = session_env
    handle = await _session(pg, tmp_path)
    await _update(handle, "start_task", StartTask(agent="ann", task="T001"))
    added = await _update(
        handle, "add_subtask", AddSubtask(agent="ann", parent="T001", title="the easy part")
    )
    await _update(handle, "start_task", StartTask(agent="ann", task=added.task.id))
    done = await _update(
        handle,
        "complete_task",
        CompleteTask(agent="ann", task=added.task.id, summary="did the easy part"),
    )
    assert done.ok and done.note == "T001: its criteria failed"
    board = await _board(handle)
    assert next(t for t in board.lines if t.id == "T001").status == "container"
    assert next(t for t in board.lines if t.id == "T002").waiting_for == ["T001"]
    (tmp_path / "greeting.txt").write_text("hello\n")
    whole = await _update(
        handle, "complete_task", CompleteTask(agent="bob", task="T001", summary="now it holds")
    )
    assert whole.ok and whole.task.status == "completed"
