"""Record GatedSession histories for the replay tests.

Run from the repo root after a deliberate, compatible change to workflow code:

    .venv/bin/python tests/histories/record.py            # every scenario
    .venv/bin/python tests/histories/record.py carry-proof  # only the named ones

Keep the histories older code recorded (re-record only scenarios you add): they
are what guards the ``workflow.patched`` branches.

It starts its own dev server, drives a few sessions through every message
kind (update, signal, approval, control, continue-as-new) and writes one JSON
history per run next to this file. The replay tests then guard that today's
workflow code still replays what older code recorded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # tests/: the shared fixture evidence

from fixture_evidence import GOOD_0
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from phasegate import SHIPPED_LIBRARY
from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.client.devserver import temporal_binary
from phasegate.domain.errors import PhasegateError
from phasegate.domain.limits import AHEAD_BYTES
from phasegate.domain.session.messages import (
    CheckpointSubmission,
    ControlRequest,
    PhaseView,
    SessionOptions,
)
from phasegate.domain.settings import Settings
from phasegate.temporal import DATA_CONVERTER, SA_PHASE, SEARCH_ATTRIBUTE_KEYS
from phasegate.testing import ScriptedAgent, known_good, workspace_for
from phasegate.worker import build_worker


async def _save(pg: PhasegateClient, sid: str, name: str, run_id: str | None = None) -> None:
    history = await pg.temporal.get_workflow_handle(sid, run_id=run_id).fetch_history()
    # The workflow id is part of the name: replay needs it (signatures bind it).
    (HERE / f"{name}--{sid}.json").write_text(history.to_json())
    print(f"recorded {name}--{sid}.json ({len(history.events)} events)")


async def main(only: list[str]) -> None:
    home = tempfile.mkdtemp(prefix="phasegate-record-")
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        search_attributes=list(SEARCH_ATTRIBUTE_KEYS),
        data_converter=DATA_CONVERTER,
    ) as env:
        settings = Settings(
            task_queue="record",
            home=home,
            library_paths=[str(REPO / "tests" / "fixtures" / "library"), SHIPPED_LIBRARY],
            allow_unsigned_approvals=True,
        )
        pg = PhasegateClient(env.client, settings.task_queue)
        with concurrent.futures.ThreadPoolExecutor() as pool:
            async with build_worker(env.client, settings, executor=pool):
                if only:
                    for name in only:
                        await SCENARIOS[name](pg, home)
                    return
                # 1. static session with failures, approval reject/approve, completion
                await _static_walk(pg, home, "static-walk", "static_walk", repeat=True)

                # 2. signals, controls and abandon
                sid = await pg.start("mini_v1", home, session_id="signals-controls")
                await pg.signal_checkpoint(sid, 0, GOOD_0)
                while (await pg.status(sid)).current_phase != 1:
                    await asyncio.sleep(0.05)
                await pg.control(sid, ControlRequest(action="pause", reason="r", actor="bob"))
                await pg.control(sid, ControlRequest(action="resume", actor="bob"))
                await pg.control(sid, ControlRequest(action="abandon", reason="done", actor="bob"))
                await pg.result(sid)
                await _save(pg, sid, "signals_controls")

                # 3. rollback: back to phase 0 after an approval, forward again through the gate
                sid = await pg.start("mini_v1", home, session_id="rollback")
                await pg.submit(sid, 0, GOOD_0)
                await pg.submit(sid, 1, {"plan": "a plan"})
                await pg.decide(sid, approver="alice", decision="approve")
                await pg.control(
                    sid, ControlRequest(action="rollback", to_phase=0, reason="redo", actor="lead")
                )
                await pg.submit(sid, 0, {**GOOD_0, "modules_found": 4})
                await pg.control(
                    sid, ControlRequest(action="retry_phase", reason="r", actor="lead")
                )
                await _save(pg, sid, "rollback")

                # 4. signed approval (a refused unsigned one first) and a verify check
                keydir = Path(home) / "keys"
                alice = keys.new_key("alice", directory=keydir)
                sid = await pg.start(
                    "mini_v1",
                    home,
                    session_id="signed",
                    options=SessionOptions(approver_keys=[alice]),
                )
                await pg.submit(sid, 0, GOOD_0)
                await pg.submit(sid, 1, {"plan": "a plan"})
                with contextlib.suppress(PhasegateError):
                    await pg.decide(sid, approver="alice", decision="approve")
                nonce, sig = keys.sign_decision(
                    "alice",
                    session_id=sid,
                    phase=1,
                    decision="approve",
                    directory=keydir,
                    binding=(await pg.status(sid)).approval_binding,
                )
                await pg.decide(
                    sid, approver="alice", decision="approve", nonce=nonce, signature=sig
                )
                await _save(pg, sid, "signed_approval")

                ws = Path(home) / "ws"
                ws.mkdir()
                sid = await pg.start("verified_v1", str(ws), session_id="verified")
                await pg.submit(sid, 0, {"tests_passing": True, "test_path": "missing"})
                (ws / "NOTES.md").write_text("notes\n")
                await _save(pg, sid, "verify_failed")

                # 5. dynamic session from the example spec, up to continue-as-new
                spec = REPO / "examples" / "specs" / "todo-api"
                sid = await pg.start(
                    "spec_execution_v1",
                    str(spec),
                    session_id="dynamic-can",
                    options=SessionOptions(spec_path=str(spec), continue_as_new_after_events=10),
                )
                first_run = (await pg.handle(sid).describe()).run_id
                for attempt in range(4):
                    await pg.submit(sid, 0, {"spec_path": str(spec), "phases_found": attempt})
                await _save(pg, sid, "dynamic_first_run", first_run)
                await pg.status(sid)  # the new run has processed its first workflow task
                await asyncio.sleep(1)  # and its prefetch has come back
                await _save(pg, sid, "dynamic_after_continue_as_new")


async def carry_proof(pg: PhasegateClient, home: str) -> None:
    """A continue-as-new whose new run proves its carry with the server (carry-proof-v1)."""
    spec = REPO / "examples" / "specs" / "todo-api"
    sid = await pg.start(
        "spec_execution_v1",
        str(spec),
        session_id="carry-proof",
        options=SessionOptions(spec_path=str(spec), continue_as_new_after_events=10),
    )
    first_run = (await pg.handle(sid).describe()).run_id
    for attempt in range(4):
        await pg.submit(sid, 0, {"spec_path": str(spec), "phases_found": attempt})
    await _save(pg, sid, "carry_proof_first_run", first_run)
    continued = (await pg.handle(sid).describe()).run_id
    await pg.submit(sid, 0, {"spec_path": str(spec), "phases_found": 9}, submission_id="after")
    await asyncio.sleep(1)  # the prefetch has come back
    # The continued run: its carry proven by the server, then an update handled.
    await _save(pg, sid, "carry_proof_continued", continued)


async def _walk_to_phase_1(pg: PhasegateClient, sid: str) -> dict:
    """Phase 0 of a spec_execution_v1 session passed and approved; phase 1's evidence."""
    agent = ScriptedAgent(pg, known_good("spec_execution_v1"))
    view = await pg.phase(sid)
    assert isinstance(view, PhaseView)
    assert (await pg.submit(sid, 0, agent.evidence_for(view))).awaiting_approval
    await pg.decide(sid, approver="lead", decision="approve")
    view = await pg.phase(sid, 1)
    assert isinstance(view, PhaseView)
    return agent.evidence_for(view)


