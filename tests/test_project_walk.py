"""A real spec-kit project (a git repository with a package, its tests and a spec folder:
spec.md, plan.md, data-model.md, contracts/, tasks.md) walked through spec_execution_v1
the way a coding agent would (issue 18): the engine runs the project's tests at every
phase that claims them, a spec that names another command shows it in phase 0 and runs
it only after the lead's signed approval, and a worker with a command list refuses the
rest. No stubs: a real dev server, a real worker, real pytest runs in the workspace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import ApprovalRefused, PhasegateError
from phasegate.domain.session.messages import PhaseView, SessionOptions

PROJECT = Path(__file__).resolve().parent / "fixtures" / "projects" / "todo-store"
SPEC = "specs/001-todo-store"

TESTS = """\
import pytest

from todo.store import TodoStore


def test_add_gives_increasing_ids():
    store = TodoStore()
    assert [store.add("milk").id, store.add("eggs").id] == [1, 2]


def test_titles_are_stripped_and_required():
    store = TodoStore()
    assert store.add("  milk ").title == "milk"
    with pytest.raises(ValueError):
        store.add("   ")


def test_complete_hides_a_todo():
    store = TodoStore()
    first, second = store.add("milk"), store.add("eggs")
    store.complete(first.id)
    assert [t.id for t in store.open()] == [second.id]


def test_complete_unknown_raises():
    with pytest.raises(KeyError):
        TodoStore().complete(42)
"""

# What an agent that wrote the tests first commits as its "implementation": a stub.
STUB = """\
from dataclasses import dataclass


@dataclass
class Todo:
    id: int
    title: str
    done: bool = False


class TodoStore:
    def __init__(self):
        self.todos = {}

    def add(self, title):
        todo = Todo(len(self.todos) + 1, title)
        self.todos[todo.id] = todo
        return todo

    def complete(self, todo_id):
        return self.todos[todo_id]

    def open(self):
        return list(self.todos.values())
"""

IMPLEMENTATION = """\
from dataclasses import dataclass


@dataclass
class Todo:
    id: int
    title: str
    done: bool = False


class TodoStore:
    def __init__(self):
        self.todos = {}

    def add(self, title):
        title = title.strip()
        if not title:
            raise ValueError("a todo needs a title")
        todo = Todo(len(self.todos) + 1, title)
        self.todos[todo.id] = todo
        return todo

    def complete(self, todo_id):
        todo = self.todos[todo_id]
        todo.done = True
        return todo

    def open(self):
        return [t for t in self.todos.values() if not t.done]
