"""``verify`` checks on real workspaces: real files, a real git repo, real processes.

No Temporal server and no mocks: the activity method is called directly (and
once through ``ActivityEnvironment`` to see its heartbeats).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from phasegate.activities.verify import VerifyActivities
from phasegate.domain.verify import (
    VerifyReport,
    VerifyRequest,
    excerpt,
)

PY = sys.executable


def verify(
    workspace: Path, checks: list[dict[str, Any]], evidence: dict[str, Any] | None = None, **kw: Any
) -> VerifyReport:
    req = VerifyRequest(workspace=str(workspace), checks=checks, evidence=evidence or {}, **kw)
    return VerifyActivities().run_verify_checks(req)


def one(workspace: Path, check: dict[str, Any], evidence: dict[str, Any] | None = None, **kw: Any):
    report = verify(workspace, [check], evidence, **kw)
    assert len(report.results) == 1
    assert report.passed is report.results[0].passed
    return report.results[0]


# --------------------------------------------------------------------------- command


def test_command_passes_and_captures_output(tmp_path: Path) -> None:
    r = one(tmp_path, {"kind": "command", "argv": [PY, "-c", "print('hello')"]})
    assert r.passed and r.exit_code == 0 and r.kind == "command" and r.name == "command_1"
    assert "hello" in r.excerpt and r.duration_ms >= 0


def test_command_exit_code_mismatch_fails(tmp_path: Path) -> None:
    r = one(
        tmp_path, {"kind": "command", "argv": [PY, "-c", "import sys; print('boom'); sys.exit(3)"]}
    )
    assert not r.passed and r.exit_code == 3
    assert "exited with 3, expected exit code 0" in r.message and "boom" in r.excerpt
    r = one(
        tmp_path, {"kind": "command", "argv": [PY, "-c", "raise SystemExit(3)"], "expect_exit": 3}
    )
    assert r.passed


def test_command_stdout_pattern_and_stderr(tmp_path: Path) -> None:
    code = "import sys; print('out'); print('coverage: 91%', file=sys.stderr)"
    check = {"kind": "command", "argv": [PY, "-c", code], "stdout_pattern": r"coverage: \d+%"}
    assert one(tmp_path, check).passed
    r = one(tmp_path, {**check, "stdout_pattern": "all green"})
    assert not r.passed and "no match for /all green/" in r.message and "out" in r.excerpt


def test_command_cwd_and_env(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    code = "import os; print(os.getcwd()); print(os.environ['PG_FLAG'])"
    check = {"kind": "command", "argv": [PY, "-c", code], "cwd": "sub", "env": {"PG_FLAG": "on"}}
    r = one(tmp_path, check)
    assert r.passed and str(tmp_path / "sub") in r.excerpt and "on" in r.excerpt


def test_command_not_found_is_a_failed_check(tmp_path: Path) -> None:
    r = one(tmp_path, {"kind": "command", "argv": ["definitely-not-a-program-xyz", "--x"]})
    assert not r.passed and r.message == "command not found: definitely-not-a-program-xyz"


def test_real_pytest_run_passes(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    check = {"kind": "command", "argv": [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]}
    r = one(tmp_path, {**check, "stdout_pattern": r"\b1 passed\b"})
    assert r.passed, r.message + r.excerpt


def test_phantom_completion_is_caught_with_the_failing_assertion(tmp_path: Path) -> None:
    """Evidence says the tests pass; the real run says otherwise, with the output."""
    (tmp_path / "test_math.py").write_text(
        "def test_ok():\n    assert True\n\n"
        "def test_sum():\n    total = 1 + 1\n    assert total == 3, 'sum is wrong'\n"
    )
    argv = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_math.py"]
    evidence = {"tests_passed": True, "test_count": 2}
    report = verify(tmp_path, [{"kind": "command", "name": "tests", "argv": argv}], evidence)
    r = report.results[0]
    assert not report.passed and not r.passed and r.exit_code == 1
    assert "exited with 1" in r.message
    assert "assert total == 3" in r.excerpt and "sum is wrong" in r.excerpt
    assert "1 failed" in r.excerpt


def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(30)\n"
    )
    start = time.monotonic()
    r = one(tmp_path, {"kind": "command", "argv": [PY, "-c", code], "timeout_seconds": 1})
    elapsed = time.monotonic() - start
    assert not r.passed and "timed out after 1s" in r.message and r.exit_code is None
    assert "started" in r.excerpt
    assert elapsed < 5
    assert 900 <= r.duration_ms < 5000
    _assert_dead(int((tmp_path / "child.pid").read_text()))


def test_plain_sleep_timeout(tmp_path: Path) -> None:
    start = time.monotonic()
    check = {"kind": "command", "argv": [PY, "-c", "import time; time.sleep(30)"]}
    r = one(tmp_path, {**check, "timeout_seconds": 1})
    assert not r.passed and "timed out" in r.message and time.monotonic() - start < 5


def test_background_children_do_not_outlive_the_check(tmp_path: Path) -> None:
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
    )
    start = time.monotonic()
    r = one(tmp_path, {"kind": "command", "argv": [PY, "-c", code]})
    assert r.passed and time.monotonic() - start < 10
    _assert_dead(int((tmp_path / "child.pid").read_text()))


def _assert_dead(pid: int) -> None:
    """Gone, or a zombie waiting for its reaper (killed either way)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    pytest.fail(f"process {pid} still running (state {state})")