async def _reading_checks(
    pg: PhasegateClient, home: str, name: str, *, prefetch: bool = True
) -> None:
    """A files_exist check (spec_execution_v1's dynamic gate) refusing a missing file,
    then passing; saved as ``name``."""
    ws = workspace_for("spec_execution_v1", Path(home) / name)
    shutil.copytree(REPO / "examples" / "specs" / "todo-api", ws / "spec")
    sid = await pg.start(
        "spec_execution_v1",
        str(ws),
        session_id=name.replace("_", "-"),
        options=SessionOptions(spec_path=str(ws / "spec"), prefetch=prefetch),
    )
    await pg.wait_started(sid)
    evidence = await _walk_to_phase_1(pg, sid)
    refused = await pg.submit(sid, 1, {**evidence, "files_changed": ["src/missing.py"]})
    assert not refused.passed and refused.verify and not refused.verify[0].passed
    assert (await pg.submit(sid, 1, evidence)).passed
    await asyncio.sleep(1)  # the prefetch has come back
    await _save(pg, sid, name)


async def verify_here(pg: PhasegateClient, home: str) -> None:
    """Reading checks as a local activity of the session's worker (verify main and
    verify workers in one process: verify-reads-on-session-worker)."""
    await _reading_checks(pg, home, "verify_here")


async def render_with_checks(pg: PhasegateClient, home: str) -> None:
    """Reading checks that also render the phase a passing checkpoint enters, in one local
    activity (render-with-reading-checks): no prefetch of that phase."""
    await _reading_checks(pg, home, "render_with_checks")