"""


def _project(tmp_path: Path, name: str = "todo-store") -> Path:
    """The fixture project copied and committed as a git repository."""
    root = tmp_path / name
    shutil.copytree(PROJECT, root)
    git = ["git", "-c", "user.email=dev@example.com", "-c", "user.name=dev"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "spec and skeleton"], cwd=root, check=True)
    return root


def _write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text, encoding="utf-8")


async def _phase_zero(pg: PhasegateClient, sid: str) -> dict[str, Any]:
    """Phase 0 evidence as an agent builds it from the view: counts from the parser, the
    commands copied from the gate (the only value it takes)."""
    view = await pg.phase(sid)
    assert isinstance(view, PhaseView)
    example = view.example_evidence
    assert example is not None
    evidence = dict(example) if isinstance(example, dict) else json.loads(example)
    evidence.update(spec_path=SPEC, phases_found=3, tasks_found=6)
    return evidence


@pytest.fixture
def python_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``python3`` on PATH is this interpreter (it has pytest), as on a developer's machine."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")


async def test_failing_tests_refuse_the_phase_until_the_implementation_passes(
    env, run_worker, settings_for, tmp_path, python_on_path
):
    root = _project(tmp_path)
    settings = settings_for()
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start(
            "spec_execution_v1", str(root), options=SessionOptions(spec_path=str(root / SPEC))
        )
        view = await pg.phase(sid)
        assert isinstance(view, PhaseView)
        # Phase 0 names what will run, who named it, and accepts spec-kit's documents.
        assert "`python3 -m pytest -q` | every phase that claims tests pass" in view.content
        assert "pyproject.toml in the project ([tool.pytest])" in view.content
        assert "spec.md" in view.gate.fields["required_files_present"].description
        evidence0 = await _phase_zero(pg, sid)
        assert evidence0["session_commands"][0].startswith("python3 -m pytest -q  (tests")
        # A typo is named, with the field meant; copying other commands does not pass.
        result = await pg.submit(sid, 0, {**evidence0, "dependencie_valid": True})
        assert result.awaiting_approval
        assert any("did you mean 'dependencies_valid'" in w.message for w in result.warnings)
        await pg.decide(sid, approver="lead", decision="approve", phase=0, comment="ok")

        # Phase 1 (Setup): its checkpoint line `python3 -m pytest -q` runs, as the tests do.
        view1 = await pg.phase(sid)
        assert isinstance(view1, PhaseView) and view1.label == "1"
        assert [t.id for t in view1.tasks] == ["T001", "T002"]
        assert "python_m_pytest" not in str(view1.gate.fields)  # a check, not a claim
        done1 = {
            "tasks_completed": ["T001", "T002"],
            "tests_passing": True,
            "files_changed": ["src/todo/__init__.py", "pyproject.toml"],
            "summary": "Package skeleton and pytest configuration are in place.",
        }
        result = await pg.submit(sid, 1, done1)
        assert result.passed, result.problems
        assert {v.name for v in result.verify} >= {"tests_pass", "checkpoint_1_1"}
        assert all(v.passed for v in result.verify)

        # Phase 2: the agent writes the tests and a stub, and claims the tests pass.
        view2 = result.next_phase
        assert isinstance(view2, PhaseView) and "🎯 MVP" in view2.name
        assert "\\ud83c" not in view2.content and "🎯 MVP" in view2.content
        _write(root, "tests/test_store.py", TESTS)
        _write(root, "src/todo/store.py", STUB)
        claim = {
            "tasks_completed": ["T003", "T004", "T005"],
            "tests_passing": True,
            "files_changed": ["tests/test_store.py", "src/todo/store.py"],
            "summary": "TodoStore with add, complete and open; tests in tests/test_store.py.",
            "user_story_1_is_fully_functional": True,  # the spec's checkpoint, a claim
        }
        assert "user_story_1_is_fully_functional" in view2.gate.fields
        refused = await pg.submit(sid, 2, claim)
        assert not refused.passed
        problem = next(p for p in refused.problems if p.field == "verify:tests_pass")
        assert "exited with 1" in problem.message
        assert "FAILED tests/test_store.py::test_titles_are_stripped_and_required" in (
            problem.message
        )
        assert "FAILED tests/test_store.py::test_complete_hides_a_todo" in problem.message
        assert "2 failed, 3 passed" in problem.message

        # The implementation: the same evidence passes.
        _write(root, "src/todo/store.py", IMPLEMENTATION)
        passed = await pg.submit(sid, 2, claim)
        assert passed.passed, passed.problems
        tests_pass = next(v for v in passed.verify if v.name == "tests_pass")
        assert "5 passed" in tests_pass.message

        # Dependencies written as prose and in the dependency section are read.
        task4 = await pg.task(sid, 2, "T004")
        task5 = await pg.task(sid, 2, "T005")
        assert "`T003` must be complete" in task4.content
        assert "`T004` must be complete" in task5.content


async def test_a_spec_naming_another_command_runs_it_only_after_the_leads_signed_approval(
    env, run_worker, settings_for, tmp_path, python_on_path
):
    root = _project(tmp_path)
    tasks = root / SPEC / "tasks.md"
    text = tasks.read_text(encoding="utf-8").replace(
        "**Checkpoint**: User Story 1 is fully functional and testable independently",
        "**Checkpoint**: `python3 -m pytest -q -k complete` passes",
    )
    tasks.write_text(text, encoding="utf-8")
    lead = keys.new_key("lead", directory=tmp_path / "keys")
    settings = settings_for(
        allow_unsigned_approvals=False, approver_keys_file=lead.model_dump_json()
    )
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        # The agent starts its own session and names `true` as the test command.
        options = SessionOptions(spec_path=str(root / SPEC), test_command="true")
        sid = await pg.start("spec_execution_v1", str(root), options=options)
        view = await pg.phase(sid)
        assert isinstance(view, PhaseView)
        assert "| `true` | every phase that claims tests pass | --test-command" in view.content
        assert "| `python3 -m pytest -q -k complete` | spec phase 2's checkpoint |" in view.content
        evidence = await _phase_zero(pg, sid)
        # Evidence naming other commands than the session's is refused.
        wrong = await pg.submit(sid, 0, {**evidence, "session_commands": ["python3 -m pytest"]})
        assert not wrong.passed
        assert any(p.field == "session_commands" for p in wrong.problems)
        assert (await pg.submit(sid, 0, evidence)).awaiting_approval
        # Without the lead's key the agent cannot get past phase 0 ...
        with pytest.raises(ApprovalRefused):
            await pg.decide(sid, approver="lead", decision="approve", phase=0, comment="me")
        later = await pg.phase(sid, 1)
        assert not isinstance(later, PhaseView)  # phase 1 stays unreadable
        # ... the lead, who read the commands in phase 0, approves with a signature.
        await pg.decide(
            sid,
            decision="approve",
            comment="commands read",
            as_key="lead",
            key_dir=tmp_path / "keys",
        )
        assert (await pg.status(sid)).current_phase == 1
        # The spec's command runs at its phase (after phase 1, which runs only `true`).
        done1 = {
            "tasks_completed": ["T001", "T002"],
            "tests_passing": True,
            "files_changed": ["pyproject.toml"],
            "summary": "Package skeleton and pytest configuration are in place.",
        }
        first = await pg.submit(sid, 1, done1)
        assert first.passed, first.problems
        assert any(
            v.name == "tests_pass" and "`true` exited with 0" in v.message for v in first.verify
        )
        _write(root, "tests/test_store.py", TESTS)
        _write(root, "src/todo/store.py", STUB)
        claim = {
            "tasks_completed": ["T003", "T004", "T005"],
            "tests_passing": True,
            "files_changed": ["tests/test_store.py", "src/todo/store.py"],
            "summary": "TodoStore with add, complete and open; tests in tests/test_store.py.",
        }
        refused = await pg.submit(sid, 2, claim)
        checkpoint = next(v for v in refused.verify if v.name == "checkpoint_2_1")
        assert not checkpoint.passed and "-k complete" in checkpoint.message
        assert "1 failed, 1 passed" in checkpoint.message


async def test_a_worker_with_a_command_list_refuses_other_commands(
    env, run_worker, settings_for, tmp_path
):
    root = _project(tmp_path)
    settings = settings_for(allowed_commands=["python3 -m pytest -q"])
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        options = SessionOptions(spec_path=str(root / SPEC), test_command="make test")
        with pytest.raises(PhasegateError) as refused:
            await pg.start("spec_execution_v1", str(root), options=options)
        assert "`make test` is not on this deployment's list of allowed commands" in str(
            refused.value
        )
        assert "PHASEGATE_ALLOWED_COMMANDS" in str(refused.value)
        # The listed command is fine (found in pyproject.toml).
        ok = SessionOptions(spec_path=str(root / SPEC))
        sid = await pg.start("spec_execution_v1", str(root), options=ok)
        assert (await pg.status(sid)).current_phase == 0


def test_the_verify_worker_refuses_a_command_off_its_list(tmp_path):
    """A check scheduled with another argv (e.g. by a foreign workflow) is not run."""
    from phasegate.activities.verify import VerifyActivities
    from phasegate.domain.verify import VerifyRequest, parse_checks

    marker = tmp_path / "ran"
    checks = parse_checks([{"kind": "command", "argv": ["touch", str(marker)]}], source="forged")
    acts = VerifyActivities(allowed_commands=[["python3", "-m", "pytest", "-q"]])
    report = acts.run_verify_checks(VerifyRequest(workspace=str(tmp_path), checks=checks))
    assert not report.passed and not marker.exists()
    assert "not on this worker's list of allowed commands" in report.results[0].message
