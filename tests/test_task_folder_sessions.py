"""Sessions of imported task folders on a real dev server: phase 0 lists the plan and
its commands, each task phase's tasks are on the board, pre-analysis runs as approved
(and fails as its on_error says), the folder's files follow the board."""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import pytest
from test_task_folders import SHALLOT, SYNAPSE, _greeting, _write

from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import PhaseView, SessionOptions
from phasegate.domain.tasks.messages import (
    BoardQuery,
    BoardView,
    CompleteTask,
    StartTask,
    TaskResult,
)


async def _board(pg: Any, session_id: str) -> BoardView:
    # GatedSession's `tasks` query (domain.tasks.board): the current phase's tasks.
    view: BoardView = await pg.handle(session_id).query(
        "tasks", BoardQuery(), result_type=BoardView
    )
    return view


async def _update(pg: Any, session_id: str, name: str, msg: Any) -> TaskResult:
    result: TaskResult = await pg.handle(session_id).execute_update(
        name, msg, result_type=TaskResult
    )
    return result


async def test_a_session_runs_a_written_folder(session_env, tmp_path):
    pg, _ = session_env
    _greeting(tmp_path)
    (tmp_path / "README.md").write_text("greeting service\n")
    sid = await pg.start(
        "workflow_tasks_v1",
        str(tmp_path),
        options=SessionOptions(spec_path=".workflow/WFS-greeting"),
    )
    assert (await pg.status(sid)).total_phases == 3  # phase 0 and one per top-level task

    # Phase 0 lists the phases and tasks as read, and the commands the session runs.
    view0 = await pg.phase(sid)
    assert isinstance(view0, PhaseView) and view0.phase == 0 and view0.name == "Review the plan"
    content = view0.content
    assert "**Session:** Greeting service" in content and "**Tasks:** 4 in 2 phases" in content
    assert "### Phase 1: Set up the project (`IMPL-2`)" in content
    assert "### Phase 2: Build the greeting (`IMPL-1`)" in content
    assert "| `IMPL-1.1` | Write the greeting file (subtask of `IMPL-1`) | to do | IMPL-2 |" in (
        content
    )
    assert "| `ls` | " in content  # IMPL-1.1's pre-analysis command, approved with phase 0
    assert [t.name for t in view0.tasks] == ["Read the Tasks", "Check the Commands"]
    example = view0.example_evidence
    assert isinstance(example, dict) and example["tasks_found"] == 4
    result0 = await pg.submit(sid, 0, example)
    assert not result0.problems and result0.awaiting_approval, result0.problems
    await pg.decide(sid, approver="lead", decision="approve", phase=0, comment="plan ok")

    # Phase 1 is IMPL-2's; its task is on the board, and the gate waits for it.
    view1 = await pg.phase(sid)
    assert isinstance(view1, PhaseView) and view1.phase == 1 and view1.name == "Set up the project"
    assert [t.id for t in view1.tasks] == ["IMPL-2"]
    assert "phasegate task next SESSION --as NAME" in view1.content
    board = await _board(pg, sid)
    assert [(t.id, t.status) for t in board.lines] == [("IMPL-2", "pending")]
    assert board.next_task == "IMPL-2"
    refused = await pg.submit(sid, 1, {"summary": "set up the project and its README"})
    assert not refused.passed
    assert any(p.rule == "tasks_complete" for p in refused.problems), refused.problems
    await _update(pg, sid, "start_task", StartTask(agent="ann"))
    done = await _update(
        pg, sid, "complete_task", CompleteTask(agent="ann", task="IMPL-2", summary="README there")
    )
    assert done.ok, done
    passed = await pg.submit(sid, 1, {"summary": "set up the project and its README"})
    assert passed.passed, passed.problems

    # Phase 2: the container and its subtasks, in dependency order; IMPL-1.2 waits.
    board = await _board(pg, sid)
    assert [(t.id, t.parent, t.waiting_for) for t in board.lines] == [
        ("IMPL-1", None, []),
        ("IMPL-1.1", "IMPL-1", []),
        ("IMPL-1.2", "IMPL-1", ["IMPL-1.1"]),
    ]
    assert board.next_task == "IMPL-1.1"

    # Its claim runs the pre-analysis: `ls` (approved in phase 0) on the verify worker,
    # its output in the task's context; `Read(README.md)` is an instruction for the agent.
    started = await _update(pg, sid, "start_task", StartTask(agent="bob"))
    assert started.task.id == "IMPL-1.1" and started.ok
    look, read = started.context
    assert look.step == "look" and look.ok and "README.md" in look.output
    assert read.step == "read_readme" and "Read the README" in read.output
    failed = await _update(
        pg, sid, "complete_task", CompleteTask(agent="bob", task="IMPL-1.1", summary="wrote")
    )
    assert not failed.ok and failed.criteria[0].passed is False
    (tmp_path / "greeting.txt").write_text("hello\n")
    done = await _update(
        pg, sid, "complete_task", CompleteTask(agent="bob", task="IMPL-1.1", summary="wrote")
    )
    assert done.ok and done.next_task == "IMPL-1.2"

    # The imported folder is now a view of the session: its task files follow the board.
    task_file = tmp_path / ".workflow" / "WFS-greeting" / ".task" / "IMPL-1.1.json"
    for _ in range(200):
        if json.loads(task_file.read_text()).get("status") == "completed":
            break
        await asyncio.sleep(0.05)
    written = json.loads(task_file.read_text())
    assert written["status"] == "completed"
    assert written["flow_control"]["target_files"] == ["greeting.txt"]  # the file's own fields


