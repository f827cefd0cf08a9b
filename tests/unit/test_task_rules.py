"""domain.tasks.rules: the nine validation rules of a ``.workflow/`` task folder (as
tests/fixtures/workflow_folders/FORMAT.md quotes them), circular dependencies, and
the variants real folders write, each normalized with a warning. Every test writes a
small folder in tmp_path: what an error says is what a person reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from phasegate.activities.task_folders import read_task_folder
from phasegate.domain.errors import TaskFileInvalid
from phasegate.domain.tasks.rules import RawTask, TaskIssue, check_tasks, resolve_tasks


def _task(task_id: str, **over: Any) -> dict[str, Any]:
    """A task in the documented 6-field schema (WA-9)."""
    task: dict[str, Any] = {
        "id": task_id,
        "title": f"Task {task_id}",
        "status": "pending",
        "meta": {"type": "feature", "agent": "@code-developer"},
        "context": {
            "requirements": ["it works"],
            "focus_paths": ["src"],
            "acceptance": ["tests pass"],
            "depends_on": [],
        },
        "flow_control": {
            "pre_analysis": [{"step": "look", "action": "Look around", "command": "bash(ls src)"}],
            "implementation_approach": [],
            "target_files": [],
        },
    }
    task.update(over)
    return task


def _write(folder: Path, tasks: dict[str, Any]) -> Path:
    (folder / ".task").mkdir(parents=True, exist_ok=True)
    for name, data in tasks.items():
        text = data if isinstance(data, str) else json.dumps(data)
        (folder / ".task" / f"{name}.json").write_text(text, encoding="utf-8")
    return folder


def _check(tmp_path: Path, tasks: dict[str, Any]) -> list[TaskIssue]:
    """Write the folder, read its files back and check them."""
    folder = _write(tmp_path / "WFS-test", tasks)
    raws = [
        RawTask(file=f".task/{p.name}", data=json.loads(p.read_text(encoding="utf-8")))
        for p in sorted((folder / ".task").glob("*.json"))
    ]
    return check_tasks(raws)


def _only(issues: list[TaskIssue], code: str) -> TaskIssue:
    found = [i for i in issues if i.code == code]
    assert len(found) == 1, (code, issues)
    return found[0]


def _codes(issues: list[TaskIssue]) -> set[str]:
    return {i.code for i in issues}


def test_a_documented_folder_has_no_issue(tmp_path):
    tasks = {
        "IMPL-1": _task("IMPL-1", status="container"),
        "IMPL-1.1": _task("IMPL-1.1"),
        "IMPL-1.2": _task("IMPL-1.2", context={"depends_on": ["IMPL-1.1"], "parent": "IMPL-1"}),
        "IMPL-2": _task("IMPL-2", context={"depends_on": ["IMPL-1"]}),
    }
    assert _check(tmp_path, tasks) == []


# ---------------------------------------------------------------- 1 ID Uniqueness


def test_rule_1_duplicate_ids_are_an_error(tmp_path):
    issues = _check(tmp_path, {"IMPL-1": _task("IMPL-1"), "copy-of-IMPL-1": _task("IMPL-1")})
    dup = _only(issues, "duplicate_id")
    assert dup.severity == "error"
    assert dup.message == (
        ".task/copy-of-IMPL-1.json: IMPL-1: id: IMPL-1 is also the id of .task/IMPL-1.json"
    )
    assert dup.hint == "give every task its own id and file"
    mismatch = _only(issues, "id_file_mismatch")  # the copy's name is not its id
    assert mismatch.severity == "warning" and mismatch.file == ".task/copy-of-IMPL-1.json"
    assert mismatch.hint == "rename the file IMPL-1.json, or write the id copy-of-IMPL-1"


def test_rule_1_task_id_and_file_names_give_ids_with_a_warning(tmp_path):
    written = _task("IMPL-1")
    written["task_id"] = written.pop("id")
    unnamed = _task("IMPL-2")
    del unnamed["id"]
    issues = _check(tmp_path, {"IMPL-1": written, "IMPL-2": unnamed})
    assert _codes(issues) == {"id_from_task_id", "id_from_file_name"}
    assert _only(issues, "id_from_task_id").message == (
        ".task/IMPL-1.json: IMPL-1: task_id: the id is written as task_id"
    )
    assert _only(issues, "id_from_task_id").hint == 'write "id": "IMPL-1" instead of "task_id"'
    assert _only(issues, "id_from_file_name").message == (
        ".task/IMPL-2.json: IMPL-2: id: no id; the file name gives it"
    )


# ---------------------------------------------------------------- 2 Hierarchical Format


def test_rule_2_an_id_that_cannot_be_one_is_an_error(tmp_path):
    issue = _only(_check(tmp_path, {"bad": _task("IMPL 1")}), "id_invalid")
    assert issue.severity == "error"
    assert issue.message.startswith(".task/bad.json: ?: id: 'IMPL 1' cannot be a task id")
    nameless = _task("x")
    del nameless["id"]
    missing = _only(_check(tmp_path / "b", {"no id here": nameless}), "id_missing")
    assert missing.message == ".task/no id here.json: ?: id: no id, and the file name is not one"


def test_rule_2_ids_other_than_impl_n_are_kept_with_a_warning(tmp_path):
    issue = _only(_check(tmp_path, {"ANALYSIS-001": _task("ANALYSIS-001")}), "id_format")
    assert issue.severity == "warning"
    assert (
        issue.message
        == ".task/ANALYSIS-001.json: ANALYSIS-001: id: not the format's IMPL-N or IMPL-N.M"
    )
    # The unified schema lets the producer choose the prefix.
    unified = {
        "id": "TASK-001",
        "title": "t",
        "description": "d",
        "depends_on": [],
        "convergence": {"criteria": ["done"]},
    }
    assert _check(tmp_path / "u", {"TASK-001": unified}) == []


def test_rule_2_three_levels_are_an_error(tmp_path):
    tasks = {i: _task(i) for i in ("IMPL-1", "IMPL-1.1", "IMPL-1.1.1")}
    issue = _only(_check(tmp_path, tasks), "too_deep")
    assert issue.severity == "error"
    assert issue.message == (
        ".task/IMPL-1.1.1.json: IMPL-1.1.1: id: a subtask of IMPL-1.1, itself a subtask of "
        "IMPL-1: at most 2 levels (IMPL-N.M)"
    )
    assert issue.hint == "make it a subtask of IMPL-1, or a task of its own"


# ---------------------------------------------------------------- 3 Parent References


def test_rule_3_a_parent_that_is_no_task_is_an_error(tmp_path):
    issue = _only(
        _check(tmp_path, {"IMPL-2": _task("IMPL-2", context={"parent": "IMPL-9"})}),
        "parent_unknown",
    )
    assert issue.severity == "error"
    assert (
        issue.message
        == ".task/IMPL-2.json: IMPL-2: context.parent: names IMPL-9, which no task file defines"
    )
    assert issue.hint == "add .task/IMPL-9.json, or correct context.parent"


def test_rule_3_a_parent_the_id_contradicts_is_an_error(tmp_path):
    tasks = {
        "IMPL-1": _task("IMPL-1"),
        "IMPL-3": _task("IMPL-3"),
        "IMPL-1.2": _task("IMPL-1.2", context={"parent": "IMPL-3"}),
    }
    issue = _only(_check(tmp_path, tasks), "parent_mismatch")
    assert issue.message == (
        ".task/IMPL-1.2.json: IMPL-1.2: context.parent: names IMPL-3, but the id makes it a "
        "subtask of IMPL-1"
    )


def test_rule_3_a_missing_container_is_created_from_the_ids(tmp_path):
    """shallot98's folder has IMPL-1.1 .. IMPL-1.3 and no IMPL-1.json."""
    tasks = {
        "IMPL-2.1": _task("IMPL-2.1", meta={"phase": "Phase 2: Refactor"}),
        "IMPL-2.2": _task("IMPL-2.2", meta={"phase": "Phase 2: Refactor"}),
    }
    folder = _write(tmp_path / "WFS-x", tasks)
    raws = [RawTask(file=f".task/{n}.json", data=d) for n, d in tasks.items()]
    read, issues = resolve_tasks(raws)
    issue = _only(issues, "container_created")
    assert issue.severity == "warning"
    assert issue.message == (
        ".task/IMPL-2.1.json: IMPL-2.1: id: its container IMPL-2 has no task file; IMPL-2 is "
        "created as the container of IMPL-2.1, IMPL-2.2"
    )
    container = read[0]
    assert (container.id, container.title, container.created) == (
        "IMPL-2",
        "Phase 2: Refactor",
        ["IMPL-2.1", "IMPL-2.2"],
    )
    spec = read_task_folder(folder)
    assert [t.id for t in spec.phases[0].tasks] == ["IMPL-2", "IMPL-2.1", "IMPL-2.2"]
    assert spec.phases[0].tasks[1].task is not None
    assert spec.phases[0].tasks[1].task.parent == "IMPL-2"


