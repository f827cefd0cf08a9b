"""Importing ``.workflow/WFS-*`` folders (activities/task_folders.py) as sessions.

- every real folder under tests/fixtures/workflow_folders (see FORMAT.md and each
  SOURCE.md): its tasks, titles, dependencies, statuses and phase order, each expected
  value quoting what the real file says; the one folder the rules refuse, with the
  exact error naming its file, task and field;
- a folder written here with two top-level tasks, subtasks, dependencies and
  pre-analysis, in both layouts; bounds, containment and the snapshot re-read;
- a ``workflow_tasks_v1`` session on the real dev server: phase 0 lists the tasks, and
  the first task phase's tasks are on the session's task board.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from phasegate.activities.snapshots import SnapshotStore
from phasegate.activities.task_folders import is_task_folder, read_source, read_task_folder
from phasegate.domain.errors import DefinitionError, TaskFileInvalid
from phasegate.domain.spec import ParsedSpec

REAL = Path(__file__).resolve().parent / "fixtures" / "workflow_folders"
MUSIC = REAL / "Johnhpure__music__two-sessions" / ".workflow"
CREDIT = REAL / "Rorschach3__credit-clarity__active-and-archived" / ".workflow"
SHALLOT = REAL / "shallot98__Save-Restricted-Bot__web-refactor-bugfix" / ".workflow" / "active"
SYNAPSE = REAL / "yunzaibo__SYNAPSE__p3-event-driven" / ".workflow" / "archives"
ZZQ = (
    REAL
    / "zzq12345-cq__AI-Ideological-and-Political-Education-Teaching-System__three-sessions"
    / ".workflow"
)


def _tasks(spec: ParsedSpec) -> dict[str, Any]:
    return {t.id: t for p in spec.phases for t in p.tasks}


def _phase_ids(spec: ParsedSpec) -> list[list[str]]:
    return [[t.id for t in p.tasks] for p in spec.phases]


def _warned(spec: ParsedSpec, *words: str) -> str:
    found = [w.message for w in spec.warnings if all(x in w.message for x in words)]
    assert len(found) == 1, (words, [w.message for w in spec.warnings])
    return found[0]


# ---------------------------------------------------------------- the real folders


def test_every_real_folder_is_a_task_folder():
    folders = sorted({p.parent.parent for p in REAL.rglob(".task/*.json")})
    assert len(folders) == 9
    assert all(is_task_folder(f) for f in folders)
    assert not is_task_folder(REAL)


def test_music_miniprogram_task_id_files_and_object_pre_analysis():
    spec = read_task_folder(MUSIC / "WFS-miniprogram-api-integration")
    # workflow-session.json: "project": "微信小程序首页核心功能接口封装和联调 - 音乐点数、..."
    assert (
        spec.title
        == "微信小程序首页核心功能接口封装和联调 - 音乐点数、Banner图管理、创作提示词管理、热门推荐音乐"
    )
    assert _phase_ids(spec) == [["IMPL-001"], ["IMPL-002"], ["IMPL-003"], ["IMPL-004"]]
    tasks = _tasks(spec)
    # "task_id": "IMPL-001", "title": "Phase 1: Core Optimization - Request Deduplication, ..."
    assert tasks["IMPL-001"].name == (
        "Phase 1: Core Optimization - Request Deduplication, Caching, Error Handling, Token Refresh"
    )
    # IMPL-001..003 "status": "completed"; IMPL-004 "status": "pending" (the session file's
    # tasks[] says all four are pending: the task files are the truth)
    assert [tasks[t].task.status for t in sorted(tasks)] == ["completed"] * 3 + ["pending"]
    # "depends_on": ["IMPL-001", "IMPL-002", "IMPL-003"]
    assert tasks["IMPL-004"].dependencies == ["IMPL-001", "IMPL-002", "IMPL-003"]
    # "acceptance_criteria": ["Request deduplication: Same API call within 1 second shares ..."
    assert (
        tasks["IMPL-001"]
        .acceptance_criteria[0]
        .startswith("Request deduplication: Same API call within 1 second shares Promise result")
    )
    # "pre_analysis": {"objectives": [...], "target_files": [...], "key_patterns": [...]}
    steps = tasks["IMPL-001"].task.pre_analysis
    assert [s.step for s in steps] == ["objectives", "target_files", "key_patterns"]
    assert not any(s.command for s in steps)
    # "target_files": {"new_files": ["miniprogram/utils/requestQueue.js", ...], ...}
    assert tasks["IMPL-001"].task.target_files[0] == "miniprogram/utils/requestQueue.js"
    assert tasks["IMPL-001"].task.raw["task_id"] == "IMPL-001"  # written back as task_id
    assert _warned(spec, "task_id: the id is written as task_id").startswith(
        "4 task files (IMPL-001, IMPL-002, IMPL-003, IMPL-004): task_id:"
    )
    _warned(spec, "this task has no meta, context")
    _warned(spec, "an object (objectives, target_files, key_patterns), not a list of steps")


def test_music_analysis_a_prefix_other_than_impl():
    spec = read_task_folder(MUSIC / "WFS-music-platform-analysis")
    assert spec.title == "分析和记录完整项目状态 - 音乐平台"  # "project"
    [[task]] = [p.tasks for p in spec.phases]
    assert (task.id, task.name, task.status) == ("ANALYSIS-001", "音乐平台项目完整状态分析", "done")
    _warned(spec, "ANALYSIS-001: id: not the format's IMPL-N or IMPL-N.M")
    # "commands": ["bash(find . -maxdepth 3 -type d -not -path '*/node_modules/*' ... | sort)"]
    _warned(spec, "`bash(find . -maxdepth 3 -type d", "cannot run without a shell")
    steps = task.task.pre_analysis
    assert steps[0].step == "load_context_package" and steps[0].command == ""
    assert "Read(.workflow/WFS-music-platform-analysis/.context/context-package.json)" in (
        steps[0].action
    )


def test_credit_clarity_active_dependencies_from_meta_and_blocks():
    spec = read_task_folder(CREDIT / "active" / "WFS-implement-credit-clarity-platform")
    assert spec.title == "implement credit clarity platform"
    assert _phase_ids(spec) == [[f"IMPL-{n:03d}"] for n in range(1, 13)]
    tasks = _tasks(spec)
    assert {t.status for t in tasks.values()} == {"todo"}  # all "status": "pending"
    assert tasks["IMPL-001"].name == "Supabase DB Schema Migrations"
    # IMPL-012 "meta": {..., "depends_on": ["IMPL-003", ..., "IMPL-011"]}
    assert tasks["IMPL-012"].dependencies == [f"IMPL-{n:03d}" for n in range(3, 12)]
    # IMPL-008 "depends_on": ["IMPL-001", "IMPL-002", "IMPL-005"]; IMPL-003's
    # "flow_control": {"blocks": ["IMPL-008", "IMPL-009"]} adds IMPL-003
    assert tasks["IMPL-008"].dependencies == ["IMPL-001", "IMPL-002", "IMPL-005", "IMPL-003"]
    _warned(spec, "IMPL-008: meta.depends_on: also waits for IMPL-003, whose blocks names IMPL-008")
    assert _warned(
        spec, "dependencies read from meta.depends_on, flow_control.requires"
    ).startswith("12 task files (IMPL-001, IMPL-002, IMPL-003, IMPL-004, IMPL-005, IMPL-006, …)")
    # "pre_analysis": ["Read supabase/migrations/20250720_update_tradeline_unique_constraint.sql
    # for RLS pattern", ...] inside "context"
    first = tasks["IMPL-001"].task.pre_analysis[0]
    assert (first.step, first.command) == ("step_1", "")
    assert first.action == (
        "Read supabase/migrations/20250720_update_tradeline_unique_constraint.sql for RLS pattern"
    )
    assert tasks["IMPL-001"].task.type == "database"  # "meta": {"type": "database", ...}


def test_credit_clarity_archived_the_documented_schema():
    spec = read_task_folder(CREDIT / "archives" / "WFS-brainstorm-for-a-prd")
    assert spec.title == "brainstorm for a PRD"
    assert _phase_ids(spec) == [[f"IMPL-00{n}"] for n in range(1, 7)]
    tasks = _tasks(spec)
    assert {t.status for t in tasks.values()} == {"done"}  # all "status": "completed"
    # "depends_on": ["IMPL-001", "IMPL-002", "IMPL-003", "IMPL-004", "IMPL-005"]
    assert tasks["IMPL-006"].dependencies == [f"IMPL-00{n}" for n in range(1, 6)]
    assert tasks["IMPL-001"].task.agent == "@code-developer"  # "agent": "@code-developer"
    # "commands": [..., "bash(head -50 docs/CLAUDE.md)", ...]: runs when the task is claimed
    commands = [s.command for s in tasks["IMPL-001"].task.pre_analysis if s.command]
    assert commands == ["head -50 docs/CLAUDE.md", "head -50 docs/ARCHITECTURE_GUIDE.md"]
    # "bash(ls -la docs/PRD-*.md)": the wildcard needs a shell
    _warned(spec, "`bash(ls -la docs/PRD-*.md)` needs a shell to expand its wildcards")
    assert all("shell" in w.message for w in spec.warnings)  # nothing else to normalize


def test_shallot98_is_refused_for_its_dangling_dependencies():
    """SOURCE.md: "IMPL-4.1 depends on IMPL-3.2/3.3/3.4 ... none of those have JSON files
    (violates documented rule 8 "Dependency Integrity")"."""
    folder = SHALLOT / "WFS-web-refactor-bugfix"
    with pytest.raises(TaskFileInvalid) as caught:
        read_task_folder(folder)
    err = caught.value
    assert err.where == f"{folder}/.task/IMPL-4.1.json: IMPL-4.1: dependencies.depends_on"
    assert err.message == (
        "3 problems in the task folder: "
        + "; ".join(
            f"{n}) .task/IMPL-4.1.json: IMPL-4.1: dependencies.depends_on: depends on IMPL-3.{m}, "
            f"which no task file defines (hint: add .task/IMPL-3.{m}.json, or remove IMPL-3.{m} "
            "from dependencies.depends_on)"
            for n, m in ((1, 2), (2, 3), (3, 4))
        )
    )
    assert err.hint == "add .task/IMPL-3.2.json, or remove IMPL-3.2 from dependencies.depends_on"


