"""docs/adding-a-workflow-type.md's skeleton works as written: its two code blocks
become a module pair, run on a real dev server with the kit's carry proof."""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.worker import Worker

from phasegate.activities.provenance import ProvenanceActivities

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "adding-a-workflow-type.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_skeleton_is_about_80_lines() -> None:
    blocks = _blocks()
    assert len(blocks) == 2
    assert 70 <= sum(len(b.splitlines()) for b in blocks) <= 140


@pytest.fixture(scope="module")
def tally(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("guide")
    package = root / "guide_tally"
    package.mkdir()
    state, flow = _blocks()
    (package / "__init__.py").write_text("")
    (package / "tally_state.py").write_text(state)
    (package / "tally.py").write_text(flow)
    sys.path.insert(0, str(root))
    try:
        import guide_tally.tally as module

        yield module
    finally:
        sys.path.remove(str(root))


@workflow.defn(sandboxed=False)
class LaunderTally:
    @workflow.run
    async def run(self, job: dict[str, Any]) -> None:
        workflow.continue_as_new(job["input"], workflow="Tally", task_queue=job["queue"])


async def _update(handle: Any, item: str) -> Any:
    for _ in range(50):  # a run that just continued-as-new answers "not ready" briefly
        try:
            return await handle.execute_update("tick", {"item": item})
        except WorkflowUpdateFailedError as exc:
            if "starting" not in str(exc.cause):
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("never ready")


async def test_the_skeleton_runs_refuses_and_continues_as_new(env, tally) -> None:
    queue = f"tally-{uuid.uuid4().hex[:8]}"
    check_carry = ProvenanceActivities(env.client, queue).check_carry
    async with Worker(
        env.client, task_queue=queue, workflows=[tally.Tally], activities=[check_carry]
    ):
        handle = await env.client.start_workflow(
            "Tally", {"items": ["a", "b", "c"]}, id=f"tally-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )  # fmt: skip
        first = (await handle.describe()).run_id
        await _update(handle, "a")
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await _update(handle, "zzz")
        assert getattr(err.value.cause, "type", None) == "session_error"
        await _update(handle, "b")  # the second message: the run continues-as-new
        await _update(handle, "c")
        assert await handle.result() == {"ticked": ["a", "b", "c"], "left": []}
        assert (await handle.describe()).run_id != first

        # A foreign workflow continuing-as-new into Tally with made-up state: refused.
        agent_queue = f"agent-{uuid.uuid4().hex[:8]}"
        async with Worker(env.client, task_queue=agent_queue, workflows=[LaunderTally]):
            wid = f"launder-{uuid.uuid4().hex[:8]}"
            forged = {"items": ["a"], "carried": {"items": ["a"], "ticked": ["a"]}}
            await env.client.start_workflow(
                LaunderTally.run, {"input": forged, "queue": queue}, id=wid,
                task_queue=agent_queue,
            )  # fmt: skip
            with pytest.raises(WorkflowFailureError) as failed:
                await env.client.get_workflow_handle(wid).result(follow_runs=True)
        assert "'LaunderTally' on task queue" in str(failed.value.cause)