# ---------------------------------------------------------------- 4 Status Consistency


def test_rule_4_an_unknown_status_is_an_error(tmp_path):
    issue = _only(_check(tmp_path, {"IMPL-1": _task("IMPL-1", status="done")}), "status_unknown")
    assert issue.severity == "error"
    assert issue.message == ".task/IMPL-1.json: IMPL-1: status: 'done' is not a status"
    assert issue.hint == "write one of pending, active, completed, blocked, container"


@pytest.mark.parametrize(
    ("written", "kept", "why"),
    [
        ("in_progress", "pending", "nobody holds it in this session"),
        ("active", "pending", "nobody holds it in this session"),
        ("blocked", "pending", "blocked means waiting for dependencies"),
        ("failed", "pending", "to be done again"),
        ("skipped", "completed", "it counts as completed"),
        ("Completed", "completed", "read as completed"),
    ],
)
def test_rule_4_status_variants_are_kept_with_a_warning(tmp_path, written, kept, why):
    issue = _only(_check(tmp_path, {"IMPL-1": _task("IMPL-1", status=written)}), "status_variant")
    assert issue.severity == "warning" and why in issue.message
    assert issue.hint == f'write "status": "{kept}"'
    spec = read_task_folder(tmp_path / "WFS-test")
    task = spec.phases[0].tasks[0].task
    assert task is not None and task.status == kept


