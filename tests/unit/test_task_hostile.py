"""What a hostile agent tried against the task board (a review's findings), refused.

Each test is one attack; before the fix each one got through."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from phasegate.domain.commands import SessionCommand, SessionCommands
from phasegate.domain.session.messages import CheckpointSubmission
from phasegate.domain.spec import ParsedSpec, SpecPhase, SpecTask
from phasegate.domain.tasks import steps
from phasegate.domain.tasks.board import MAX_ADDED_BYTES, TaskBoard
from phasegate.domain.tasks.from_spec import dependency_cycle
from phasegate.domain.tasks.messages import AddSubtask, BlockTask, CompleteTask, StartTask
from phasegate.domain.tasks.model import MAX_TASKS, TaskSpec

NOW = datetime(2026, 11, 26, tzinfo=UTC)


def _board(*specs: TaskSpec) -> TaskBoard:
    b = TaskBoard()
    b.enter_phase(1, specs, NOW)
    return b


def _start(b: TaskBoard, agent: str, task: str) -> None:
    msg = StartTask(agent=agent, task=task)
    assert b.check_start(msg, 1) is None
    b.apply_start(msg, 1, NOW, [])


def test_a_renamed_id_is_a_task_id_and_survives_a_carry():
    b = TaskBoard()
    b.enter_phase(0, [TaskSpec(id="1", title="a")], NOW)
    b.enter_phase(1, [TaskSpec(id="1", title="b")], NOW)
    assert "P1-1" in b.tasks and StartTask(agent="a", task="P1-1").task == "P1-1"
    again = TaskBoard.model_validate(b.model_dump(mode="json"))
    assert again.tasks["P1-1"].spec.title == "b"
    long = "T" * 64
    b.enter_phase(2, [TaskSpec(id=long, title="x")], NOW)
    b.enter_phase(3, [TaskSpec(id=long, title="y")], NOW)
    renamed = [k for k in b.tasks if k.startswith("P3-")]
    assert len(renamed) == 1 and len(renamed[0]) <= 64
    TaskBoard.model_validate(b.model_dump(mode="json"))


def test_splitting_a_task_never_skips_its_own_checks():
    """The container's checkable criteria run once its last subtask is done."""
    b = _board(TaskSpec(id="T1", title="t", acceptance=["`done.txt` contains `ok`"]))
    _start(b, "a", "T1")
    added = b.apply_add_subtask(AddSubtask(agent="a", parent="T1", title="noop"), 1, NOW)
    _start(b, "a", added.task.id)
    done = CompleteTask(agent="a", task=added.task.id, summary="did nothing")
    b.apply_complete(done, 1, NOW, [], [])
    assert b.status("T1") == "container" and b.container_due("T1")
    assert b.gate_problems(1)  # the phase still waits for T1's own check
    whole = CompleteTask(agent="b", task="T1", summary="all subtasks")
    assert b.check_complete(whole, 1) is None
    checks, _ = b.completion_checks(whole, None)
    assert [c.kind for c in checks] == ["file_contains"]


def test_a_person_block_cannot_be_lifted_or_split_away_by_an_agent():
    b = _board(TaskSpec(id="T1", title="t"))
    _start(b, "a", "T1")
    b.apply_block(BlockTask(agent="a", task="T1", reason="step failed"), 1, NOW, needs_person=True)
    refusal = b.check_block(BlockTask(agent="a", task="T1", reason="x"), 1)
    assert refusal is not None and "person" in refusal.message
    refusal = b.check_add_subtask(AddSubtask(agent="a", parent="T1", title="x"), 1, None)
    assert refusal is not None and "blocked" in refusal.message


def test_only_the_claim_holder_blocks_a_started_task():
    b = _board(TaskSpec(id="T1", title="t"))
    _start(b, "alice", "T1")
    refusal = b.check_block(BlockTask(agent="mallory", task="T1", reason="mine now"), 1)
    assert refusal is not None and "claimed by alice" in refusal.message


def test_a_subtask_cannot_wait_for_what_waits_for_its_parent():
    b = _board(TaskSpec(id="A", title="a"), TaskSpec(id="B", title="b", depends_on=["A"]))
    refusal = b.check_add_subtask(
        AddSubtask(agent="x", parent="A", title="s", depends_on=["B"]), 1, None
    )
    assert refusal is not None and "a cycle" in refusal.message


