"""The task board's rules, pure (no server): containers, dependency order (the parent's
too), next-task order, person blocks, criteria, pre-analysis words, naming."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from phasegate.domain.commands import SessionCommand, SessionCommands
from phasegate.domain.tasks import criteria, naming, steps
from phasegate.domain.tasks.board import TaskBoard
from phasegate.domain.tasks.messages import BlockTask, CompleteTask, StartTask
from phasegate.domain.tasks.model import PreAnalysisStep, TaskSpec

NOW = datetime(2026, 11, 26, tzinfo=timezone.utc)


def board(*specs: TaskSpec, phase: int = 1) -> TaskBoard:
    b = TaskBoard()
    b.enter_phase(phase, specs, NOW)
    return b


def start(b: TaskBoard, agent: str, task: str | None = None) -> str:
    msg = StartTask(agent=agent, task=task)
    assert b.check_start(msg, 1) is None
    return b.apply_start(msg, 1, NOW, []).task.id


def complete(b: TaskBoard, agent: str, task: str) -> None:
    msg = CompleteTask(agent=agent, task=task, summary="done")
    assert b.check_complete(msg, 1) is None
    b.apply_complete(msg, 1, NOW, [], [])


def test_a_subtask_waits_for_its_parents_dependencies():
    """marcus#64: subtasks were handed out before their parent's dependencies were met."""
    b = board(
        TaskSpec(id="IMPL-1", title="schema"),
        TaskSpec(id="IMPL-2", title="api", depends_on=["IMPL-1"]),
        TaskSpec(id="IMPL-2.1", title="routes", parent="IMPL-2"),
    )
    refusal = b.check_start(StartTask(agent="a", task="IMPL-2.1"), 1)
    assert refusal is not None and "depends on IMPL-1" in refusal.message
    assert b.next_task(1) == "IMPL-1"
    complete_id = start(b, "a")
    complete(b, "a", complete_id)
    assert b.next_task(1) == "IMPL-2.1"


def test_a_container_is_done_only_when_every_subtask_is():
    """peakflo/20x#463: parents marked done over unfinished children."""
    b = board(
        TaskSpec(id="IMPL-1", title="p"),
        TaskSpec(id="IMPL-1.1", title="a", parent="IMPL-1"),
        TaskSpec(id="IMPL-1.2", title="b", parent="IMPL-1"),
    )
    assert b.status("IMPL-1") == "container"
    refusal = b.check_complete(CompleteTask(agent="a", task="IMPL-1", summary="all"), 1)
    assert refusal is not None and "container" in refusal.message
    complete_id = start(b, "a", "IMPL-1.1")
    complete(b, "a", complete_id)
    assert b.status("IMPL-1") == "container"
    start(b, "a", "IMPL-1.2")
    complete(b, "a", "IMPL-1.2")
    assert b.status("IMPL-1") == "completed"
    assert b.gate_problems(1) == []


def test_next_task_prefers_subtasks_of_a_container_under_way():
    b = board(
        TaskSpec(id="IMPL-1", title="first"),
        TaskSpec(id="IMPL-2", title="p"),
        TaskSpec(id="IMPL-2.1", title="a", parent="IMPL-2"),
        TaskSpec(id="IMPL-2.2", title="b", parent="IMPL-2"),
    )
    assert b.next_task(1) == "IMPL-1"
    start(b, "a", "IMPL-2.1")
    assert b.next_task(1) == "IMPL-2.2"  # its sibling is under way


def test_earlier_phases_count_as_complete_and_later_ones_are_not_reachable():
    b = board(TaskSpec(id="T1", title="old"), phase=0)
    b.enter_phase(1, [TaskSpec(id="T2", title="new", depends_on=["T1"])], NOW)
    assert b.waiting_for("T2", 1) == []
    refusal = b.check_start(StartTask(agent="a", task="T1"), 1)
    assert refusal is not None and "earlier phase" in refusal.message


def test_a_phase_entered_again_keeps_its_tasks_and_clashing_ids_stay_apart():
    b = board(TaskSpec(id="T1", title="x"))
    start(b, "a", "T1")
    b.enter_phase(1, [TaskSpec(id="T1", title="x")], NOW)
    assert b.tasks["T1"].status == "active"
    b.enter_phase(2, [TaskSpec(id="T1", title="other")], NOW)
    assert b.tasks["P2-T1"].spec.title == "other"  # a valid task id: it survives a carry