@pytest.mark.parametrize("payload", ["x; touch pwned", "$(touch pwned2)", "`touch pwned3` | cat"])
def test_evidence_cannot_inject_shell(tmp_path: Path, payload: str) -> None:
    code = "import sys; print(repr(sys.argv[1:]))"
    check = {"kind": "command", "argv": [PY, "-c", code, "{{ evidence.name }}"]}
    r = one(tmp_path, check, {"name": payload})
    assert r.passed
    assert r.excerpt.strip() == repr([payload])
    assert not list(tmp_path.glob("pwned*")) and not list(Path.cwd().glob("pwned*"))


def test_evidence_is_text_inside_one_argument(tmp_path: Path) -> None:
    code = "import sys; print(repr(sys.argv[1:]))"
    check = {
        "kind": "command",
        "argv": [PY, "-c", code, "--name={{ evidence.name }}!", "{{ session.id }}"],
    }
    r = one(tmp_path, check, {"name": "a b  c"}, session_id="s-1")
    assert r.excerpt.strip() == repr(["--name=a b  c!", "s-1"])
    r = one(tmp_path, check, {"name": 12.5}, session_id="s-1")
    assert r.excerpt.strip() == repr(["--name=12.5!", "s-1"])


def test_missing_evidence_fails_the_check(tmp_path: Path) -> None:
    check = {"kind": "command", "argv": [PY, "-c", "pass", "{{ evidence.name }}"]}
    for evidence in ({}, {"name": None}, {"name": ""}):
        r = one(tmp_path, check, evidence)
        assert not r.passed
        assert r.message == "argv[3] needs evidence.name, which is missing or empty"
    r = one(tmp_path, {"kind": "file_exists", "path": "{{ session.target }}"})
    assert not r.passed and "session.target" in r.message


def test_checks_come_only_from_the_definition(tmp_path: Path) -> None:
    """An evidence key named like a check field changes nothing that runs."""
    check = {"kind": "command", "argv": [PY, "-c", "print('from the definition')"]}
    evidence = {
        "argv": [PY, "-c", "open('evil', 'w').write('x')"],
        "checks": [{"kind": "command", "argv": ["touch", "evil2"]}],
        "cwd": "/",
        "kind": "command",
    }
    report = verify(tmp_path, [check], evidence)
    assert report.passed and len(report.results) == 1
    assert report.results[0].excerpt.strip() == "from the definition"
    assert not (tmp_path / "evil").exists() and not (tmp_path / "evil2").exists()


def test_stdout_pattern_matches_evidence_literally(tmp_path: Path) -> None:
    check = {
        "kind": "command",
        "argv": [PY, "-c", "print('version 1x2')"],
        "stdout_pattern": r"version {{ evidence.v }}\b",
    }
    assert not one(tmp_path, check, {"v": "1.2"}).passed  # "." is not a wildcard here
    assert one(tmp_path, check, {"v": "1x2"}).passed


def test_in_activity_context_heartbeats(tmp_path: Path) -> None:
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    req = VerifyRequest(
        workspace=str(tmp_path),
        checks=[{"kind": "command", "argv": [PY, "-c", "import time; time.sleep(2.5)"]}],
        evidence={},
    )
    report = env.run(VerifyActivities().run_verify_checks, req)
    assert report.passed
    assert any("command" in (d[0] if d else {}) for d in beats), beats