def test_agents_cannot_grow_the_board_past_what_a_carry_holds():
    b = _board(*[TaskSpec(id=f"T{n}", title="t") for n in range(40)])
    big = {"title": "x" * 300, "description": "d" * 1000, "acceptance": ["a" * 300] * 8}
    refused = None
    for n in range(40):
        for _ in range(20):
            msg = AddSubtask(agent="a", parent=f"T{n}", **big)
            refused = b.check_add_subtask(msg, 1, None)
            if refused is not None:
                break
            b.apply_add_subtask(msg, 1, NOW)
        if refused is not None:
            break
    assert refused is not None and "the most a session carries" in refused.message
    added = sum(len(t.spec.model_dump_json()) for t in b.tasks.values())
    assert added < MAX_ADDED_BYTES * 1.5
    with pytest.raises(ValidationError):  # bounded before the session sees it
        AddSubtask(agent="a", parent="T1", title="x", acceptance=["a"] * 9)


def test_a_phase_past_the_task_limit_is_refused_by_its_gate_not_emptied():
    b = _board(*[TaskSpec(id=f"T{n}", title="t") for n in range(MAX_TASKS)])
    b.enter_phase(2, [TaskSpec(id="X", title="x")], NOW)
    [problem] = b.gate_problems(2)
    assert "more tasks than a session tracks" in problem.message


@pytest.mark.parametrize("model", ["task", "checkpoint"])
def test_deeply_nested_evidence_is_refused_with_a_clear_message(model):
    deep: dict = {}
    node = deep
    for _ in range(40):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(ValidationError, match="nested more than 32 levels"):
        if model == "task":
            CompleteTask(agent="a", task="T1", summary="s", evidence=deep)
        else:
            CheckpointSubmission(phase=0, evidence=deep)


def test_filled_in_values_never_become_options():
    with pytest.raises(steps.StepRefused, match="read as an option"):
        steps.fill(["git", "log", "-1", "[files]"], {"files": ["--output=/tmp/pwned"]})
    assert steps.fill(["git", "log", "--", "[files]"], {"files": ["-odd-name"]}) == [
        "git",
        "log",
        "--",
        "-odd-name",
    ]


def test_a_pre_analysis_in_flight_holds_completion_and_second_starts():
    b = _board(TaskSpec(id="T1", title="t"))
    _start(b, "a", "T1")
    b.tasks["T1"].preparing = True
    assert b.check_complete(CompleteTask(agent="a", task="T1", summary="s"), 1) is not None
    assert b.check_start(StartTask(agent="a", task="T1"), 1) is not None


def test_tasks_md_dependency_cycles_are_found():
    def task(tid: str, *deps: str, line: int) -> SpecTask:
        return SpecTask(id=tid, name=tid, dependencies=list(deps), line=line)

    spec = ParsedSpec(
        source="tasks.md",
        phases=[
            SpecPhase(
                number=1,
                name="a",
                line=1,
                tasks=[task("T1", "T2", line=2), task("T2", "T1", line=3)],
            )
        ],
    )
    cycle = dependency_cycle(spec)
    assert cycle is not None and {t.id for t in cycle} == {"T1", "T2"}
    forward = ParsedSpec(
        source="tasks.md",
        phases=[
            SpecPhase(number=1, name="a", line=1, tasks=[task("T1", "T9", line=2)]),
            SpecPhase(number=2, name="b", line=4, tasks=[task("T9", "T1", line=5)]),
        ],
    )
    assert dependency_cycle(forward) is None  # T1's dependency on a later phase is dropped


def test_only_commands_listed_at_start_run_as_acceptance():
    commands = SessionCommands(
        checkpoints=[
            SessionCommand(
                name="t", argv=["pytest", "-q"], source="x", task="T1", role="acceptance"
            )
        ]
    )
    b = _board(TaskSpec(id="T1", title="t", acceptance=["`pytest -q` exits 0"]))
    _start(b, "a", "T1")
    checks, _ = b.completion_checks(CompleteTask(agent="a", task="T1", summary="s"), commands)
    assert [c.kind for c in checks] == ["command"]
    refusal = b.check_add_subtask(
        AddSubtask(agent="a", parent="T1", title="x", acceptance=["`pytest -q --pdb` exits 0"]),
        1,
        commands,
    )
    assert refusal is not None and "not one of the commands" in refusal.message
