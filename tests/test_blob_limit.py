"""The dev server (``phasegate server``, the test kit) refuses payloads over 1.5 MiB:
a multi-megabyte message never lands in a session's history, and the session keeps
answering."""

from __future__ import annotations

import time

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError
from topology_helpers import until, write_library

from phasegate.client.api import PhasegateClient
from phasegate.client.devserver import BLOB_SIZE_ERROR_BYTES, server_command
from phasegate.domain.errors import PayloadTooLarge, PhasegateError
from phasegate.domain.session.messages import MAX_EVIDENCE_BYTES_LIMIT, CheckpointSubmission
from phasegate.testing import dev_server_options
from phasegate.workflows.gated_session import GatedSession

BIG = 1_900_000  # under Temporal's default 2 MiB limit, over phasegate's


def test_server_and_test_kit_run_with_the_lower_limit():
    assert MAX_EVIDENCE_BYTES_LIMIT < BLOB_SIZE_ERROR_BYTES < BIG < 2 * 1024 * 1024
    setting = f"limit.blobSize.error={BLOB_SIZE_ERROR_BYTES}"
    assert setting in server_command()
    assert setting in dev_server_options()["dev_server_extra_args"]


async def history_bytes(pg: PhasegateClient, sid: str) -> int:
    return len((await pg.handle(sid).fetch_history()).to_json())


async def test_oversized_messages_stay_out_of_history(env, settings_for, run_worker, tmp_path):
    lib = write_library(tmp_path / "lib", "blob_v1", 2, {})
    settings = settings_for(lib)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("blob_v1", str(tmp_path))
        await pg.wait_started(sid)
        before = await history_bytes(pg, sid)

        # A signal lands in history before any handler runs (whatever its name, handled
        # or not): the server refuses it.
        with pytest.raises(RPCError, match="Blob data size exceeds limit"):
            await pg.handle(sid).signal("checkpoint", {"phase": 0, "evidence": {"b": "x" * BIG}})

        # Over the evidence cap, under the blob limit: the update's validator refuses it.
        t0 = time.monotonic()
        with pytest.raises(PayloadTooLarge):
            await pg.submit(sid, 0, {"done": True, "blob": "x" * (MAX_EVIDENCE_BYTES_LIMIT + 1)})
        assert time.monotonic() - t0 < 5

        # Over the blob limit: the validator's refusal carries the request, which the
        # worker may not upload, so the update fails (after ~20 s: the workflow task is
        # retried until the server drops the update) and nothing is written.
        big = CheckpointSubmission(phase=0, evidence={"done": True, "blob": "x" * BIG})
        with pytest.raises((WorkflowUpdateFailedError, RPCError)):
            await pg.handle(sid).execute_update(GatedSession.submit_checkpoint, big)

        async def answers() -> bool:
            try:
                await pg.status(sid)
            except PhasegateError:  # "Workflow Task in failed state", briefly
                return False
            return True

        await until(answers, timeout=10)
        assert await history_bytes(pg, sid) - before < 64 * 1024
        status = await pg.status(sid)
        assert status.current_phase == 0 and status.attempts == 0
        assert (await pg.submit(sid, 0, {"done": True})).passed


async def test_a_flood_of_big_signals_cannot_kill_a_session(
    env, settings_for, run_worker, tmp_path
):
    # Review finding: 37 signals of 1.45 MB filled 53 MB of history and the server
    # terminated the session. The dev server takes at most MAX_SIGNALS_PER_RUN a run.
    import asyncio

    from phasegate.client.devserver import MAX_SIGNALS_PER_RUN

    lib = write_library(tmp_path / "lib", "flood_v1", 2, {})
    settings = settings_for(lib)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("flood_v1", str(tmp_path))
        blob = {"b": "x" * 1_400_000}

        async def one(n: int) -> bool:
            try:
                await pg.handle(sid).signal(f"noise_{n}", blob)
                return True
            except RPCError:
                return False

        landed = sum(await asyncio.gather(*(one(n) for n in range(MAX_SIGNALS_PER_RUN + 15))))
        assert landed <= MAX_SIGNALS_PER_RUN + 1  # a continue-as-new may open a new run
        status = await pg.status(sid)  # still answering, still running
        assert status.status == "active"
        desc = await pg.handle(sid).describe()
        assert desc.status is not None and desc.status.name in ("RUNNING", "CONTINUED_AS_NEW")
