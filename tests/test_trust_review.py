"""Review of the issue 14 fixes, attacked as a level-2/3 agent would (no poller on
phasegate's own queues). Passing tests here add coverage the other trust tests lack;
a failing test is a hole that is still open."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.worker import Worker
from test_foreign_workflows import FORGED_SESSION


@workflow.defn(sandboxed=False)
class ForeignParent:
    """Starts a real GatedSession on phasegate's queue as its child, carrying a forgery."""

    @workflow.run
    async def run(self, job: dict[str, Any]) -> str:
        try:
            await workflow.execute_child_workflow(
                "GatedSession", job["input"], id=job["child"], task_queue=job["task_queue"]
            )
        except Exception as exc:  # noqa: BLE001 - the child's failure is the answer
            return f"failed: {exc.cause!r}" if hasattr(exc, "cause") else repr(exc)
        return "completed"


async def test_a_standalone_activity_cannot_run_the_coding_agent(env, session_env, tmp_path):
    """client.start_activity (standalone activities, temporalio 1.35): no workflow at all."""
    _, settings = session_env
    marker = tmp_path / "pwned"
    req = {"agent": "scripted", "prompt": f"$(env > {marker})", "working_dir": str(tmp_path),
           "session_id": "x", "task_queue": settings.task_queue}  # fmt: skip
    try:
        handle = await env.client.start_activity(
            "run_coding_agent", req, id=f"sa-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue, start_to_close_timeout=timedelta(seconds=20),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the server may not offer standalone activities
        pytest.skip(f"the dev server refuses standalone activities: {exc}")
    with pytest.raises(Exception) as err:
        await asyncio.wait_for(handle.result(), 30)
    cause = getattr(err.value, "cause", None)
    assert getattr(cause, "type", None) == "caller_refused", repr(cause)
    assert not marker.exists()


async def test_a_foreign_parent_cannot_hand_its_child_session_carried_state(env, session_env):
    """A child GatedSession started by the agent's own workflow is a first run."""
    _, settings = session_env
    queue, child = f"agent-{uuid.uuid4().hex[:8]}", f"child-{uuid.uuid4().hex[:8]}"
    start = {"workflow_type": "mini_v1", "target": "", "carried": dict(FORGED_SESSION)}
    async with Worker(env.client, task_queue=queue, workflows=[ForeignParent]):
        answer = await env.client.execute_workflow(
            ForeignParent.run,
            {"input": start, "child": child, "task_queue": settings.task_queue},
            id=f"parent-{uuid.uuid4().hex[:8]}", task_queue=queue,
        )  # fmt: skip
    assert answer.startswith("failed") and "carried" in answer, answer
