"""Durability: continue-as-new keeps everything, a killed worker loses nothing,
SIGTERM shuts a worker down cleanly, and histories replay deterministically."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fixture_evidence import GOOD_0
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import PhaseView, SessionOptions
from phasegate.temporal import DATA_CONVERTER
from phasegate.workflows.gated_session import GatedSession

REPO = Path(__file__).resolve().parent.parent
FIXTURE_LIBRARY = REPO / "tests" / "fixtures" / "library"
HISTORIES = REPO / "tests" / "histories"


async def test_forced_continue_as_new_keeps_state(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start(
        "mini_v1", str(tmp_path), options=SessionOptions(continue_as_new_after_events=12)
    )
    first_run = (await pg.handle(sid).describe()).run_id
    for i in range(3):  # failed attempts grow history past the limit
        assert not (await pg.submit(sid, 0, {"modules_found": 0}, submission_id=f"f{i}")).passed
    ok = await pg.submit(sid, 0, GOOD_0, submission_id="pass-0")
    assert ok.passed
    await pg.submit(sid, 1, {"plan": "the plan"}, submission_id="plan")
    await pg.decide(sid, approver="alice", decision="approve", comment="fine")

    later_run = (await pg.handle(sid).describe()).run_id
    assert later_run != first_run, "expected at least one continue-as-new"
    status = await pg.status(sid)
    assert status.current_phase == 2 and [c.phase for c in status.completed_phases] == [0, 1]
    assert [a.approver for a in status.approvals] == ["alice"]
    # Idempotency survives continue-as-new: the original answer, no second advance; the
    # phase it advanced to is completed since, so the repeat carries no view of it.
    again = await pg.submit(sid, 0, GOOD_0, submission_id="pass-0")
    assert again.model_copy(update={"next_phase": None}) == ok.model_copy(
        update={"next_phase": None}
    )
    assert ok.next_phase and ok.next_phase.phase == 1 and again.next_phase is None
    view = await pg.phase(sid, 2)
    assert isinstance(view, PhaseView) and view.artifacts["0"].evidence == GOOD_0

    done = await pg.submit(sid, 2, {"tests_run": 1, "tests_passed": 1})
    assert done.completed
    assert (await pg.result(sid)).completed_phases == [0, 1, 2]

    # Every run of the chain replays against today's code.
    runs = 0
    async for history in _chain_histories(pg, sid, first_run):
        await _replayer().replay_workflow(history)
        runs += 1
    assert runs >= 2


def _worker_process(env_client, settings, tmp_path: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env_client.service_client.config.target_host,
        "PHASEGATE_TASK_QUEUE": settings.task_queue,
        "PHASEGATE_LIBRARY": str(FIXTURE_LIBRARY),
        "PHASEGATE_HOME": settings.home,
        # mini_v1 has an approval gate: name-only approvals, as the test's settings say
        "PHASEGATE_ALLOW_UNSIGNED_APPROVALS": "1" if settings.allow_unsigned_approvals else "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "phasegate.worker"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "phasegate worker" in line, (line, proc.stderr.read() if proc.poll() else "")
    return proc


async def test_killed_worker_loses_nothing(env, settings_for, tmp_path):
    settings = settings_for(FIXTURE_LIBRARY)
    pg = PhasegateClient(env.client, settings.task_queue)
    first = _worker_process(env.client, settings, tmp_path)
    try:
        sid = await pg.start("mini_v1", str(tmp_path))
        assert (await pg.submit(sid, 0, GOOD_0)).passed
    finally:
        first.kill()  # SIGKILL: no chance to clean up
        first.wait()
    # Submitted while no worker runs: accepted once a new worker picks it up.
    pending = asyncio.create_task(pg.submit(sid, 1, {"plan": "carry on"}, submission_id="p1"))
    await asyncio.sleep(0.5)
    assert not pending.done()
    second = _worker_process(env.client, settings, tmp_path)
    try:
        result = await asyncio.wait_for(pending, timeout=30)
        assert result.passed and result.awaiting_approval
        status = await pg.status(sid)
        assert [c.phase for c in status.completed_phases] == [0]
        view = await pg.phase(sid, 1)
        assert isinstance(view, PhaseView) and view.artifacts["0"].evidence == GOOD_0
    finally:
        second.send_signal(signal.SIGTERM)
        out, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    assert "stopped" in out
    assert "PyGILState" not in err and "Traceback" not in err


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_recorded_histories_replay(path: Path, sandboxed: bool):
    """In the SDK's sandbox (what guards determinism) and outside it (as workers run)."""
    workflow_id = path.stem.split("--", 1)[1]  # files are <scenario>--<workflow id>.json
    history = WorkflowHistory.from_json(workflow_id, path.read_text())
    await _replayer(sandboxed).replay_workflow(history)


def test_recorded_histories_exist():
    assert len(list(HISTORIES.glob("*.json"))) >= 3, "run tests/histories/record.py"


def _replayer(sandboxed: bool = True) -> Replayer:
    runner = {} if sandboxed else {"workflow_runner": UnsandboxedWorkflowRunner()}
    return Replayer(workflows=[GatedSession], data_converter=DATA_CONVERTER, **runner)


async def _chain_histories(pg: PhasegateClient, sid: str, run_id: str | None):
    """Each run's history, following continue-as-new links from the first run."""
    while run_id:
        history = await pg.temporal.get_workflow_handle(sid, run_id=run_id).fetch_history()
        yield history
        last = history.events[-1]
        attrs = last.workflow_execution_continued_as_new_event_attributes
        run_id = (
            attrs.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else None
        )