def test_rule_4_a_container_without_subtasks(tmp_path):
    issue = _only(
        _check(tmp_path, {"IMPL-1": _task("IMPL-1", status="container")}),
        "container_without_subtasks",
    )
    assert issue.message == (
        ".task/IMPL-1.json: IMPL-1: status: a container with no subtasks; it is imported as a "
        "task to do"
    )


# ---------------------------------------------------------------- 5 Required Fields


def test_rule_5_a_file_that_is_no_object_is_an_error(tmp_path):
    issue = _only(_check(tmp_path, {"IMPL-1": [1, 2]}), "not_an_object")
    assert issue.severity == "error"
    assert (
        issue.message
        == ".task/IMPL-1.json: ?: (file): the file holds a JSON array, not a task object"
    )


def test_rule_5_missing_fields_and_fields_elsewhere_are_warnings(tmp_path):
    """music's IMPL-00N: no meta, no context; acceptance_criteria at the top."""
    task = {
        "id": "IMPL-1",
        "title": "t",
        "status": "pending",
        "flow_control": {},
        "acceptance_criteria": ["it works"],
    }
    issues = _check(tmp_path, {"IMPL-1": task})
    missing = _only(issues, "fields_missing")
    assert missing.message == (
        ".task/IMPL-1.json: IMPL-1: meta: the 6-field schema requires id, title, status, meta, "
        "context, flow_control; this task has no meta, context"
    )
    moved = _only(issues, "field_elsewhere")
    assert moved.field == "acceptance_criteria"
    assert "acceptance_criteria as acceptance" in moved.message
    spec = read_task_folder(tmp_path / "WFS-test")
    assert spec.phases[0].tasks[0].acceptance_criteria == ["it works"]
    untitled = _task("IMPL-2", title="  ")
    assert _only(_check(tmp_path / "t", {"IMPL-2": untitled}), "title_missing").message == (
        ".task/IMPL-2.json: IMPL-2: title: no title; the id stands in for it"
    )