def test_synapse_the_unified_schema():
    spec = read_task_folder(SYNAPSE / "WFS-synapse-p3-event-driven")
    assert spec.title == "SYNAPSE P3 Event-Driven Research Contracts"  # "project"
    assert spec.warnings == []
    assert _phase_ids(spec) == [[f"IMPL-00{n}"] for n in range(1, 6)]
    tasks = _tasks(spec)
    assert {t.status for t in tasks.values()} == {"done"}  # all "status": "completed"
    # "depends_on": ["IMPL-001", "IMPL-002"] at the top level
    assert tasks["IMPL-003"].dependencies == ["IMPL-001", "IMPL-002"]
    one = tasks["IMPL-001"]
    assert one.name == "F-007 Sentiment Propagation -- schema + viral coefficient algorithm"
    # "convergence": {"criteria": ["1 new file created: verify by ls synapse/event/sentiment.py
    # | wc -l >= 1", ...], "verification": "py -m pytest tests/unit/test_sentiment_propagation.py
    # -p no:asyncio -q && ls synapse/event/sentiment.py", ...}
    assert one.acceptance_criteria[0] == (
        "1 new file created: verify by ls synapse/event/sentiment.py | wc -l >= 1"
    )
    assert "Verification: py -m pytest tests/unit/test_sentiment_propagation.py" in one.description
    # "files": [{"path": "synapse/event/sentiment.py", "action": "create", ...}]
    assert one.task.target_files == ["synapse/event/sentiment.py"]
    # "implementation": [{"step": 1, "title": "Create SentimentPropagation schema", ...}]
    assert one.task.implementation_approach[0].startswith(
        "Create SentimentPropagation schema: Define dataclass with 8 fields"
    )
    # "pre_analysis": [..., {"step": "load_brainstorm_artifacts", ..., "on_error": "skip_optional"}]
    assert [s.on_error for s in one.task.pre_analysis] == ["fail", "skip_optional"]