def test_person_blocks_wait_for_a_signed_retry():
    b = board(TaskSpec(id="T1", title="x"))
    start(b, "a", "T1")
    b.apply_block(BlockTask(agent="a", task="T1", reason="step failed"), 1, NOW, needs_person=True)
    refusal = b.check_start(StartTask(agent="a", task="T1"), 1)
    assert refusal is not None and "retry_phase" in (refusal.hint or "")
    assert b.release_person_blocks(1, NOW) == ["T1"]
    assert b.check_start(StartTask(agent="a", task="T1"), 1) is None


def test_blocking_releases_the_claim_and_anyone_may_take_it_again():
    b = board(TaskSpec(id="T1", title="x"))
    start(b, "a", "T1")
    b.apply_block(BlockTask(agent="a", task="T1", reason="waiting on API keys"), 1, NOW)
    assert b.tasks["T1"].claimed_by == ""
    assert start(b, "b", "T1") == "T1"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("`src/app.py` contains `def login`", "contains"),
        ("`README.md` contains 'receive'", "contains"),
        ("`docs/api.md` exists", "exists"),
        ("`python -m pytest -q tests/test_login.py` exits 0", "command"),
        ("`npm test` passes", "command"),
        ("`make lint && rm -rf /` passes", "claim"),  # needs a shell: never run
        ("Users can log in with OAuth", "claim"),
        ("`../../etc/passwd` contains `root`", "contains"),  # held to the workspace later
    ],
)
def test_criteria_a_machine_can_check(text, kind):
    assert criteria.parse_criterion(text).kind == kind


def test_only_commands_the_session_started_with_run():
    commands = SessionCommands(
        checkpoints=[
            SessionCommand(
                name="t", argv=["pytest", "-q"], source="x", task="T1", role="acceptance"
            )
        ]
    )
    checks, lines = criteria.criteria_checks(
        "T1", ["`pytest -q` exits 0", "`npm test` passes", "it works"], commands
    )
    assert [c.kind for c in checks] == ["command"]
    assert [line.check != "" for line in lines] == [True, False, False]


def test_pre_analysis_words_are_filled_in_whole():
    values = {"files": ["a.py", "b c.py"], "id": "IMPL-1"}
    assert steps.fill(["grep", "-n", "TODO", "[files]"], values) == [
        "grep",
        "-n",
        "TODO",
        "a.py",
        "b c.py",
    ]
    with pytest.raises(steps.StepRefused, match="whole argument"):
        steps.fill(["cat", "--file=[files]"], values)
    with pytest.raises(steps.StepRefused, match="no value"):
        steps.fill(["cat", "[missing]"], values)
    task = TaskSpec(
        id="IMPL-1", title="x", pre_analysis=[PreAnalysisStep(step="s", command="ls [id]")]
    )
    with pytest.raises(steps.StepRefused, match="not among the commands"):
        steps.bound_argv(task, task.pre_analysis[0], None)


def test_names_and_complexity():
    assert naming.folder_name("Add OAuth2 login (v2)!") == "WFS-add-oauth2-login-v2"
    assert naming.folder_name("x", taken={"WFS-x"}) == "WFS-x-001"
    assert naming.folder_name("x", taken={"WFS-x", "WFS-x-001"}) == "WFS-x-002"
    long = naming.folder_name("word " * 40, taken={naming.folder_name("word " * 40)})
    assert len(long) <= 50 and long.endswith("-001")
    assert [naming.classify(n) for n in (4, 5, 15, 16)] == ["simple", "medium", "medium", "complex"]
    assert naming.upgrade("complex", "simple") == "complex"
    assert naming.agent_for("", "Write tests for the parser") == "@code-review-test-agent"
    assert naming.agent_for("docs", "anything") == "@doc-generator"
    b = board(*[TaskSpec(id=f"T{n}", title="x") for n in range(20)])
    assert b.complexity == "complex"


def test_the_starters_complexity_raises_the_boards_and_never_lowers_it():
    from phasegate.domain.session.messages import SessionOptions
    from phasegate.domain.tasks.naming import upgrade

    b = board(*[TaskSpec(id=f"T{n}", title="x") for n in range(6)])
    assert b.complexity == "medium"
    b.complexity = upgrade(b.complexity, SessionOptions(complexity="simple").complexity or "simple")
    assert b.complexity == "medium"
    b.complexity = upgrade(b.complexity, "complex")
    b.enter_phase(2, [TaskSpec(id="X1", title="x")], NOW)
    assert b.complexity == "complex"


def test_a_phase_passed_without_tracking_its_tasks_closes_them_saying_so():
    b = board(TaskSpec(id="1", title="Read the tasks"), TaskSpec(id="2", title="Check"))
    start(b, "a", "1")
    b.close_phase(1, "0", NOW)
    assert {t.status for t in b.tasks.values()} == {"completed"}
    assert "closed with phase 0's checkpoint" in b.tasks["2"].summary