async def render_with_checks_v2(pg: PhasegateClient, home: str) -> None:
    """v2: the checks render the next phase only in sessions without prefetch; with
    prefetch, reading checks alone (run_checks_here) and the phase prefetched."""
    await _reading_checks(pg, home, "render_with_checks_v2_off", prefetch=False)
    await _reading_checks(pg, home, "render_with_checks_v2_on")


async def verify_elsewhere(pg: PhasegateClient, home: str) -> None:
    """The same with a session worker that runs no checks itself (``--no-verify``, as in
    the sealed deployment): it answers None and the checks go to the verify queue."""
    settings = Settings(
        task_queue="record-split",
        home=home,
        library_paths=[SHIPPED_LIBRARY],
        allow_unsigned_approvals=True,
    )
    split = PhasegateClient(pg.temporal, settings.task_queue)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        async with (
            build_worker(pg.temporal, settings, executor=pool, verify=False),
            build_worker(pg.temporal, settings, executor=pool, main=False),
        ):
            await _reading_checks(split, home, "verify_elsewhere")


async def task_state(pg: PhasegateClient, home: str) -> None:
    """Task messages of every kind on a tasks_v1 session with task files: claims, a
    completion refused by its acceptance check then taken, a block, a dynamic subtask,
    the phase gate on its tasks, and a continue-as-new carrying the board."""
    from phasegate.domain.tasks.messages import (
        AddSubtask,
        BlockTask,
        CompleteTask,
        StartTask,
        TaskResult,
    )

    ws = Path(home) / "tasks-ws"
    ws.mkdir()
    (ws / "tasks.md").write_text(
        "# Tasks: record\n\n## Phase 1: Build\n\n"
        "- [ ] T001 Write the file\n  - Acceptance: `out.txt` contains `ok`\n"
        "- [ ] T002 Then this (depends on T001)\n\n## Phase 2: Ship\n\n- [ ] T003 Ship\n"
    )
    sid = await pg.start(
        "tasks_v1",
        str(ws),
        session_id="task-state",
        options=SessionOptions(
            spec_path=str(ws / "tasks.md"), task_files=True, continue_as_new_after_events=90
        ),
    )
    handle = pg.handle(sid)
    first_run = (await handle.describe()).run_id
    await asyncio.sleep(1)  # the definition has loaded

    async def update(name: str, msg: object) -> None:
        with contextlib.suppress(Exception):
            await handle.execute_update(name, msg, result_type=TaskResult)
        await asyncio.sleep(0.3)  # the task files follow each change

    await update("start_task", StartTask(agent="ann"))
    await update("start_task", StartTask(agent="bob", task="T001"))  # refused: ann's
    await update("complete_task", CompleteTask(agent="ann", task="T001", summary="x"))
    (ws / "out.txt").write_text("ok\n")
    await update("complete_task", CompleteTask(agent="ann", task="T001", summary="wrote it"))
    await update("start_task", StartTask(agent="bob", task="T002"))
    await update("add_subtask", AddSubtask(agent="bob", parent="T002", title="half"))
    await update("start_task", StartTask(agent="bob"))
    await update("block_task", BlockTask(agent="bob", task="T002.1", reason="wait"))
    await update("start_task", StartTask(agent="bob", task="T002.1"))
    await update("complete_task", CompleteTask(agent="bob", task="T002.1", summary="done"))
    await pg.submit(sid, 0, {"summary": "built"})
    await asyncio.sleep(2)  # the task files have been written
    await update("start_task", StartTask(agent="ann"))  # phase 1's T003: past the limit
    await _save(pg, sid, "task_state_first_run", first_run)
    await pg.status(sid)
    await asyncio.sleep(1)
    await _save(pg, sid, "task_state_continued")


async def load_here(pg: PhasegateClient, home: str) -> None:
    """The definition loaded as a local activity of the session's worker
    (load-on-session-worker): a static walk with a rejection, an approval and completion."""
    await _static_walk(pg, home, "load-here", "load_here")