# ---------------------------------------------------------------- 6 Focus Paths


def test_rule_6_focus_paths_are_concrete_paths(tmp_path):
    task = _task("IMPL-1", context={"focus_paths": ["src/auth", "src/*.py", "./tests", "/etc"]})
    issues = [i for i in _check(tmp_path, {"IMPL-1": task}) if i.code == "focus_path_form"]
    assert [i.message for i in issues] == [
        f".task/IMPL-1.json: IMPL-1: context.focus_paths: {p!r} is not a concrete path from the "
        "project root"
        for p in ("src/*.py", "./tests", "/etc")
    ]
    assert all(i.severity == "warning" for i in issues)


# ---------------------------------------------------------------- 7 Flow Control Format


def test_rule_7_pre_analysis_strings_become_instruction_steps(tmp_path):
    """credit-clarity's active session: pre_analysis is a list of strings in context."""
    task = _task(
        "IMPL-1",
        flow_control={},
        context={"pre_analysis": ["Read backend/core/config.py for settings"]},
    )
    issues = _check(tmp_path, {"IMPL-1": task})
    form = _only(issues, "pre_analysis_form")
    assert form.message == (
        ".task/IMPL-1.json: IMPL-1: context.pre_analysis: 1 step(s) are plain text; each is kept "
        "as an instruction for the agent"
    )
    assert _only(issues, "field_elsewhere").message == (
        ".task/IMPL-1.json: IMPL-1: context.pre_analysis: read from where the format does not "
        "write it: context.pre_analysis"
    )
    [step] = read_task_folder(tmp_path / "WFS-test").phases[0].tasks[0].task.pre_analysis  # type: ignore[union-attr]
    assert (step.step, step.action, step.command) == (
        "step_1",
        "Read backend/core/config.py for settings",
        "",
    )


def test_rule_7_an_object_and_steps_missing_fields(tmp_path):
    """music's pre_analysis is an object; shallot98's steps have no action."""
    obj = _task("IMPL-1", flow_control={"pre_analysis": {"objectives": ["a", "b"]}})
    bare = _task("IMPL-2", flow_control={"pre_analysis": [{"step": "s", "command": "bash(ls)"}]})
    issues = _check(tmp_path, {"IMPL-1": obj, "IMPL-2": bare})
    assert (
        "an object (objectives), not a list of steps" in _only(issues, "pre_analysis_form").message
    )
    assert _only(issues, "pre_analysis_step").message == (
        ".task/IMPL-2.json: IMPL-2: flow_control.pre_analysis: step(s) 0 have no action (a step "
        "has step, action and command)"
    )
    spec = read_task_folder(tmp_path / "WFS-test")
    first, second = (p.tasks[0].task for p in spec.phases)
    assert first is not None and second is not None
    assert [(s.step, s.action, s.command) for s in first.pre_analysis] == [
        ("objectives", "a; b", "")
    ]
    assert [(s.step, s.command) for s in second.pre_analysis] == [("s", "ls")]  # bash(...) runs


def test_rule_7_commands_phasegate_cannot_run_stay_instructions(tmp_path):
    steps = [
        {
            "step": "load",
            "action": "Load",
            "commands": ["Read(a.md)", "bash(head -5 a.md)", "bash(ls | wc -l)"],
            "output_to": "ctx",
        },
    ]
    _write(tmp_path / "WFS-test", {"IMPL-1": _task("IMPL-1", flow_control={"pre_analysis": steps})})
    spec = read_task_folder(tmp_path / "WFS-test")
    task = spec.phases[0].tasks[0].task
    assert task is not None
    assert [(s.step, s.command, s.output_to) for s in task.pre_analysis] == [
        ("load", "", ""),  # Read(a.md): the agent's to do
        ("load_2", "head -5 a.md", ""),
        ("load_3", "", "ctx"),  # a pipeline needs a shell
    ]
    assert "Read(a.md)" in task.pre_analysis[0].action
    [warning] = [w.message for w in spec.warnings if "needs a shell" in w.message]
    assert warning.startswith(
        ".task/IMPL-1.json: IMPL-1: flow_control.pre_analysis[0]: `bash(ls | wc -l)` cannot run "
        "without a shell"
    )


