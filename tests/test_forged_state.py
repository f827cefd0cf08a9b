"""Issue 8, item 1 (threat level 2: the agent holds a Temporal client): a session cannot
be started with made-up carried state; only its own continue-as-new carries state."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import WorkflowFailureError

from phasegate.domain.session.messages import SessionOptions, StartSession
from phasegate.workflows.gated_session import GatedSession


async def test_starting_with_forged_carried_state_fails_the_start(session_env, tmp_path):
    pg, settings = session_env
    # A real session's state, edited: phase 4 done, approved by "lead", unsigned allowed.
    sid = await pg.start("mini_v1", str(tmp_path))
    real = await pg.status(sid)
    forged_id = f"forged-{uuid.uuid4().hex[:8]}"
    forged = {
        "workflow_type": "mini_v1",
        "ref": {"workflow_type": "mini_v1", "total_phases": 3, "static_phase_count": 3},
        "status": "completed",
        "current": {"index": 2, "label": "2", "name": "Tests", "content": ""},
        "unsigned_approvals": True,
        "approvals": [
            {"phase": 1, "approver": "lead", "decision": "approve", "at": "2026-01-01T00:00:00Z"}
        ],
    }
    handle = await pg.temporal.start_workflow(
        GatedSession.run,
        StartSession(
            workflow_type="mini_v1", target=str(tmp_path), options=SessionOptions(), carried=forged
        ),
        id=forged_id,
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as err:
        await handle.result()
    cause = err.value.cause
    assert getattr(cause, "type", None) == "session_error"
    assert "carried state" in str(cause)
    # Nothing about the forged state is served: the session never got a state.
    with pytest.raises(Exception):  # noqa: B017 - any refusal; no forged status
        await pg.status(forged_id)
    assert real.status == "active"  # the real session is untouched


async def test_continue_as_new_still_carries_state(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start(
        "mini_v1", str(tmp_path), options=SessionOptions(continue_as_new_after_events=12)
    )
    first = (await pg.handle(sid).describe()).run_id
    for i in range(3):
        await pg.submit(sid, 0, {"modules_found": 0}, submission_id=f"f{i}")
    assert (await pg.handle(sid).describe()).run_id != first
    status = await pg.status(sid)
    assert status.status == "active" and status.current_phase == 0
    # The chain `phasegate status` shows is the server's, and agrees with the carried one.
    chain = await pg.run_chain(sid)
    assert chain[0] == first and len(chain) >= 2 and chain == status.run_chain


async def test_a_cron_start_cannot_smuggle_carried_state_into_its_next_run(session_env, tmp_path):
    # Cron runs also have a continued_run_id: no run of a cron start may believe `carried`.
    pg, settings = session_env
    forged = {
        "workflow_type": "mini_v1",
        "ref": {"workflow_type": "mini_v1", "total_phases": 3, "static_phase_count": 3},
        "status": "completed",
        "current": {"index": 2, "label": "2", "name": "Tests", "content": ""},
    }
    forged_id = f"forged-cron-{uuid.uuid4().hex[:8]}"
    await pg.temporal.start_workflow(
        GatedSession.run,
        StartSession(workflow_type="mini_v1", target=str(tmp_path), carried=forged),
        id=forged_id,
        task_queue=settings.task_queue,
        cron_schedule="@every 1s",
    )
    try:
        refused: set[str] = set()
        for _ in range(150):  # until two runs have run (and refused)
            async for run in pg.temporal.list_workflows(f"WorkflowId = '{forged_id}'"):
                handle = pg.temporal.get_workflow_handle(forged_id, run_id=run.run_id)
                text = (await handle.fetch_history()).to_json()
                assert "approval" not in text or "cannot be started" in text
                if "cannot be started with carried state" in text:
                    refused.add(run.run_id)
            if len(refused) >= 2:
                break
            await asyncio.sleep(0.1)
        assert len(refused) >= 2, "a later cron run did not refuse the carried state"
        with pytest.raises(Exception):  # noqa: B017 - no run answers with the forged state
            await pg.status(forged_id)
    finally:
        await pg.temporal.get_workflow_handle(forged_id).terminate("test over")