def test_cancellation_kills_the_command(tmp_path: Path) -> None:
    """Temporal raises CancelledError into the activity thread; the group still dies."""
    env = ActivityEnvironment()
    code = "import os, time; open('pid', 'w').write(str(os.getpid())); time.sleep(30)"
    req = VerifyRequest(
        workspace=str(tmp_path), checks=[{"kind": "command", "argv": [PY, "-c", code]}]
    )
    outcome: list[BaseException | VerifyReport] = []

    def target() -> None:
        try:
            outcome.append(env.run(VerifyActivities().run_verify_checks, req))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    for _ in range(100):
        if (tmp_path / "pid").exists() and (tmp_path / "pid").read_text():
            break
        time.sleep(0.05)
    env.cancel()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert isinstance(outcome[0], CancelledError), outcome
    _assert_dead(int((tmp_path / "pid").read_text()))


# --------------------------------------------------------------------------- files


def test_file_exists(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "design.md").write_text("# Design\n")
    assert one(tmp_path, {"kind": "file_exists", "path": "docs/design.md"}).passed
    r = one(tmp_path, {"kind": "file_exists", "path": "docs/missing.md"})
    assert not r.passed and r.message == "docs/missing.md does not exist; expected a file there"
    r = one(tmp_path, {"kind": "file_exists", "path": "docs"})
    assert not r.passed and "is a directory" in r.message
    check = {"kind": "file_exists", "path": "docs/{{ evidence.doc }}"}
    assert one(tmp_path, check, {"doc": "design.md"}).passed