# ---------------------------------------------------------------- 8 Dependency Integrity


def test_rule_8_a_dependency_on_no_task_is_an_error(tmp_path):
    task = _task("IMPL-2", context={"depends_on": ["IMPL-1", "IMPL-9"]})
    issue = _only(_check(tmp_path, {"IMPL-1": _task("IMPL-1"), "IMPL-2": task}), "depends_unknown")
    assert issue.severity == "error"
    assert issue.message == (
        ".task/IMPL-2.json: IMPL-2: context.depends_on: depends on IMPL-9, which no task file "
        "defines"
    )
    assert issue.hint == "add .task/IMPL-9.json, or remove IMPL-9 from context.depends_on"


@pytest.mark.parametrize(
    "place",
    [
        "depends_on",
        "meta.depends_on",
        "meta.dependencies",
        "dependencies.depends_on",
        "dependencies",
        "flow_control.requires",
        "blocked_by",
        "meta.blocked_by",
    ],
)
def test_rule_8_dependencies_written_elsewhere_are_read(tmp_path, place):
    task = _task("IMPL-2", context={})
    target: dict[str, Any] = task
    *parents, last = place.split(".")
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = ["IMPL-1"]
    issues = _check(tmp_path, {"IMPL-1": _task("IMPL-1"), "IMPL-2": task})
    spec = read_task_folder(tmp_path / "WFS-test")
    assert [p.tasks[0].dependencies for p in spec.phases] == [[], ["IMPL-1"]]
    if place == "depends_on":  # the unified schema's place (and music's)
        assert issues == []
        return
    issue = _only(issues, "depends_elsewhere")
    assert issue.severity == "warning" and issue.field == place
    assert issue.message.startswith(
        f".task/IMPL-2.json: IMPL-2: {place}: dependencies read from {place}"
    )


def test_rule_8_blocks_make_the_blocked_task_wait(tmp_path):
    """credit-clarity: IMPL-003's flow_control.blocks names IMPL-008, whose depends_on
    does not name IMPL-003; shallot98 blocks tasks that have no file."""
    blocker = _task("IMPL-1", flow_control={"blocks": ["IMPL-2", "IMPL-7"]})
    issues = _check(tmp_path, {"IMPL-1": blocker, "IMPL-2": _task("IMPL-2")})
    assert _only(issues, "depends_from_blocks").message == (
        ".task/IMPL-2.json: IMPL-2: context.depends_on: also waits for IMPL-1, whose blocks names "
        "IMPL-2"
    )
    assert _only(issues, "blocks_unknown").message == (
        ".task/IMPL-1.json: IMPL-1: flow_control.blocks: blocks IMPL-7, which no task file "
        "defines; ignored"
    )
    spec = read_task_folder(tmp_path / "WFS-test")
    assert [p.tasks[0].dependencies for p in spec.phases] == [[], ["IMPL-1"]]


def test_rule_8_too_many_dependencies(tmp_path):
    tasks = {f"IMPL-{n}": _task(f"IMPL-{n}") for n in range(1, 35)}
    tasks["IMPL-40"] = _task("IMPL-40", context={"depends_on": list(tasks)})
    issue = _only(_check(tmp_path, tasks), "too_many_dependencies")
    assert (
        issue.message
        == ".task/IMPL-40.json: IMPL-40: context.depends_on: 34 dependencies; at most 32"
    )


# ---------------------------------------------------------------- 9 Artifacts Structure


def test_rule_9_artifacts_need_a_path_and_a_priority(tmp_path):
    """teacher-lesson-workflow's artifacts are bare path strings."""
    context = {
        "artifacts": [
            "resources/data/a.json",
            {"type": "topic_framework", "path": "a.md", "priority": "urgent"},
            {"type": "role_analyses", "path": "b.md", "priority": "high"},
        ]
    }
    issues = _check(tmp_path, {"IMPL-1": _task("IMPL-1", context=context)})
    assert [(i.code, i.field, i.severity) for i in issues] == [
        ("artifact_form", "context.artifacts[0]", "warning"),
        ("artifact_form", "context.artifacts[1]", "warning"),
    ]
    assert issues[0].message.endswith(
        "not an artifact with a path and a priority (highest, high, medium, low)"
    )