async def test_a_session_of_a_real_completed_folder(session_env, tmp_path):
    """SYNAPSE's five tasks are all "status": "completed": each phase passes on its
    summary alone, the board having nothing left to do."""
    pg, _ = session_env
    shutil.copytree(SYNAPSE, tmp_path / ".workflow" / "archives")
    where = ".workflow/archives/WFS-synapse-p3-event-driven"
    sid = await pg.start(
        "workflow_tasks_v1", str(tmp_path), options=SessionOptions(spec_path=where)
    )
    view0 = await pg.phase(sid)
    assert isinstance(view0, PhaseView)
    assert "**Session:** SYNAPSE P3 Event-Driven Research Contracts" in view0.content
    assert "| `IMPL-005` | F-009 Cross-Event Correlation tests | completed | IMPL-004 |" in (
        view0.content
    )
    assert "This session runs no command." in view0.content  # Read(...) steps only
    result0 = await pg.submit(sid, 0, view0.example_evidence)  # type: ignore[arg-type]
    assert result0.awaiting_approval, result0.problems
    await pg.decide(sid, approver="lead", decision="approve", phase=0, comment="ok")
    for phase in range(1, 6):
        board = await _board(pg, sid)
        assert [t.status for t in board.lines] == ["completed"]
        result = await pg.submit(sid, phase, {"summary": "done before this session began"})
        assert result.passed, result.problems
    assert (await pg.status(sid)).status == "completed"


async def test_a_session_of_a_refused_folder_does_not_start(session_env, tmp_path):
    pg, _ = session_env
    shutil.copytree(SHALLOT, tmp_path / ".workflow" / "active")
    where = ".workflow/active/WFS-web-refactor-bugfix"
    with pytest.raises(PhasegateError) as caught:
        await pg.start("workflow_tasks_v1", str(tmp_path), options=SessionOptions(spec_path=where))
    assert caught.value.code == "task_file_invalid"
    assert caught.value.where == (
        f"{tmp_path / where}/.task/IMPL-4.1.json: IMPL-4.1: dependencies.depends_on"
    )
    assert caught.value.message.startswith(
        "3 problems in the task folder: 1) .task/IMPL-4.1.json: IMPL-4.1: dependencies.depends_on:"
        " depends on IMPL-3.2, which no task file defines"
    )