def test_glob_count(tmp_path: Path) -> None:
    for name in ("tests/test_a.py", "tests/test_b.py", "tests/sub/test_c.py", "tests/helper.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    r = one(tmp_path, {"kind": "glob_count", "pattern": "tests/**/test_*.py", "min": 3})
    assert r.passed and "3 file(s)" in r.message and "tests/sub/test_c.py" in r.excerpt
    r = one(tmp_path, {"kind": "glob_count", "pattern": "tests/**/test_*.py", "min": 4})
    assert not r.passed and r.message == "3 file(s) match 'tests/**/test_*.py'; expected at least 4"
    r = one(tmp_path, {"kind": "glob_count", "pattern": "tests/*.py", "max": 1})
    assert not r.passed and "expected at most 1" in r.message
    r = one(tmp_path, {"kind": "glob_count", "pattern": "src/*.py"})  # no bounds: at least one
    assert not r.passed and "0 file(s)" in r.message and "at least 1" in r.message
    assert one(tmp_path, {"kind": "glob_count", "pattern": "src/*.py", "max": 0}).passed


def test_glob_evidence_is_literal(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    check = {"kind": "glob_count", "pattern": "{{ evidence.name }}"}
    assert not one(tmp_path, check, {"name": "*.py"}).passed
    assert one(tmp_path, check, {"name": "a.py"}).passed


def test_file_contains(tmp_path: Path) -> None:
    (tmp_path / "CHANGELOG.md").write_bytes(b"# Changes\n\n## 1.4.0\n- added \xff verify\n")
    r = one(tmp_path, {"kind": "file_contains", "path": "CHANGELOG.md", "pattern": r"^## 1\.4\.0$"})
    assert r.passed and "line 3" in r.message
    r = one(tmp_path, {"kind": "file_contains", "path": "CHANGELOG.md", "pattern": "2.0.0"})
    assert not r.passed and "no match" in r.message
    r = one(tmp_path, {"kind": "file_contains", "path": "NOPE.md", "pattern": "x"})
    assert not r.passed and "NOPE.md does not exist" in r.message
    check = {
        "kind": "file_contains",
        "path": "CHANGELOG.md",
        "pattern": "## {{ evidence.version }}",
    }
    assert one(tmp_path, check, {"version": "1.4.0"}).passed
    assert not one(tmp_path, check, {"version": "1.4.*"}).passed  # literal, not a regex


def test_json_value(tmp_path: Path) -> None:
    data = {"totals": {"percent_covered": 87.5, "files": 12}, "runs": [{"ok": True}], "tag": "v1"}
    (tmp_path / "coverage.json").write_text(json.dumps(data))
    base = {"kind": "json_value", "path": "coverage.json"}
    assert one(
        tmp_path, {**base, "field": "totals.percent_covered", "op": ">=", "value": 80}
    ).passed
    r = one(tmp_path, {**base, "field": "totals.percent_covered", "op": ">=", "value": 90})
    assert not r.passed and "87.5" in r.message and ">= 90" in r.message
    assert one(tmp_path, {**base, "field": "runs.0.ok", "value": True}).passed
    assert one(tmp_path, {**base, "field": "tag", "op": "!=", "value": "v2"}).passed
    assert one(
        tmp_path, {**base, "field": "totals.files", "value": "{{ evidence.n }}"}, {"n": 12}
    ).passed
    r = one(tmp_path, {**base, "field": "totals.missing", "value": 1})
    assert not r.passed and "has no key 'missing'" in r.message and "percent_covered" in r.message
    r = one(tmp_path, {**base, "field": "runs.3.ok", "value": 1})
    assert not r.passed and "no index 3" in r.message
    r = one(tmp_path, {**base, "field": "tag", "op": ">", "value": 1})
    assert not r.passed and "cannot be compared" in r.message
    r = one(tmp_path, {"kind": "json_value", "path": "none.json", "field": "a"})
    assert not r.passed and "does not exist" in r.message
    (tmp_path / "bad.json").write_text("{not json")
    r = one(tmp_path, {"kind": "json_value", "path": "bad.json", "field": "a"})
    assert not r.passed and "not valid JSON" in r.message


def test_json_value_against_evidence(tmp_path: Path) -> None:
    (tmp_path / "coverage.json").write_text('{"totals": {"percent_covered": 72.0}}')
    check = {"kind": "json_value", "path": "coverage.json", "field": "totals.percent_covered",
             "op": ">=", "evidence_field": "coverage"}  # fmt: skip
    r = one(tmp_path, check, {"coverage": 85})  # the agent claims 85 %, the report says 72 %
    assert not r.passed and "evidence.coverage" in r.message
    assert one(tmp_path, check, {"coverage": "70"}).passed
    r = one(tmp_path, check, {})
    assert not r.passed and "evidence field 'coverage' is missing" in r.message


# --------------------------------------------------------------------------- paths


def test_paths_cannot_escape_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    (ws / "link.txt").symlink_to(tmp_path / "secret.txt")
    (ws / "linkdir").symlink_to(tmp_path)
    for check in (
        {"kind": "file_exists", "path": "../secret.txt"},
        {"kind": "file_exists", "path": str(tmp_path / "secret.txt")},
        {"kind": "file_contains", "path": "link.txt", "pattern": "secret"},
        {"kind": "file_contains", "path": "linkdir/secret.txt", "pattern": "secret"},
        {"kind": "json_value", "path": "/etc/passwd", "field": "x"},
        {"kind": "command", "argv": [PY, "-c", "pass"], "cwd": ".."},
        {"kind": "glob_count", "pattern": "../*.txt"},
        {"kind": "glob_count", "pattern": "/etc/*"},
    ):
        r = one(ws, check)
        assert not r.passed, check
        assert "outside the workspace" in r.message or "leaves the workspace" in r.message, (
            r.message
        )
        assert "top secret" not in r.excerpt
    r = one(ws, {"kind": "file_exists", "path": "{{ evidence.p }}"}, {"p": "../secret.txt"})
    assert not r.passed and "outside the workspace" in r.message
    r = one(ws, {"kind": "glob_count", "pattern": "*.txt"})  # the link points outside
    assert not r.passed and "not counted" in r.message
    (ws / "inside.txt").write_text("ok")
    (ws / "ok_link.txt").symlink_to(ws / "inside.txt")
    assert one(ws, {"kind": "file_exists", "path": "ok_link.txt"}).passed
    assert one(ws, {"kind": "file_exists", "path": str(ws / "inside.txt")}).passed


# --------------------------------------------------------------------------- git


def git(repo: Path, *args: str) -> str:
    ident = ["-c", "user.email=ci@example.com", "-c", "user.name=CI", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        ["git", *ident, *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    git(tmp_path, "init", "-q")
    (tmp_path / "README.md").write_text("hello\n")
    (tmp_path / ".gitignore").write_text("build/\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "base")
    return tmp_path, git(tmp_path, "rev-parse", "HEAD")


def test_git_changed_without_changes_fails(repo: tuple[Path, str]) -> None:
    path, base = repo
    (path / "build").mkdir()
    (path / "build" / "out.bin").write_text("ignored")
    r = one(path, {"kind": "git_changed"}, base_commit=base)
    assert not r.passed and r.message.startswith("0 file(s) changed under . since")
    assert "expected at least 1" in r.message


def test_git_changed_counts_committed_staged_and_untracked(repo: tuple[Path, str]) -> None:
    path, base = repo
    (path / "src").mkdir()
    (path / "src" / "a.py").write_text("a = 1\n")
    git(path, "add", "src/a.py")
    git(path, "commit", "-q", "-m", "a")
    (path / "src" / "b.py").write_text("b = 1\n")
    git(path, "add", "src/b.py")  # staged
    (path / "src" / "c.py").write_text("c = 1\n")  # untracked
    (path / "README.md").write_text("changed\n")  # modified, outside src
    r = one(path, {"kind": "git_changed", "paths": ["src"], "min_files": 3}, base_commit=base)
    assert r.passed, r.message
    assert r.excerpt.splitlines() == ["src/a.py", "src/b.py", "src/c.py"]
    r = one(path, {"kind": "git_changed", "min_files": 5}, base_commit=base)
    assert not r.passed and r.message.startswith("4 file(s) changed")
    r = one(path, {"kind": "git_changed", "paths": ["docs"]}, base_commit=base)
    assert not r.passed


def test_git_changed_without_base_compares_with_head(repo: tuple[Path, str]) -> None:
    path, _ = repo
    (path / "new.txt").write_text("x")
    git(path, "add", "new.txt")
    git(path, "commit", "-q", "-m", "committed work")
    r = one(path, {"kind": "git_changed"})
    assert not r.passed and "no base commit recorded" in r.message
    (path / "README.md").write_text("edited\n")
    r = one(path, {"kind": "git_changed"})
    assert r.passed and "compared against HEAD" in r.message and r.excerpt == "README.md"


def test_git_changed_in_a_repository_without_commits(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    assert not one(tmp_path, {"kind": "git_changed"}).passed
    (tmp_path / "first.py").write_text("")
    r = one(tmp_path, {"kind": "git_changed"})
    assert r.passed and r.excerpt == "first.py"


def test_git_changed_errors(
    tmp_path_factory: pytest.TempPathFactory, repo: tuple[Path, str]
) -> None:
    plain = tmp_path_factory.mktemp("plain")
    r = one(plain, {"kind": "git_changed"}, base_commit="abc")
    assert not r.passed and "is not a usable git repository" in r.message
    assert "git init" in r.message
    path, _ = repo
    r = one(path, {"kind": "git_changed"}, base_commit="0" * 40)
    assert not r.passed and "is not in the repository" in r.message
    r = one(path, {"kind": "git_changed", "paths": [".."]})
    assert not r.passed and "outside the workspace" in r.message


# --------------------------------------------------------------------------- the report


def test_every_check_runs_in_order(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    checks = [
        {"kind": "file_exists", "path": "missing"},
        {"kind": "command", "name": "ok", "argv": [PY, "-c", "pass"]},
        {"kind": "command", "argv": ["no-such-binary-pg"]},
        {"kind": "file_exists", "path": "a.txt", "name": "has_a"},
    ]
    report = verify(tmp_path, checks)
    assert [r.name for r in report.results] == ["file_exists_1", "ok", "command_3", "has_a"]
    assert [r.passed for r in report.results] == [False, True, False, True]
    assert report.passed is False
    assert verify(tmp_path, checks[1:2]).passed is True
    assert verify(tmp_path, []).passed is True


def test_malformed_request_raises_verify_invalid(tmp_path: Path) -> None:
    with pytest.raises(ApplicationError) as info:
        verify(tmp_path / "nope", [])
    assert info.value.type == "verify_invalid" and info.value.non_retryable


def test_output_excerpt_keeps_head_and_tail(tmp_path: Path) -> None:
    code = "print('FIRST'); print('x' * 50000); print('LAST')"
    r = one(tmp_path, {"kind": "command", "argv": [PY, "-c", code]})
    assert len(r.excerpt) < 2100 and "FIRST" in r.excerpt and "LAST" in r.excerpt
    assert "characters omitted" in r.excerpt
    small = VerifyActivities(max_output_chars=100)
    req = VerifyRequest(
        workspace=str(tmp_path), checks=[{"kind": "command", "argv": [PY, "-c", code]}]
    )
    assert len(small.run_verify_checks(req).results[0].excerpt) < 200
    assert excerpt("short") == "short"
