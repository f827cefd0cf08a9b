"""spec_execution_v1's dynamic gate checks ``files_changed`` against the workspace: each
path must be a file there now, or one git reports deleted (or renamed away) since the
session began. A phantom agent that lists files it never wrote is refused, with the
missing files named; the honest scripted agent still completes the session."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phasegate.activities._spec_phases import dynamic_gate
from phasegate.activities.library import load_gate_file
from phasegate.activities.verify import VerifyActivities
from phasegate.domain.commands import SessionCommands
from phasegate.domain.errors import GateDefinitionError
from phasegate.domain.session.messages import PhaseView, SessionOptions
from phasegate.domain.spec import SpecPhase, SpecTask
from phasegate.domain.verify import FilesExistCheck, VerifyRequest, VerifyResult, parse_checks
from phasegate.testing import complete_evidence, example_evidence, unsigned_approver
from phasegate.testing._evidence import SPEC_EXAMPLE_FILES

REPO = Path(__file__).resolve().parent.parent
GATE = REPO / "library" / "spec_execution_v1" / "phases" / "dynamic" / "gate-definition.yaml"
SPEC = REPO / "examples" / "specs" / "todo-api"


def _checks() -> list[Any]:
    """The checks every dynamic phase of spec_execution_v1 runs (the base gate's)."""
    base = load_gate_file(GATE)
    phase = SpecPhase(number=1, name="P", tasks=[SpecTask(id="1.1", name="t", line=2)], line=1)
    # A session without a test command (none named or found): the files check alone.
    gate = dynamic_gate(base, phase, source="tasks.md:1", commands=SessionCommands(), spec_index=0)
    assert len(gate.verify) == 1
    assert isinstance(gate.verify[0], FilesExistCheck)
    return list(gate.verify)


def _check(ws: Path, files: Any, base_commit: str | None = None) -> VerifyResult:
    req = VerifyRequest(
        workspace=str(ws),
        checks=_checks(),
        evidence={"files_changed": files, "tests_passing": True},
        base_commit=base_commit,
    )
    report = VerifyActivities().run_verify_checks(req)
    assert len(report.results) == 1 and report.passed == report.results[0].passed
    return report.results[0]


def _git(ws: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=ws, env=env, capture_output=True, text=True,
                          check=True, timeout=30)  # fmt: skip
    return done.stdout.strip()


def _write(ws: Path, *names: str) -> None:
    for name in names:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(f"# {name}\n", encoding="utf-8")


# --------------------------------------------------------------------------- the check


def test_invented_paths_are_refused_naming_each_missing_file(tmp_path: Path) -> None:
    _write(tmp_path, "src/app.py")
    result = _check(tmp_path, ["src/app.py", "src/example.py", "tests/test_example.py"])
    assert not result.passed and result.kind == "files_exist"
    assert result.name == "files_changed_exist"
    assert "src/example.py, tests/test_example.py do not exist" in result.message
    assert "not a git repository" in result.message  # so no deletion can excuse them
    assert "relative to the workspace" in result.message  # what to send instead
    assert result.excerpt == "src/app.py"  # the paths that were found


def test_paths_leaving_the_workspace_are_refused(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside.py"
    _write(ws, "src/app.py")
    outside.write_text("secret\n", encoding="utf-8")
    (ws / "src" / "link.py").symlink_to(outside)
    cases = {
        "../outside.py": "outside the workspace",
        "src/link.py": "outside the workspace",  # symlinks are followed
        str(ws / "src" / "app.py"): "it is an absolute path",  # repo-relative only
        "-rf": "starts with '-'",
        "@args": "starts with '@'",
        "src/app.py\nsrc/x": "control character",
        "src": "src is a directory",
        7: "not a path",
    }
    for value, reason in cases.items():
        result = _check(ws, ["src/app.py", value])
        assert not result.passed, value
        assert reason in result.message, (value, result.message)
    assert _check(ws, "src/app.py").message.startswith("evidence.files_changed is a str")
    assert not _check(ws, []).passed  # an empty list claims nothing


def test_real_files_are_accepted(tmp_path: Path) -> None:
    _write(tmp_path, "src/app.py", "tests/test_app.py")
    (tmp_path / "src" / "alias.py").symlink_to(tmp_path / "src" / "app.py")  # stays inside
    result = _check(tmp_path, ["src/app.py", "./tests/test_app.py", "src/alias.py"])
    assert result.passed, result.message
    assert result.message == "all 3 path(s) in evidence.files_changed are files in the workspace"


def test_files_deleted_or_renamed_in_a_git_workspace_are_accepted(tmp_path: Path) -> None:
    ws = tmp_path / "repo" / "service"  # the workspace is a folder of the repository
    _write(ws, "src/old.py", "src/moved.py", "src/kept.py")
    _git(tmp_path / "repo", "init", "-q")
    _git(tmp_path / "repo", "add", "-A")
    _git(tmp_path / "repo", "commit", "-qm", "before the session")
    base = _git(ws, "rev-parse", "HEAD")
    (ws / "src" / "old.py").unlink()  # deleted, not committed
    _git(ws, "mv", "src/moved.py", "src/new.py")
    _git(ws, "commit", "-qm", "renamed during the session")
    listed = ["src/old.py", "src/moved.py", "src/new.py", "src/kept.py"]
    result = _check(ws, listed, base)
    assert result.passed, result.message
    assert "deleted since the session began (src/old.py, src/moved.py)" in result.message
    assert "src/old.py (deleted)" in result.excerpt
    # A path git never knew is still invented, and the message says git was asked.
    invented = _check(ws, [*listed, "src/example.py"], base)
    assert not invented.passed
    missing = f"src/example.py does not exist (and git reports no such deletion since {base[:12]}"
    assert missing in invented.message, invented.message
    # Without git the same deletion cannot be confirmed.
    shutil.rmtree(tmp_path / "repo" / ".git")
    assert "src/old.py, src/moved.py do not exist" in _check(ws, listed, base).message


def test_the_list_is_bounded(tmp_path: Path) -> None:
    _write(tmp_path, "a.py")
    result = _check(tmp_path, ["a.py"] * 1001)
    assert not result.passed and "lists 1001 paths; the gate checks at most 1000" in result.message
    small = parse_checks(
        [{"kind": "files_exist", "evidence_field": "files_changed", "max_files": 2}],
        source="gate.yaml",
        known_fields=["files_changed"],
    )
    req = VerifyRequest(
        workspace=str(tmp_path), checks=small, evidence={"files_changed": ["a.py"] * 3}
    )
    assert not VerifyActivities().run_verify_checks(req).passed


def test_a_gate_naming_an_unknown_field_does_not_load() -> None:
    with pytest.raises(GateDefinitionError) as err:
        parse_checks([{"kind": "files_exist", "evidence_field": "changed"}], source="g.yaml",
                     known_fields=["files_changed"])  # fmt: skip
    assert err.value.where == "g.yaml: verify[0].evidence_field"
    assert "unknown evidence field 'changed'" in str(err.value)
    with pytest.raises(GateDefinitionError, match="missing required key 'evidence_field'"):
        parse_checks([{"kind": "files_exist"}], source="g.yaml")
    with pytest.raises(GateDefinitionError, match="templates are not allowed"):
        parse_checks([{"kind": "files_exist", "evidence_field": "f", "name": "{{ session.id }}"}],
                     source="g.yaml")  # fmt: skip


# --------------------------------------------------------------------------- in a session


async def _coding_agent(env: Any, settings: Any, ws: Path, sid: str, *args: str) -> str:
    """Run ``python -m phasegate.testing.coding_agent`` in ``ws`` as a developer step would."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEGATE_", "TEMPORAL_"))}
    environ.update(
        PHASEGATE_SESSION=sid,
        PHASEGATE_TASK_QUEUE=settings.task_queue,
        PHASEGATE_HOME=str(ws.parent / "agent-home"),
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        TEMPORAL_NAMESPACE=env.client.namespace,
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "phasegate.testing.coding_agent", *args, cwd=ws, env=environ,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def test_a_phantom_listing_invented_files_is_refused_and_the_honest_agent_completes(
    env, session_env, tmp_path: Path
) -> None:
    pg, settings = session_env
    ws = tmp_path / "project"
    shutil.copytree(SPEC, ws / "spec")  # a spec is read from inside the target
    sid = await pg.start(
        "spec_execution_v1", str(ws), options=SessionOptions(spec_path=str(ws / "spec"))
    )
    plan = await pg.phase(sid, 0)
    assert isinstance(plan, PhaseView)
    assert (await pg.submit(sid, 0, complete_evidence(example_evidence(plan), plan))).passed
    await unsigned_approver("lead")(pg, sid, 0)
    first = await pg.phase(sid, 1)
    assert isinstance(first, PhaseView)
    # The example the phase shows is what the phantom copies (and what workspace_for writes).
    assert example_evidence(first)["files_changed"] == list(SPEC_EXAMPLE_FILES)

    out = await _coding_agent(env, settings, ws, sid, "--phantom-files")
    assert out.rstrip().endswith("all tasks done")
    status = await pg.status(sid)
    assert status.status == "active" and status.current_phase == 1
    problems = {p.field: p.message for p in status.last_problems}
    assert list(problems) == ["verify:files_changed_exist"], status.last_problems
    assert (
        "src/example.py, tests/test_example.py do not exist"
        in problems["verify:files_changed_exist"]
    )
    assert not (ws / "src").exists()

    out = await _coding_agent(env, settings, ws, sid)  # honest: writes what it lists
    final = await pg.status(sid)
    assert final.status == "completed", out
    assert f"session {sid} completed ({final.total_phases} phases)" in out
