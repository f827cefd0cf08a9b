"""Verify checks run on their own task queue, with their own concurrency limit: a
backlog of checks waits on the server (not started, so no heartbeat timeout runs) and
never holds up other sessions' advances; ``phasegate worker --no-verify`` and
``--verify-only`` split the two workers across processes."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from topology_helpers import CliWorker, pending_activities, until, write_library

from phasegate.client.api import PhasegateClient
from phasegate.client.cli import main as cli_main
from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.settings import verify_task_queue
from phasegate.worker import PhasegateWorkers, build_worker

SLOW = {"name": "slow", "kind": "command", "argv": ["sleep", "3"], "timeout_seconds": 30}
QUICK = {"name": "quick", "kind": "command", "argv": ["true"], "timeout_seconds": 30}
DONE = {"done": True}


async def test_verify_backlog_does_not_hold_up_advances(env, settings_for, run_worker, tmp_path):
    lib = write_library(tmp_path / "lib", "slow_v1", 2, {0: [SLOW]})
    write_library(lib, "plain_v1", 5, {})
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = settings_for(lib, verify_concurrency=1)
    async with run_worker(settings) as workers:
        assert workers.task_queues == [settings.task_queue, verify_task_queue(settings.task_queue)]
        pg = PhasegateClient(env.client, settings.task_queue)
        a, b, c = [await pg.start(wf, str(ws)) for wf in ("slow_v1", "slow_v1", "plain_v1")]
        for sid in (a, b, c):
            await pg.wait_started(sid)

        async def state(sid: str) -> PendingActivityState.ValueType | None:
            pending = await pending_activities(env.client, sid)
            return pending[0].state if pending else None

        async def a_started() -> bool:
            return await state(a) == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED

        async def b_scheduled() -> bool:
            return await state(b) is not None

        first = asyncio.create_task(pg.submit(a, 0, DONE))
        await until(a_started)
        second = asyncio.create_task(pg.submit(b, 0, DONE))
        await until(b_scheduled)
        # The one verify slot is busy: b's check waits on the server, not started, so
        # no heartbeat timeout runs for it (a worker that had accepted it into a busy
        # thread pool would have "started" it and let its heartbeat lapse).
        assert await state(b) == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
        took = []
        for phase in range(4):
            t0 = time.monotonic()
            result = await pg.submit(c, phase, DONE)
            took.append(time.monotonic() - t0)
            assert result.passed and result.current_phase == phase + 1
        assert not first.done(), "a's check should still run: make SLOW longer"
        assert max(took) < 1.5, took  # advances do not wait for the verify backlog

        ra, rb = await first, await second
        assert ra.passed and rb.passed and rb.verify[0].passed, (ra.problems, rb.problems)
        history = await pg.handle(b).fetch_history()
        scheduled = [
            e.activity_task_scheduled_event_attributes
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "run_verify_checks"
        ]
        started = [
            e.activity_task_started_event_attributes
            for e in history.events
            if e.HasField("activity_task_started_event_attributes")
        ]
        assert [s.task_queue.name for s in scheduled] == [verify_task_queue(settings.task_queue)]
        assert [s.attempt for s in started][-1] == 1  # ran once: no timeout, no retry


async def test_split_workers_complete_a_verified_session(env, tmp_path):
    """The main worker alone leaves the check waiting on its queue; a ``--verify-only``
    worker in another process picks it up and the session completes."""
    lib = write_library(tmp_path / "lib", "checked_v1", 3, {1: [QUICK]})
    ws = tmp_path / "ws"
    ws.mkdir()
    address = env.client.service_client.config.target_host
    queue = f"split-{tmp_path.name[-12:]}"
    proc_env = {"PHASEGATE_LIBRARY": str(lib), "PHASEGATE_HOME": str(tmp_path / "home")}
    pg = PhasegateClient(env.client, queue)
    main = CliWorker(address, queue, "--no-verify", env=proc_env)
    verify = None
    try:
        assert f"task queue {queue!r} (sessions) on {address}" in main.output
        assert "verify" not in main.output.split("phasegate worker: task queue")[1]
        sid = await pg.start("checked_v1", str(ws))
        await pg.wait_started(sid)
        assert (await pg.submit(sid, 0, DONE)).passed  # no check: the main worker alone
        pending = asyncio.create_task(pg.submit(sid, 1, DONE))

        async def check_waits() -> bool:
            return bool(await pending_activities(env.client, sid))

        await until(check_waits)
        await asyncio.sleep(1.0)
        assert not pending.done()  # nobody polls the verify queue yet
        verify = CliWorker(address, queue, "--verify-only", "--verify-concurrency", "2", env={})
        assert f"task queue {verify_task_queue(queue)!r} (verify checks, 2 at once)" in (
            verify.output
        )
        result = await asyncio.wait_for(pending, 30)
        assert result.passed and result.verify[0].name == "quick" and result.verify[0].passed
        last = await pg.submit(sid, 2, DONE)
        assert last.passed and (await pg.status(sid)).status == "completed"
    finally:
        codes = [w.stop() for w in (main, verify) if w is not None]
    assert codes == [0, 0], main.output
    assert "phasegate worker: stopped" in main.output


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["worker", "--verify-only", "--no-verify"], "not allowed with argument"),
        (["worker", "--verify-concurrency", "0"], "--verify-concurrency must be a number"),
        (["worker", "--metrics-port", "http"], "--metrics-port must be a number"),
    ],
)
def test_worker_flags_are_checked(argv, message, capsys):
    assert cli_main(argv) == 1
    assert message in capsys.readouterr().err


def test_a_worker_needs_something_to_run(env, settings_for, executor):
    with pytest.raises(PhasegateError, match="no worker to run"):
        build_worker(env.client, settings_for(), executor=executor, main=False, verify=False)
    workers = build_worker(env.client, settings_for(), executor=executor, main=False)
    assert isinstance(workers, PhasegateWorkers) and len(workers.task_queues) == 1
    assert workers.task_queues[0].endswith("-verify")


FILE = {"name": "notes", "kind": "file_exists", "path": "NOTES.md"}
LISTED = {"name": "listed", "kind": "glob_count", "pattern": "*.py", "min": 1}


def _activities(history) -> tuple[list[tuple[str, str]], list[str]]:
    """((activity type, task queue) of each scheduled activity, type of each local one)."""
    scheduled = [
        (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            e.activity_task_scheduled_event_attributes.task_queue.name,
        )
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    local = [
        json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)[
            "activity_type"
        ]
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    return scheduled, local


@pytest.mark.parametrize("prefetch", [True, False])
async def test_reading_checks_run_on_the_session_worker(
    env, settings_for, run_worker, tmp_path, prefetch
):
    """With the verify worker in the same process, checks that only read the workspace run
    as a local activity of the session's worker; without prefetch, that activity also
    renders the phase a passing checkpoint enters (one local activity per advance); a
    command in the gate sends the whole gate to the verify queue."""
    lib = write_library(tmp_path / "lib", "reads_v1", 3, {0: [FILE, LISTED], 1: [FILE, QUICK]})
    ws = tmp_path / "ws"
    ws.mkdir()
    async with run_worker(settings_for(lib)) as workers:
        queue = workers.task_queues[0]
        pg = PhasegateClient(env.client, queue)
        sid = await pg.start("reads_v1", str(ws), options=SessionOptions(prefetch=prefetch))
        missing = await pg.submit(sid, 0, {"done": True})
        assert not missing.passed and missing.next_phase is None
        assert [(r.name, r.passed) for r in missing.verify] == [("notes", False), ("listed", False)]
        (ws / "NOTES.md").write_text("notes\n")
        (ws / "a.py").write_text("")
        passed = await pg.submit(sid, 0, {"done": True})
        assert passed.passed and [r.passed for r in passed.verify] == [True, True]
        assert passed.next_phase is not None and passed.next_phase.phase == 1
        scheduled, local = _activities(await pg.handle(sid).fetch_history())
        # The definition loads on the session's worker too (load-on-session-worker).
        if prefetch:  # phases 1 and 2 prefetched (1 here, with the load); the checks here
            assert [name for name, _ in scheduled] == ["render_phase"]
            assert local == ["load_session", "render_phase", *["run_checks_here"] * 2]
        else:  # phase 1 rendered by the checks that let the session enter it
            assert [name for name, _ in scheduled] == []
            assert local == ["load_session", *["check_and_render_here"] * 2]
        mixed = await pg.submit(sid, 1, {"done": True})  # a command: the verify queue
        assert mixed.passed and [r.name for r in mixed.verify] == ["notes", "quick"]
        scheduled, local = _activities(await pg.handle(sid).fetch_history())
        assert ("run_verify_checks", verify_task_queue(queue)) in scheduled


@pytest.mark.parametrize("prefetch", [True, False])
async def test_a_session_worker_without_checks_sends_reading_checks_to_the_verify_queue(
    env, settings_for, executor, tmp_path, prefetch
):
    """``--no-verify`` (the sealed deployment's session worker, which must not read the
    agent's workspace): the local activity answers that it runs no checks, the checks go
    to the verify queue, and later checkpoints of the run go there directly."""
    lib = write_library(tmp_path / "lib", "reads_v1", 3, {0: [FILE], 1: [FILE]})
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "NOTES.md").write_text("notes\n")
    settings = settings_for(lib)
    main = build_worker(env.client, settings, executor=executor, verify=False)
    checks = build_worker(env.client, settings, executor=executor, main=False)
    async with main, checks:
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("reads_v1", str(ws), options=SessionOptions(prefetch=prefetch))
        for phase in (0, 1):
            result = await pg.submit(sid, phase, {"done": True})
            assert result.passed and result.verify[0].passed, result.problems
        scheduled, local = _activities(await pg.handle(sid).fetch_history())
    verify_queue = verify_task_queue(settings.task_queue)
    assert [q for name, q in scheduled if name == "run_verify_checks"] == [verify_queue] * 2
    # Asked once this run (the answer, None, is kept); phases 1 and 2 prefetched (1 here,
    # with the load), or, without prefetch, rendered at their advances.
    if prefetch:
        assert local == ["load_session", "render_phase", "run_checks_here"]
        assert [name for name, _ in scheduled].count("render_phase") == 1
    else:
        assert local == ["load_session", "check_and_render_here", "render_phase", "render_phase"]
        assert [name for name, _ in scheduled].count("render_phase") == 0