# ---------------------------------------------------------------- no circular dependencies


def test_a_cycle_is_an_error_with_its_path(tmp_path):
    tasks = {
        "IMPL-1": _task("IMPL-1", context={"depends_on": ["IMPL-3"]}),
        "IMPL-2": _task("IMPL-2", context={"depends_on": ["IMPL-1"]}),
        "IMPL-3": _task("IMPL-3", context={"depends_on": ["IMPL-2"]}),
        "IMPL-4": _task("IMPL-4", context={"depends_on": ["IMPL-4"]}),
    }
    cycles = [i for i in _check(tmp_path, tasks) if i.code == "cycle"]
    assert [i.message for i in cycles] == [
        (
            ".task/IMPL-1.json: IMPL-1: context.depends_on: circular dependency: IMPL-1 → IMPL-3 → "
            "IMPL-2 → IMPL-1 (IMPL-1 depends on IMPL-3; IMPL-3 depends on IMPL-2; IMPL-2 depends on "
            "IMPL-1)"
        ),
        (
            ".task/IMPL-4.json: IMPL-4: context.depends_on: circular dependency: IMPL-4 → IMPL-4 "
            "(IMPL-4 depends on IMPL-4)"
        ),
    ]
    assert all(
        i.severity == "error" and i.hint == "remove one of these dependencies" for i in cycles
    )


def test_a_task_waiting_for_its_own_container_is_a_cycle(tmp_path):
    """A container completes when its subtasks do, so a subtask that depends on it
    would wait forever."""
    tasks = {
        "IMPL-1": _task("IMPL-1"),
        "IMPL-1.1": _task("IMPL-1.1", context={"depends_on": ["IMPL-1"]}),
    }
    issue = _only(_check(tmp_path, tasks), "cycle")
    assert issue.message == (
        ".task/IMPL-1.1.json: IMPL-1.1: context.depends_on: circular dependency: IMPL-1 → "
        "IMPL-1.1 → IMPL-1 (IMPL-1 is complete when its subtask IMPL-1.1 is; IMPL-1.1 depends "
        "on IMPL-1)"
    )


def test_a_cycle_through_a_containers_dependencies(tmp_path):
    """IMPL-2.1 waits for what its container IMPL-2 depends on (IMPL-1), and IMPL-1 depends
    on IMPL-2.1: no task of the two could ever start."""
    tasks = {
        "IMPL-1": _task("IMPL-1", context={"depends_on": ["IMPL-2.1"]}),
        "IMPL-2": _task("IMPL-2", context={"depends_on": ["IMPL-1"]}),
        "IMPL-2.1": _task("IMPL-2.1"),
    }
    issue = _only(_check(tmp_path, tasks), "cycle")
    assert "IMPL-2.1 waits for IMPL-1, which its container IMPL-2 depends on" in issue.message


# ---------------------------------------------------------------- every problem at once


def test_every_error_is_reported_at_once(tmp_path):
    tasks = {
        "IMPL-1": _task("IMPL-1", status="finished"),
        "IMPL-2": _task("IMPL-2", context={"depends_on": ["IMPL-8"]}),
        "IMPL-3": "{not json",
    }
    folder = _write(tmp_path / "WFS-bad", tasks)
    with pytest.raises(TaskFileInvalid) as caught:
        read_task_folder(folder)
    err = caught.value
    assert err.code == "task_file_invalid"
    assert err.message.startswith("3 problems in the task folder: 1) ")
    assert ".task/IMPL-3.json: IMPL-3: (file): not valid JSON" in err.message
    assert ".task/IMPL-1.json: IMPL-1: status: 'finished' is not a status" in err.message
    assert ".task/IMPL-2.json: IMPL-2: context.depends_on: depends on IMPL-8, which no task" in (
        err.message
    )
    assert err.where == f"{folder / '.task/IMPL-3.json'}: IMPL-3: (file)"
    assert err.hint == "fix the file so it parses as one JSON object"