def test_zzq_three_sessions_three_shapes():
    analytics = read_task_folder(ZZQ / "WFS-class-data-analytics")
    # {"session_id":"WFS-class-data-analytics","project":"课程班数据分析-个人与全班维度",...}
    assert analytics.title == "课程班数据分析-个人与全班维度"
    assert _phase_ids(analytics) == [["IMPL-1"], ["IMPL-2"], ["IMPL-3"], ["IMPL-4"], ["IMPL-5"]]
    # IMPL-4: "dependencies": ["IMPL-2", "IMPL-3"], "blocked_by": ["IMPL-2", "IMPL-3"]
    assert _tasks(analytics)["IMPL-4"].dependencies == ["IMPL-2", "IMPL-3"]
    _warned(analytics, "dependencies read from dependencies, blocked_by")

    notify = read_task_folder(ZZQ / "WFS-notification-system")
    assert notify.title == "站内通知系统"
    # IMPL-5 "meta": {"dependencies": ["IMPL-1", "IMPL-2", "IMPL-3"], "blocked_by": []}
    assert _tasks(notify)["IMPL-5"].dependencies == ["IMPL-1", "IMPL-2", "IMPL-3"]
    # IMPL-1 "pre_analysis": [..., {"step": "verify_directory_structure",
    # "commands": ["bash(mkdir -p src/notifications/models)"], "output_to": "directory_created"}]
    step = _tasks(notify)["IMPL-1"].task.pre_analysis[1]
    assert (step.step, step.command, step.output_to) == (
        "verify_directory_structure",
        "mkdir -p src/notifications/models",
        "directory_created",
    )
    # "focus_paths" in meta: "meta": {..., "focus_paths": ["src/notifications/models/"]}
    assert _tasks(notify)["IMPL-1"].task.focus_paths == ["src/notifications/models/"]

    lesson = read_task_folder(ZZQ / "WFS-teacher-lesson-workflow")
    tasks = _tasks(lesson)
    # IMPL-001 "status": "completed"; IMPL-002 and IMPL-003 "status": "pending" although
    # TODO_LIST.md marks them "✅ completed": the JSON files are the truth
    assert [tasks[t].status for t in ("IMPL-001", "IMPL-002", "IMPL-003", "IMPL-004")] == [
        "done",
        "todo",
        "todo",
        "todo",
    ]
    assert tasks["IMPL-002"].name == "LessonPlanEditor教案编辑器"
    assert tasks["IMPL-003"].dependencies == ["IMPL-002"]  # "depends_on": ["IMPL-002"]
    _warned(lesson, "IMPL-002: context.artifacts[0]: not an artifact with a path")


