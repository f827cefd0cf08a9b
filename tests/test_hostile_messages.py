"""Issue 8, item 4 (threat level 2: the agent holds a Temporal client): no message can
wedge or kill a session, and a restarted session id is visible.

Messages are sent the way a hostile client would: raw, through the Temporal SDK,
with payloads phasegate's own client would refuse. Each test then checks that
the session still answers ``status`` and takes an ``abandon``.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from fixture_evidence import GOOD_0
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from phasegate.client.cli._render import render_other_runs
from phasegate.domain.session.messages import ControlRequest, SessionOptions, StartSession
from phasegate.workflows.gated_session import GatedSession


async def _history_bytes(handle) -> int:
    history = await handle.fetch_history()
    return len(history.to_json())


async def _still_answers(pg, sid: str) -> None:
    status = await pg.status(sid)
    assert status.status in ("active", "awaiting_approval", "paused")
    result = await pg.control(sid, ControlRequest(action="abandon", reason="test", actor="ops"))
    assert result.status == "abandoned"


async def test_oversized_updates_are_refused_before_history(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    handle = pg.handle(sid)
    before = await _history_bytes(handle)
    hostile = [
        ("control", {"action": "pause", "reason": "r" * 1_500_000, "actor": "ops"}),
        ("control", {"action": "pause", "reason": "", "actor": "a" * 100_000}),
        (
            "decide_approval",
            {"phase": 0, "approver": "x", "decision": "approve", "comment": "c" * 900_000},
        ),
        ("submit_checkpoint", {"phase": 0, "evidence": GOOD_0, "submission_id": "s" * 500_000}),
        ("submit_checkpoint", {"phase": 0, "evidence": {"blob": "b" * 600_000}}),
    ]
    for name, payload in hostile:
        with pytest.raises((WorkflowUpdateFailedError, RPCError)):
            await handle.execute_update(name, payload)
    # Nothing of that reached history (a rejected update writes nothing).
    assert await _history_bytes(handle) - before < 20_000
    await _still_answers(pg, sid)


async def test_checkpoint_signal_is_retired(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    await pg.handle(sid).signal("checkpoint", {"phase": 0, "evidence": GOOD_0})
    for _ in range(100):
        status = await pg.status(sid)
        if status.last_signal_error:
            break
        await asyncio.sleep(0.05)
    assert status.current_phase == 0 and status.attempts == 0  # the signal changed nothing
    assert "phasegate submit" in (status.last_signal_error or "")
    await _still_answers(pg, sid)


async def test_an_invalid_start_input_fails_the_session_with_the_reason(session_env, tmp_path):
    pg, settings = session_env
    sid = f"bad-start-{uuid.uuid4().hex[:8]}"
    handle = await pg.temporal.start_workflow(
        "GatedSession",
        {"workflow_type": "w" * 5000, "target": str(tmp_path)},
        id=sid,
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as err:
        await asyncio.wait_for(handle.result(), timeout=20)
    assert "workflow_type" in str(err.value.cause)
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED


async def test_status_shows_the_run_chain_so_a_restarted_id_is_visible(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start(
        "mini_v1", str(tmp_path), options=SessionOptions(continue_as_new_after_events=12)
    )
    first = (await pg.handle(sid).describe()).run_id
    assert (await pg.status(sid)).run_chain == [first]
    for i in range(3):
        await pg.submit(sid, 0, {"modules_found": 0}, submission_id=f"f{i}")
    # The session may continue-as-new just after the last answer: read the chain
    # between two describes that agree, so both see the same run.
    for _ in range(50):
        current = (await pg.handle(sid).describe()).run_id
        chain = (await pg.status(sid)).run_chain
        if (await pg.handle(sid).describe()).run_id == current == chain[-1]:
            break
        await asyncio.sleep(0.1)
    assert chain[0] == first and chain[-1] == current and len(chain) >= 2
    # Terminated and started again under the same id: a new chain, not the old one.
    await pg.handle(sid).terminate("test")
    await pg.start("mini_v1", str(tmp_path), session_id=sid)
    restarted = await pg.status(sid)
    assert first not in restarted.run_chain and len(restarted.run_chain) == 1
    # `phasegate status` warns about the earlier session under this id (visibility lags).
    for _ in range(60):
        others = await pg.other_runs(sid, restarted.run_chain)
        if {first, current} <= {o.run_id for o in others}:
            break
        await asyncio.sleep(0.1)
    assert {first, current} <= {o.run_id for o in others}
    assert "used before by another session" in "\n".join(render_other_runs(others))


async def test_forged_start_carrying_state_cannot_fake_a_chain(session_env, tmp_path):
    pg, settings = session_env
    handle = await pg.temporal.start_workflow(
        GatedSession.run,
        StartSession(workflow_type="mini_v1", target=str(tmp_path), carried={"run_chain": ["x"]}),
        id=f"forged-chain-{uuid.uuid4().hex[:6]}",
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), timeout=20)