STEPS = {
    "IMPL-1": {
        "title": "Flaky probe",
        "flow_control": {
            "pre_analysis": [
                {
                    "step": "probe",
                    "action": "Probe",
                    "command": "bash(false)",
                    "on_error": "retry_once",
                }
            ]
        },
    },
    "IMPL-2": {
        "title": "Needs a person",
        "flow_control": {
            "pre_analysis": [
                {
                    "step": "check_access",
                    "action": "Check access",
                    "command": "bash(false)",
                    "on_error": "manual_intervention",
                }
            ]
        },
    },
    "IMPL-3": {
        "title": "Optional probe",
        "flow_control": {
            "pre_analysis": [
                {
                    "step": "look",
                    "action": "Look",
                    "command": "bash(false)",
                    "on_error": "skip_optional",
                },
                {"step": "list", "action": "List", "command": "bash(ls)", "output_to": "files"},
            ]
        },
    },
}


async def test_pre_analysis_failures_do_what_on_error_says(session_env, tmp_path):
    """retry_once runs the step twice and the task does not start; manual_intervention
    blocks the task until a person's signed retry_phase; skip_optional goes on."""
    from phasegate.domain.session.messages import ControlRequest

    pg, _ = session_env
    _write(tmp_path / ".workflow" / "WFS-steps", STEPS, {"session_id": "WFS-steps"})
    (tmp_path / "README.md").write_text("steps\n")
    sid = await pg.start(
        "workflow_tasks_v1",
        str(tmp_path),
        options=SessionOptions(spec_path=".workflow/WFS-steps", task_layout="stages"),
    )
    view0 = await pg.phase(sid)
    assert isinstance(view0, PhaseView)
    assert "| `false` |" in view0.content  # the steps' commands, approved with phase 0
    assert (await pg.submit(sid, 0, view0.example_evidence)).awaiting_approval
    await pg.decide(sid, approver="lead", decision="approve", phase=0)
    assert (await pg.submit(sid, 1, {"summary": "the plan is the folder's own"})).passed

    flaky = await _update(pg, sid, "start_task", StartTask(agent="ann", task="IMPL-1"))
    assert not flaky.ok and flaky.task.status == "blocked" and "probe" in flaky.note
    history = [e async for e in pg.handle(sid).fetch_history_events()]
    probes = [
        e
        for e in history
        if e.HasField("activity_task_scheduled_event_attributes")
        and "pre-analysis probe" in e.user_metadata.summary.data.decode()
    ]
    assert len(probes) == 2  # retried once

    person = await _update(pg, sid, "start_task", StartTask(agent="ann", task="IMPL-2"))
    assert not person.ok and person.task.status == "blocked"
    with pytest.raises(Exception) as refused:
        await _update(pg, sid, "start_task", StartTask(agent="ann", task="IMPL-2"))
    assert "retry_phase" in str(refused.value.cause)  # type: ignore[attr-defined]
    await pg.control(
        sid, ControlRequest(action="retry_phase", reason="access granted", actor="lead")
    )
    board = await _board(pg, sid)
    assert next(t for t in board.lines if t.id == "IMPL-2").status == "pending"

    optional = await _update(pg, sid, "start_task", StartTask(agent="bob", task="IMPL-3"))
    assert optional.ok and [s.ok for s in optional.context] == [False, True]
    assert "README.md" in optional.context[1].output


async def test_a_session_in_stages_puts_every_task_on_one_phase(session_env, tmp_path):
    pg, _ = session_env
    _greeting(tmp_path)
    sid = await pg.start(
        "workflow_tasks_v1",
        str(tmp_path),
        options=SessionOptions(spec_path=".workflow/WFS-greeting", task_layout="stages"),
    )
    assert (await pg.status(sid)).total_phases == 4  # review, PLAN, IMPLEMENT, REVIEW
    view0 = await pg.phase(sid)
    assert isinstance(view0, PhaseView)
    assert (await pg.submit(sid, 0, view0.example_evidence)).awaiting_approval
    await pg.decide(sid, approver="lead", decision="approve", phase=0)
    assert (await pg.submit(sid, 1, {"summary": "the plan is the folder's"})).passed
    board = await _board(pg, sid)
    assert [t.id for t in board.lines] == ["IMPL-2", "IMPL-1", "IMPL-1.1", "IMPL-1.2"]
    assert board.next_task == "IMPL-2"


