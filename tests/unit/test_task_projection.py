"""The ``.workflow/`` files a task board projects to (``domain/tasks/projection.py``),
and the active-session markers and ``doctor`` of the client (``client/cli/task_markers``).

Golden files: ``tests/fixtures/projection/expected/`` holds what a board with two
top-level tasks, subtasks (one container), dependencies, a completed task with its
summary, an active and a blocked task renders to. After an intended change of the
format, regenerate them with ``PHASEGATE_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from phasegate.client.cli import task_markers as tm
from phasegate.domain.tasks import criteria
from phasegate.domain.tasks.board import TaskBoard
from phasegate.domain.tasks.files import PhaseLine, TaskFilesSource
from phasegate.domain.tasks.messages import AddSubtask, BlockTask, CompleteTask, StartTask
from phasegate.domain.tasks.model import PreAnalysisStep, TaskSpec
from phasegate.domain.tasks.projection import (
    check_folder,
    digest,
    is_view_path,
    render_files,
    session_id_of,
)
from phasegate.domain.verify import VerifyResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXPECTED = FIXTURES / "projection" / "expected"
REAL = FIXTURES / "workflow_folders"
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def sample_board() -> TaskBoard:
    """Two top-level tasks and one more: IMPL-1 split into IMPL-1.1 (completed, with a
    summary, checked criteria and evidence) and IMPL-1.2 (active); IMPL-2 depends on
    IMPL-1; IMPL-3 is blocked; IMPL-1.3 is added by an agent (dynamic split)."""
    board = TaskBoard()
    board.enter_phase(
        1,
        [
            TaskSpec(
                id="IMPL-1",
                title="Authentication module",
                type="feature",
                requirements=["JWT access tokens", "Password login"],
                focus_paths=["src/auth", "tests/auth"],
                acceptance=["Login works for a valid user"],
                source="tasks.md:12",
            ),
            TaskSpec(
                id="IMPL-1.1",
                title="JWT signing",
                parent="IMPL-1",
                acceptance=["`src/auth/jwt.py` contains `def sign`", "Tokens expire after 1 h"],
                target_files=["src/auth/jwt.py"],
                pre_analysis=[
                    PreAnalysisStep(
                        step="find_patterns",
                        action="Find how secrets are read",
                        command="bash(rg -n 'SECRET' src)",
                        output_to="patterns",
                        on_error="skip_optional",
                    )
                ],
                implementation_approach=["Add sign() and verify() following [patterns]"],
            ),
            TaskSpec(
                id="IMPL-1.2",
                title="Login endpoint",
                parent="IMPL-1",
                depends_on=["IMPL-1.1"],
                agent="@code-developer",
            ),
            TaskSpec(
                id="IMPL-2",
                title="Write the API docs",
                depends_on=["IMPL-1"],
                description="Document every endpoint | with examples.",
            ),
            TaskSpec(id="IMPL-3", title="Rate limiting", type="feature", optional=True),
        ],
        at(0),
    )
    board.apply_start(StartTask(agent="claude-1", task="IMPL-1.1"), 1, at(5), [])
    done = CompleteTask(
        agent="claude-1",
        task="IMPL-1.1",
        summary="Added `sign()` and `verify()` in src/auth/jwt.py (HS256).\n\n- 12 tests",
        evidence={"tests": 12, "files": ["src/auth/jwt.py", "tests/auth/test_jwt.py"]},
    )
    checks, lines = criteria.criteria_checks(
        "IMPL-1.1", board.tasks["IMPL-1.1"].spec.acceptance, None
    )
    verify = [
        VerifyResult(
            name=c.name, kind=c.kind, passed=True, message="found `def sign`", duration_ms=3
        )
        for c in checks
    ]
    assert board.apply_complete(done, 1, at(20), lines, verify).ok
    board.apply_start(StartTask(agent="claude-2", task="IMPL-1.2"), 1, at(21), [])
    board.apply_block(
        BlockTask(agent="claude-3", task="IMPL-3", reason="waiting for\nthe Redis decision"),
        1,
        at(22),
    )
    board.apply_add_subtask(
        AddSubtask(
            agent="claude-2", parent="IMPL-1", title="Refresh tokens", depends_on=["IMPL-1.1"]
        ),
        1,
        at(23),
    )
    return board


def sample_source(board: TaskBoard | None = None) -> TaskFilesSource:
    return TaskFilesSource(
        session_id="sess-7f3a",
        workflow_type="spec_execution_v1",
        name="Login with JWT",
        description="Users log in with a password and get a JWT.",
        target="/work/project",
        folder=".workflow/WFS-login-with-jwt",
        status="active",
        current_phase=1,
        total_phases=3,
        phases=[
            PhaseLine(index=0, label="Phase 0", name="Analysis", status="completed"),
            PhaseLine(index=1, label="Phase 1", name="Build", status="current"),
            PhaseLine(index=2, label="Phase 2", name="Ship", status="pending"),
        ],
        board=board or sample_board(),
        started_at=T0,
        updated_at=at(23),
    )


def expected_files() -> dict[str, str]:
    return {
        p.relative_to(EXPECTED).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(EXPECTED.rglob("*"))
        if p.is_file()
    }


# --------------------------------------------------------------------------- golden


def test_rendered_files_match_the_expected_files() -> None:
    files = render_files(sample_source())
    if os.environ.get("PHASEGATE_UPDATE_GOLDEN"):
        for rel, text in files.items():
            (EXPECTED / rel).parent.mkdir(parents=True, exist_ok=True)
            (EXPECTED / rel).write_text(text, encoding="utf-8")
    expected = expected_files()
    assert sorted(files) == sorted(expected)
    for rel, text in files.items():
        assert text == expected[rel], f"{rel} differs from tests/fixtures/projection/expected"


def test_rendering_is_deterministic_and_survives_the_query_round_trip() -> None:
    src = sample_source()
    through_json = TaskFilesSource.model_validate_json(src.model_dump_json())
    assert render_files(src) == render_files(through_json) == render_files(sample_source())
    assert list(render_files(src)) == list(render_files(through_json))  # board order


def test_every_file_is_well_formed() -> None:
    files = render_files(sample_source())
    assert all(text.endswith("\n") and is_view_path(rel) for rel, text in files.items())
    for rel, text in files.items():
        if rel.endswith(".json"):
            assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n"
    task = json.loads(files[".task/IMPL-1.1.json"])
    assert list(task)[:6] == ["id", "title", "status", "meta", "context", "flow_control"]
    assert task["meta"] == {"type": "feature", "agent": "@code-developer"}
    assert task["context"]["parent"] == "IMPL-1"
    step = task["flow_control"]["implementation_approach"][0]
    assert set(step) == {
        "step",
        "title",
        "description",
        "modification_points",
        "logic_flow",
        "depends_on",
        "output",
    }
    assert json.loads(files[".task/IMPL-1.json"])["status"] == "container"
    assert json.loads(files[".task/IMPL-2.json"])["meta"]["agent"] == "@doc-generator"
    assert json.loads(files[".task/IMPL-2.json"])["phasegate"]["waiting_for"] == ["IMPL-1"]
    assert set(files) >= {".summaries/IMPL-1.1-summary.md", "TODO_LIST.md", "IMPL_PLAN.md"}
    assert not any(rel.startswith(".summaries/") and "1.1" not in rel for rel in files)


_TODO_LINE = re.compile(
    r"(?:  )?(?:▸ |- \[[ x]\] )\*\*(?P<id>[\w.-]+)\*\*: .+ → \[📋\]\(\./\.task/(?P=id)\.json\)"
    r"(?: \| \[✅\]\(\./\.summaries/(?P=id)-summary\.md\))?.*"
)


def test_todo_list_follows_the_documented_line_grammar() -> None:
    todo = render_files(sample_source())["TODO_LIST.md"]
    tasks = [line for line in todo.splitlines() if "[📋]" in line]
    assert len(tasks) == 6 and all(_TODO_LINE.fullmatch(line) for line in tasks)
    assert tasks[0].startswith("▸ **IMPL-1**") and tasks[1].startswith("  - [x] **IMPL-1.1**")
    assert "| [✅](./.summaries/IMPL-1.1-summary.md)" in tasks[1]
    assert "— active (claude-2)" in tasks[2] and "— blocked: waiting for the Redis decision" in todo
    assert todo.startswith("# Tasks: Login with JWT\n\n## Task Progress\n")


def test_an_empty_board_and_a_completed_session() -> None:
    src = sample_source(TaskBoard()).model_copy(update={"status": "completed", "phases": []})
    files = render_files(src)
    assert sorted(files) == ["IMPL_PLAN.md", "TODO_LIST.md", "workflow-session.json"]
    assert "_No tasks yet._" in files["TODO_LIST.md"]
    session = json.loads(files["workflow-session.json"])
    assert session["status"] == "completed" and session["phasegate"]["status"] == "completed"


def test_renamed_task_ids_get_their_own_files() -> None:
    board = TaskBoard()
    board.enter_phase(1, [TaskSpec(id="IMPL-1", title="one")], T0)
    board.enter_phase(2, [TaskSpec(id="IMPL-1", title="same id, next phase")], T0)
    files = render_files(sample_source(board))
    assert ".task/P2-IMPL-1.json" in files and "(./.task/P2-IMPL-1.json)" in files["TODO_LIST.md"]
    assert json.loads(files[".task/P2-IMPL-1.json"])["id"] == "P2-IMPL-1"


# --------------------------------------------------------------------------- real task files

REAL_TASKS = [
    "shallot98__Save-Restricted-Bot__web-refactor-bugfix/.workflow/active/WFS-web-refactor-bugfix/.task/IMPL-1.1.json",
    "yunzaibo__SYNAPSE__p3-event-driven/.workflow/archives/WFS-synapse-p3-event-driven/.task/IMPL-001.json",
    "Rorschach3__credit-clarity__active-and-archived/.workflow/archives/WFS-brainstorm-for-a-prd/.task/IMPL-002.json",
    "zzq12345-cq__AI-Ideological-and-Political-Education-Teaching-System__three-sessions/.workflow/WFS-notification-system/.task/IMPL-3.json",
]


@pytest.mark.parametrize("path", REAL_TASKS, ids=lambda p: p.split("/")[0])
def test_imported_task_files_keep_the_fields_phasegate_does_not_model(path: str) -> None:
    original = json.loads((REAL / path).read_text(encoding="utf-8"))
    spec = TaskSpec(id=original["id"], title=original["title"][:300], raw=original)
    board = TaskBoard()
    board.enter_phase(1, [spec], T0)
    board.apply_start(StartTask(agent="claude-1", task=spec.id), 1, at(1), [])
    board.apply_block(BlockTask(agent="claude-1", task=spec.id, reason="needs review"), 1, at(2))
    files = render_files(sample_source(board))
    written = json.loads(files[f".task/{spec.id}.json"])
    assert (
        written["status"] == "blocked" and written["phasegate"]["blocked_reason"] == "needs review"
    )
    assert list(written) == [*original, *(["phasegate"] if "phasegate" not in original else [])]
    for key, value in original.items():
        if key != "status":
            assert written[key] == value, key
    again = TaskSpec(id=spec.id, title=spec.title, raw=written)  # projected, then re-imported
    board.tasks[spec.id].spec = again
    assert (
        render_files(sample_source(board))[f".task/{spec.id}.json"]
        == files[f".task/{spec.id}.json"]
    )


# --------------------------------------------------------------------------- small parts


@pytest.mark.parametrize(
    ("folder", "ok"),
    [
        (".workflow/WFS-login", True),
        (".workflow/WFS-2026-03-19-001", True),
        (".workflow/WFS-P3_event", True),
        (".workflow/WFS-" + "a" * 46, True),
        (".workflow/WFS-" + "a" * 47, False),
        (".workflow/WFS-../etc", False),
        (".workflow/WFS-x/..", False),
        (".workflow/active/WFS-x", False),
        ("/tmp/.workflow/WFS-x", False),
        ("WFS-x", False),
        (".workflow/WFS-", False),
        (".workflow/wfs-x", False),
    ],
)
def test_only_wfs_folders_are_task_folders(folder: str, ok: bool) -> None:
    assert (check_folder(folder) is None) is ok


def test_view_paths_and_session_ids() -> None:
    assert is_view_path(".task/IMPL-1.2.json") and is_view_path(".summaries/IMPL-1-summary.md")
    for bad in ("../x.json", ".task/../../x.json", ".task/a/b.json", "notes.md", ".process/x.json"):
        assert not is_view_path(bad)
    assert session_id_of({"session_id": "WFS-x", "phasegate": {"session_id": "s-1"}}) == "s-1"
    assert session_id_of({"session_id": "WFS-x"}) == "WFS-x"
    assert session_id_of([]) is None and session_id_of({"session_id": ""}) is None


# --------------------------------------------------------------------------- markers, doctor


def project(root: Path, src: TaskFilesSource) -> dict[str, str]:
    """Write the files as the activity would (plain writes: the activity has its own tests)."""
    hashes = {}
    for rel, text in render_files(src).items():
        path = root / src.folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        hashes[rel] = digest(text.encode("utf-8"))
    return hashes


def marker(root: Path, name: str, content: str = "", mtime: float = 1e9) -> Path:
    path = root / ".workflow" / f".active-{name}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    os.utime(path, (mtime, mtime))
    return path


def test_markers_name_their_session_and_the_newest_wins(tmp_path: Path) -> None:
    (tmp_path / ".workflow" / "WFS-ccw-only").mkdir(parents=True)
    (tmp_path / ".workflow" / "WFS-ccw-only" / "workflow-session.json").write_text(
        '{"session_id": "WFS-ccw-only"}'
    )
    project(tmp_path, sample_source())
    marker(tmp_path, "WFS-ccw-only", "", mtime=1e9)
    marker(tmp_path, "WFS-login-with-jwt", "", mtime=2e9)  # empty: read from the folder's json
    found = tm.find_markers(tmp_path)
    assert [(m.folder, m.session_id) for m in found] == [
        (".workflow/WFS-login-with-jwt", "sess-7f3a"),
        (".workflow/WFS-ccw-only", "WFS-ccw-only"),
    ]
    assert tm.active_session(tmp_path) == ("sess-7f3a", ".workflow/WFS-login-with-jwt")
    path = tm.use_session(tmp_path, "WFS-ccw-only", "other-session")
    assert path.read_text() == "other-session\n"
    assert [m.path.name for m in tm.find_markers(tmp_path)] == [".active-WFS-ccw-only"]
    assert tm.active_session(tmp_path) == ("other-session", ".workflow/WFS-ccw-only")
    assert tm.active_session(tmp_path / "nowhere") is None


def test_use_session_refuses_what_is_not_a_task_folder_or_a_linked_workflow_dir(
    tmp_path: Path,
) -> None:
    with pytest.raises(Exception, match="not a task folder"):
        tm.use_session(tmp_path, "../../etc", "s")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / ".workflow").symlink_to(outside)
    with pytest.raises(Exception, match="symbolic link"):
        tm.use_session(tmp_path / "p", "WFS-x", "s")
    assert list(outside.iterdir()) == []


def test_real_folders_markers_are_found(tmp_path: Path) -> None:
    root = (
        REAL / "zzq12345-cq__AI-Ideological-and-Political-Education-Teaching-System__three-sessions"
    )
    names = {m.folder: m.session_id for m in tm.find_markers(root)}
    assert names == {
        ".workflow/WFS-notification-system": "WFS-notification-system",
        ".workflow/WFS-teacher-lesson-workflow": "WFS-teacher-lesson-workflow",
    }


def doctor_case(tmp_path: Path) -> dict[str, tm.SessionInfo]:
    src = sample_source().model_copy(update={"target": str(tmp_path)})
    hashes = project(tmp_path, src)
    marker(tmp_path, "WFS-login-with-jwt", "sess-7f3a\n", mtime=3e9)
    marker(tmp_path, "WFS-older", "sess-old\n", mtime=2e9)  # a live session, older marker
    (tmp_path / ".workflow" / "WFS-older").mkdir()
    marker(tmp_path, "WFS-gone", "sess-gone\n", mtime=4e9)  # its folder is gone
    marker(tmp_path, "WFS-ended", "sess-ended\n", mtime=5e9)
    (tmp_path / ".workflow" / "WFS-ended").mkdir()
    infos = {
        "sess-7f3a": tm.SessionInfo(
            "sess-7f3a", folder=src.folder, target=str(tmp_path), hashes=hashes
        ),
        "sess-old": tm.SessionInfo("sess-old"),
        "sess-ended": tm.SessionInfo("sess-ended", open=False, status="completed"),
    }
    return infos


def test_doctor_finds_each_problem_and_fixes_it(tmp_path: Path) -> None:
    infos = doctor_case(tmp_path)
    base = tmp_path / ".workflow" / "WFS-login-with-jwt"
    (base / "TODO_LIST.md").write_text("# my own list\n")
    (base / ".task" / "IMPL-2.json").unlink()
    (base / ".task" / "IMPL-3.json").write_text('{"id": "IMPL-3", ')
    assert set(tm.session_ids(tmp_path)) == {"sess-7f3a", "sess-old", "sess-ended", "sess-gone"}
    findings = tm.doctor(tmp_path, infos.get)
    kinds = {(f.kind, f.session_id) for f in findings}
    assert kinds == {
        ("orphaned_marker", "sess-gone"),
        ("orphaned_marker", "sess-ended"),
        ("extra_marker", "sess-old"),
        ("view_missing", "sess-7f3a"),
        ("view_corrupt", "sess-7f3a"),
        ("view_edited", "sess-7f3a"),
    }
    assert all("\n" not in f.message and f.fix for f in findings)
    asked: list[str] = []

    async def reproject(session_id: str) -> None:
        asked.append(session_id)
        project(tmp_path, sample_source())  # what the session's projection does

    fixed = asyncio.run(tm.fix(tmp_path, findings, reproject))
    assert all(f.fixed for f in fixed) and asked == ["sess-7f3a"]
    assert [m.path.name for m in tm.find_markers(tmp_path)] == [".active-WFS-login-with-jwt"]
    assert tm.doctor(tmp_path, infos.get) == []


def test_doctor_leaves_claude_code_workflow_markers_alone(tmp_path: Path) -> None:
    (tmp_path / ".workflow" / "WFS-theirs").mkdir(parents=True)
    (tmp_path / ".workflow" / "WFS-theirs" / "workflow-session.json").write_text(
        '{"session_id": "WFS-theirs"}'
    )
    marker(tmp_path, "WFS-theirs")
    marker(tmp_path, "WFS-blank")
    (tmp_path / ".workflow" / "WFS-blank").mkdir()
    findings = tm.doctor(tmp_path, lambda _id: None)
    assert [(f.kind, f.fixable) for f in findings] == [("unnamed_marker", False)]
    assert [f.fixed for f in asyncio.run(tm.fix(tmp_path, findings, _never))] == [False]
    assert len(tm.find_markers(tmp_path)) == 2


async def _never(session_id: str) -> Any:
    raise AssertionError(session_id)


def test_session_current_and_the_commands_parse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from phasegate.client.cli._common import Parser

    parser = Parser(prog="phasegate")
    tm.register(parser.add_subparsers(dest="command", parser_class=Parser))
    args = parser.parse_args(["session", "current", "--root", str(tmp_path), "--json"])
    assert args.func(args, None) == 1 and "no active session" in capsys.readouterr().err
    (tmp_path / ".workflow" / "WFS-x").mkdir(parents=True)
    tm.use_session(tmp_path, ".workflow/WFS-x", "sess-1")
    assert args.func(args, None) == 0
    assert json.loads(capsys.readouterr().out) == {
        "session_id": "sess-1",
        "folder": ".workflow/WFS-x",
    }
    assert parser.parse_args(["doctor", "--fix"]).fix
    assert parser.parse_args(["session", "use", "WFS-x"]).session == "WFS-x"