async def engine_1(pg: PhasegateClient, home: str) -> None:
    """Sessions loaded at engine 1 (workflows/_session_patches.py): the first prefetch a
    local activity in the workflow task that made the session ready, and no patch markers
    (nor TemporalChangeVersion upserts) but load-on-session-worker's. A static walk with a
    retired checkpoint signal, and reading checks.

    first_prefetch_here--first-prefetch-here.json was recorded between the two changes:
    a session of engine 0 (its load names none) asking first-prefetch-on-session-worker,
    as an engine-0 session continued as new under this code does."""
    sid = await pg.start("mini_v1", home, session_id="engine-1")
    await pg.wait_started(sid)
    # Retired: dropped with a note.
    await pg.handle(sid).signal("checkpoint", CheckpointSubmission(phase=0, evidence=GOOD_0))
    while not (await pg.status(sid)).last_signal_error:
        await asyncio.sleep(0.05)
    await pg.handle(sid).terminate("recorded")
    await _save(pg, sid, "engine_1_signal")
    await _static_walk(pg, home, "engine-1-walk", "engine_1_walk")
    await _reading_checks(pg, home, "engine_1_checks")


async def engine_1_continued(pg: PhasegateClient, home: str) -> None:
    """An engine-1 session continued as new twice or more: each continued run proves its
    carry (carry-proof-v1, _kit's) and prefetches locally without any session patch."""
    options = SessionOptions(continue_as_new_after_events=12)
    sid = await pg.start("mini_v1", home, session_id="engine-1-can", options=options)
    run_id: str | None = (await pg.handle(sid).describe()).run_id
    for i in range(3):  # failed attempts grow history past the limit
        await pg.submit(sid, 0, {"modules_found": 0}, submission_id=f"f{i}")
    await pg.submit(sid, 0, GOOD_0, submission_id="pass")
    await pg.submit(sid, 1, {"plan": "the plan"})
    await pg.decide(sid, approver="alice", decision="approve")
    await pg.submit(sid, 2, {"tests_run": 1, "tests_passed": 1})
    await pg.result(sid)
    n = 0
    while run_id:
        history = await pg.temporal.get_workflow_handle(sid, run_id=run_id).fetch_history()
        await _save(pg, sid, f"engine_1_run{n}", run_id)
        attrs = history.events[-1].workflow_execution_continued_as_new_event_attributes
        run_id, n = attrs.new_execution_run_id or None, n + 1


async def engine_2(pg: PhasegateClient, home: str) -> None:
    """Sessions loaded at engine 2: a change of the phase alone held for
    PHASE_ATTRIBUTE_SECONDS, then written by a timer (engine_2_held); a static walk
    (engine_2_walk); and, on a worker that renders phases ahead
    (PHASEGATE_PREFETCH_AHEAD), a walk rendered once, by the run's first prefetch, a
    local ``render_phases`` (engine_2_ahead)."""
    await _held_walk(pg, home, "engine-2-held", "engine_2_held")
    await _static_walk(pg, home, "engine-2-walk", "engine_2_walk")
    settings = Settings(
        task_queue="record-ahead",
        home=home,
        library_paths=[str(REPO / "tests" / "fixtures" / "library"), SHIPPED_LIBRARY],
        allow_unsigned_approvals=True,
        prefetch_ahead_bytes=AHEAD_BYTES,
    )
    ahead = PhasegateClient(pg.temporal, settings.task_queue)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        async with build_worker(pg.temporal, settings, executor=pool):
            await _static_walk(ahead, home, "engine-2-ahead", "engine_2_ahead")


async def engine_3(pg: PhasegateClient, home: str) -> None:
    """A session loaded at engine 3: a change of the phase alone always waits for the
    held attribute's timer (no decision reads the clock), a status change is written at
    once (engine_3_held)."""
    await _held_walk(pg, home, "engine-3-held", "engine_3_held")


