"""Verify checks inside a session: a phantom completion is refused with the runner's
output; evidence can only fill one argument; lenient gates still block on verify."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from phasegate.domain.session.messages import PhaseView
from phasegate.domain.session.state import VERIFY_SLACK_SECONDS

FAILING = "def test_total():\n    total = 1 + 1\n    assert total == 3, 'total is off by one'\n"
PASSING = "def test_total():\n    assert 1 + 1 == 2\n"


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "tests" / "test_total.py").write_text(FAILING)
    # The checks run `python3 -m pytest`: this virtualenv's python3 has pytest.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return ws


async def test_phantom_completion_is_refused(session_env, workspace):
    pg, _ = session_env
    sid = await pg.start("verified_v1", str(workspace))
    claim = {"tests_passing": True, "test_path": "tests", "notes": "short"}
    result = await pg.submit(sid, 0, claim)
    assert not result.passed and result.current_phase == 0
    by_name = {r.name: r for r in result.verify}
    assert not by_name["tests_pass"].passed and by_name["tests_pass"].exit_code == 1
    assert "total is off by one" in by_name["tests_pass"].excerpt
    assert not by_name["notes_file"].passed
    fields = [p.field for p in result.problems]
    assert "verify:tests_pass" in fields and "verify:notes_file" in fields
    assert result.warnings and result.warnings[0].field == "notes"  # lenient: only a warning
    assert result.example_evidence and '"tests_passing": true' in result.example_evidence
    status = await pg.status(sid)
    assert status.attempts == 1 and "verify:tests_pass" in {p.field for p in status.last_problems}

    (workspace / "tests" / "test_total.py").write_text(PASSING)
    (workspace / "NOTES.md").write_text("notes\n")
    result = await pg.submit(sid, 0, claim)
    assert result.passed and result.current_phase == 1, result.problems
    assert all(r.passed for r in result.verify) and "1 passed" in result.verify[0].excerpt
    view = await pg.phase(sid, 1)
    assert isinstance(view, PhaseView)
    assert view.artifacts["0"].outputs["verify"][0]["passed"] is True
    # The activity's budget is the session's answer: the command's 120 s plus the slack.
    history = await pg.handle(sid).fetch_history()
    budgets = [
        e.activity_task_scheduled_event_attributes.start_to_close_timeout.ToTimedelta()
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "run_verify_checks"
    ]
    assert budgets == [timedelta(seconds=120 + VERIFY_SLACK_SECONDS)] * 2


async def test_evidence_stays_one_argument(session_env, workspace):
    pg, _ = session_env
    (workspace / "NOTES.md").write_text("notes\n")
    sid = await pg.start("verified_v1", str(workspace))
    for payload in ("tests; touch pwned", "$(touch pwned2)", "`touch pwned3`"):
        result = await pg.submit(sid, 0, {"tests_passing": True, "test_path": payload})
        assert not result.passed
        run = result.verify[0]
        assert run.exit_code not in (0, None)  # pytest: no such file or directory
        assert payload in run.excerpt  # reached pytest as one literal argument
    assert not list(workspace.glob("pwned*")) and not list(Path.cwd().glob("pwned*"))


async def test_missing_workspace_is_a_clear_failure(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("verified_v1", str(tmp_path / "nowhere"))
    result = await pg.submit(sid, 0, {"tests_passing": True, "test_path": "tests"})
    assert not result.passed
    assert result.verify and "could not run" in result.verify[0].message
    assert (await pg.status(sid)).status == "active"


async def test_phase_context_comes_from_current_or_earlier_docs(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("test_generation_v3", str(tmp_path))
    view = await pg.phase(sid, 0)
    assert isinstance(view, PhaseView) and view.context
    for section in view.context:
        assert {"source", "title", "text", "tokens"} <= set(section)
        path = section["source"]
        if "test_generation_v3/phases/" in path:
            assert "/phases/0/" in path, path  # never from a later phase
    task = await pg.task(sid, 0, 1)
    assert task.context is not None  # type: ignore[union-attr]


async def test_evidence_cannot_smuggle_options(session_env, workspace):
    """-k / --deselect would make a failing suite look green; evidence may not start with '-'."""
    pg, _ = session_env
    (workspace / "NOTES.md").write_text("notes\n")
    sid = await pg.start("verified_v1", str(workspace))
    for payload in ("-k=not test_total", "--deselect=tests/test_total.py::test_total", "-x"):
        result = await pg.submit(sid, 0, {"tests_passing": True, "test_path": payload})
        assert not result.passed
        assert "starts with '-'" in result.verify[0].message


async def test_submissions_during_a_verify_run_are_refused_not_queued(session_env, workspace):
    import asyncio

    from phasegate.domain.errors import SessionNotActive

    pg, _ = session_env
    sid = await pg.start("verified_v1", str(workspace))
    first = asyncio.create_task(pg.submit(sid, 0, {"tests_passing": True, "test_path": "tests"}))
    await asyncio.sleep(0.3)  # the pytest run of the first submission takes about a second
    with pytest.raises(SessionNotActive) as err:
        await pg.submit(sid, 0, {"tests_passing": True, "test_path": "tests"})
    assert "being verified" in str(err.value)
    assert not (await first).passed  # the tests still fail: the first run's verdict stands