# ---------------------------------------------------------------- a folder written here


def _write(folder: Path, tasks: dict[str, dict[str, Any]], session: Any = None) -> Path:
    (folder / ".task").mkdir(parents=True, exist_ok=True)
    if session is not None:
        (folder / "workflow-session.json").write_text(json.dumps(session), encoding="utf-8")
    for task_id, fields in tasks.items():
        data = {"id": task_id, "status": "pending", "meta": {"type": "feature"}, **fields}
        data.setdefault("context", {})
        data.setdefault("flow_control", {})
        (folder / ".task" / f"{task_id}.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


GREETING = {
    "IMPL-1": {"title": "Build the greeting", "status": "container"},
    "IMPL-1.1": {
        "title": "Write the greeting file",
        "context": {
            "parent": "IMPL-1",
            "depends_on": ["IMPL-2"],
            "acceptance": ["`greeting.txt` contains `hello`"],
            "focus_paths": ["."],
        },
        "flow_control": {
            "pre_analysis": [
                {
                    "step": "look",
                    "action": "See what the project holds",
                    "command": "bash(ls)",
                    "output_to": "listing",
                    "on_error": "skip_optional",
                },
                {"step": "read_readme", "action": "Read the README", "command": "Read(README.md)"},
            ],
            "implementation_approach": [{"step": 1, "title": "Write", "description": "hello"}],
            "target_files": ["greeting.txt"],
        },
    },
    "IMPL-1.2": {"title": "Document it", "context": {"depends_on": ["IMPL-1.1"]}},
    "IMPL-2": {"title": "Set up the project", "context": {"acceptance": ["The README exists"]}},
}


def _greeting(root: Path) -> Path:
    session = {"session_id": "WFS-greeting", "project": "Greeting service", "status": "active"}
    return _write(root / ".workflow" / "WFS-greeting", GREETING, session)


def test_a_written_folder_one_phase_per_top_level_task(tmp_path):
    folder = _greeting(tmp_path)
    spec = read_source(".workflow/WFS-greeting", target=str(tmp_path))
    assert spec.source == str(folder) and spec.title == "Greeting service"
    assert spec.warnings == []
    # IMPL-1's subtask IMPL-1.1 depends on IMPL-2: IMPL-2's phase comes first.
    assert _phase_ids(spec) == [["IMPL-2"], ["IMPL-1", "IMPL-1.1", "IMPL-1.2"]]
    assert [(p.number, p.written_number, p.name) for p in spec.phases] == [
        (1, "IMPL-2", "Set up the project"),
        (2, "IMPL-1", "Build the greeting"),
    ]
    tasks = _tasks(spec)
    write = tasks["IMPL-1.1"]
    assert write.task.parent == "IMPL-1" and write.dependencies == ["IMPL-2"]
    assert write.acceptance_criteria == ["`greeting.txt` contains `hello`"]
    assert [(s.step, s.command, s.output_to, s.on_error) for s in write.task.pre_analysis] == [
        ("look", "ls", "listing", "skip_optional"),
        ("read_readme", "", "", "fail"),
    ]
    assert write.task.implementation_approach == ["Write: hello"]
    assert write.task.source == f"{folder}/.task/IMPL-1.1.json"
    assert tasks["IMPL-1.2"].task.parent == "IMPL-1"  # from its id
    assert write.line == 1 and spec.phases[0].line == 1
    # The snapshot id is over the files read: the same files, the same id.
    assert read_task_folder(folder).sha256 == spec.sha256
    (folder / "TODO_LIST.md").write_text("a view, not read")
    assert read_task_folder(folder).sha256 == spec.sha256
    (folder / ".task" / "IMPL-2.json").write_text(
        json.dumps({"id": "IMPL-2", "title": "Set up", "status": "completed"})
    )
    assert read_task_folder(folder).sha256 != spec.sha256


def test_a_written_folder_in_stages(tmp_path):
    folder = _greeting(tmp_path)
    spec = read_task_folder(folder, layout="stages")
    assert [(p.written_number, p.name) for p in spec.phases] == [
        ("PLAN", "Plan"),
        ("IMPLEMENT", "Implement"),
        ("REVIEW", "Review"),
    ]
    assert _phase_ids(spec) == [[], ["IMPL-2", "IMPL-1", "IMPL-1.1", "IMPL-1.2"], []]
    assert spec.sha256 != read_task_folder(folder).sha256  # never the per-task snapshot


def test_top_level_tasks_waiting_for_each_other_cannot_be_one_phase_each(tmp_path):
    tasks = {
        "IMPL-1": {"title": "One"},
        "IMPL-1.1": {"title": "One's first", "context": {"depends_on": ["IMPL-2.1"]}},
        "IMPL-2": {"title": "Two"},
        "IMPL-2.1": {"title": "Two's first", "context": {"depends_on": ["IMPL-1.2"]}},
        "IMPL-1.2": {"title": "One's second"},
    }
    folder = _write(tmp_path / "WFS-knot", tasks)
    with pytest.raises(TaskFileInvalid) as caught:
        read_task_folder(folder)
    assert caught.value.message == (
        "1 problem in the task folder: 1) .task/: IMPL-1: depends_on: the top-level tasks wait "
        "for each other (IMPL-1, IMPL-2), so they cannot be one phase each (hint: let top-level "
        "tasks wait in one direction, or import the folder with the stages layout)"
    )
    assert _phase_ids(read_task_folder(folder, layout="stages"))[1] == [
        "IMPL-1",
        "IMPL-1.1",
        "IMPL-1.2",
        "IMPL-2",
        "IMPL-2.1",
    ]


def test_reads_are_held_to_the_target_and_bounded(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    outside = _greeting(tmp_path / "elsewhere")
    with pytest.raises(DefinitionError) as caught:
        read_source(str(outside), target=str(project))
    assert "the spec is outside" in caught.value.message
    # A task file that is a symlink out of the target is refused on the file opened.
    inside = _write(project / ".workflow" / "WFS-x", {"IMPL-1": {"title": "ok"}})
    os.symlink(outside / ".task" / "IMPL-2.json", inside / ".task" / "IMPL-2.json")
    with pytest.raises(DefinitionError) as caught:
        read_source(".workflow/WFS-x", target=str(project))
    assert "resolves to" in caught.value.message and caught.value.code == "definition_invalid"
    (inside / ".task" / "IMPL-2.json").unlink()
    (inside / ".task" / "IMPL-3.json").write_text(" " * (300 * 1024))
    with pytest.raises(DefinitionError) as caught:
        read_source(".workflow/WFS-x", target=str(project))
    assert caught.value.message == "the task file is 300 KiB (limit 256 KiB)"
    assert caught.value.where == str(inside / ".task" / "IMPL-3.json")
    assert caught.value.hint == "split the task into subtasks, each its own file"
    (inside / ".task" / "IMPL-3.json").write_text(json.dumps({"id": "IMPL-3", "title": "x" * 5000}))
    with pytest.raises(DefinitionError) as caught:
        read_source(".workflow/WFS-x", target=str(project), limit=4096)
    assert caught.value.message == "the task folder holds more than 4 KiB of task files"


def test_the_snapshot_is_rebuilt_from_the_folder(tmp_path):
    folder = _greeting(tmp_path)
    spec = read_source(str(folder))
    store = SnapshotStore(str(tmp_path / "home"))
    store.keep(spec)
    shutil.rmtree(tmp_path / "home")
    again = SnapshotStore(str(tmp_path / "home")).get(spec.sha256, os.path.realpath(folder))
    assert again == spec
    (folder / ".task" / "IMPL-2.json").write_text(json.dumps({"id": "IMPL-2", "title": "changed"}))
    with pytest.raises(DefinitionError) as caught:
        SnapshotStore(str(tmp_path / "home2")).get(spec.sha256, os.path.realpath(folder))
    assert "is missing and" in caught.value.message and "has changed" in caught.value.message


def test_a_stages_snapshot_is_rebuilt_in_its_layout(tmp_path):
    folder = _greeting(tmp_path)
    spec = read_source(str(folder), layout="stages")
    again = SnapshotStore(str(tmp_path / "home")).get(spec.sha256, os.path.realpath(folder))
    assert again == spec and [p.written_number for p in again.phases][1] == "IMPLEMENT"