async def engine_4(pg: PhasegateClient, home: str) -> None:
    """Sessions loaded at engine 4: a status change cancels the held attribute's timer
    (engine_4_cancel: an advance held, then awaiting approval), and a run that continues
    as new while a change is held cancels the timer before it closes, the next run writing
    the attributes (engine_4_run0, continued in engine_4_run1), as one continued while an
    approval's deadline runs cancels that timer (engine_4_deadline_run0, _run1)."""
    sid = await pg.start("mini_v1", home, session_id="engine-4-cancel")
    await pg.submit(sid, 0, GOOD_0)
    await _timer_started(pg, sid)
    await pg.submit(sid, 1, {"plan": "the plan"})
    await pg.decide(sid, approver="alice", decision="approve")
    await pg.submit(sid, 2, {"tests_run": 1, "tests_passed": 1})
    await pg.result(sid)
    await _save(pg, sid, "engine_4_cancel")

    options = SessionOptions(continue_as_new_after_events=30)
    sid = await pg.start("mini_v1", home, session_id="engine-4-can", options=options)
    first_run = (await pg.handle(sid).describe()).run_id
    await pg.submit(sid, 0, GOOD_0)
    await _timer_started(pg, sid)
    for i in range(20):  # failed attempts grow history past the limit, the phase held
        await pg.submit(sid, 1, {"plan": "x"}, submission_id=f"f{i}")
        if (await pg.handle(sid).describe()).run_id != first_run:
            break
    else:
        raise AssertionError("engine-4-can never continued as new")
    await pg.submit(sid, 1, {"plan": "the plan"})
    await pg.decide(sid, approver="alice", decision="approve")
    await pg.submit(sid, 2, {"tests_run": 1, "tests_passed": 1})
    await pg.result(sid)
    await _save(pg, sid, "engine_4_run0", first_run)
    await _save(pg, sid, "engine_4_run1")

    # Continued as new while an approval's deadline timer runs: cancelled before the close,
    # armed again by the next run.
    sid = await pg.start(
        "deadline_reject_v1", home, session_id="engine-4-deadline", options=options
    )
    first_run = (await pg.handle(sid).describe()).run_id
    await pg.submit(sid, 0, {"plan": "the plan"})  # awaiting approval: a 30 min deadline
    for _ in range(40):  # retired checkpoint signals: recorded, dropped, history grows
        retired = CheckpointSubmission(phase=0, evidence={"plan": "again"})
        await pg.handle(sid).signal("checkpoint", retired)
        await asyncio.sleep(0.05)
        if (await pg.handle(sid).describe()).run_id != first_run:
            break
    else:
        raise AssertionError("engine-4-deadline never continued as new")
    await pg.decide(sid, approver="lead", decision="approve")
    await pg.submit(sid, 1, {"done": True})
    await pg.result(sid)
    await _save(pg, sid, "engine_4_deadline_run0", first_run)
    await _save(pg, sid, "engine_4_deadline_run1")


async def _timer_started(pg: PhasegateClient, sid: str) -> None:
    """Wait for the held attribute's timer (it starts with the prefetch's workflow task)."""
    for _ in range(200):
        history = await pg.handle(sid).fetch_history()
        if any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in history.events):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{sid}: the held attribute's timer never started")


async def _held_walk(pg: PhasegateClient, home: str, session_id: str, name: str) -> None:
    """mini_v1: an advance whose phase is held until the timer writes it, then an
    approval and completion (status changes, written at once)."""
    sid = await pg.start("mini_v1", home, session_id=session_id)
    await pg.submit(sid, 0, GOOD_0)
    while (await pg.handle(sid).describe()).typed_search_attributes.get(SA_PHASE) != 1:
        await asyncio.sleep(0.2)  # the timer's upsert
    await pg.submit(sid, 1, {"plan": "the plan"})
    await pg.decide(sid, approver="alice", decision="approve")
    await pg.submit(sid, 2, {"tests_run": 1, "tests_passed": 1})
    await pg.result(sid)
    await _save(pg, sid, name)


async def _static_walk(
    pg: PhasegateClient, home: str, session_id: str, name: str, *, repeat: bool = False
) -> None:
    """mini_v1 with a failed attempt, a rejection, an approval and completion (``repeat``:
    the passing submission sent twice under one id)."""
    sid = await pg.start("mini_v1", home, session_id=session_id)
    await pg.submit(sid, 0, {"modules_found": 0})
    await pg.submit(sid, 0, GOOD_0, submission_id="a")
    if repeat:
        await pg.submit(sid, 0, GOOD_0, submission_id="a")
    await pg.submit(sid, 1, {"plan": "first plan"})
    await pg.decide(sid, approver="alice", decision="reject", comment="more")
    await pg.submit(sid, 1, {"plan": "second plan"})
    await pg.decide(sid, approver="alice", decision="approve")
    await pg.submit(sid, 2, {"tests_run": 2, "tests_passed": 2, "coverage": 10})
    await pg.result(sid)
    await _save(pg, sid, name)


SCENARIOS = {
    "load-here": load_here,
    "engine-1": engine_1,
    "engine-1-continued": engine_1_continued,
    "engine-2": engine_2,
    "engine-3": engine_3,
    "engine-4": engine_4,
    "task-state": task_state,
    "carry-proof": carry_proof,
    "verify-here": verify_here,
    "render-with-checks": render_with_checks,
    "render-with-checks-v2": render_with_checks_v2,
    "verify-elsewhere": verify_elsewhere,
}

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
