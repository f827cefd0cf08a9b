"""Record sealed-prefetch GatedSession histories for the replay test
(``tests/test_sealed_replay.py``).

    .venv/bin/python tests/histories/sealed/record_sealed.py

A session on a worker holding ``ring.json`` (a test key ring, committed: it protects
nothing) walks the ``sealed_v1`` fixture workflow with a failed attempt, a rollback
(a second prefetch of the same phase) and a continue-as-new, so its histories hold
sealed prefetches that were taken, replaced and carried over. Recorded before
PHASEGATE_PREFETCH_AHEAD: one phase a prefetch; since (sealed_walk_01a21b0f): the run's
first prefetch a sealed window of every phase ahead, and the rollback's a window again. They replay only with the
ring (a replayer without it fails with ``seal_key_missing``): keep them in this folder,
out of the keyless replay of ``tests/histories/*.json``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/: sealed_helpers

from sealed_helpers import EVIDENCE, PHASES, WORKFLOW, wait_prefetches, write_library
from temporalio.testing import WorkflowEnvironment

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import ControlRequest, SessionOptions
from phasegate.domain.settings import Settings
from phasegate.testing import dev_server_options
from phasegate.worker import build_worker

RING = HERE / "ring.json"


async def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-record-sealed-"))
    ring = tmp / "ring.json"  # a private copy: a committed file is world-readable
    ring.write_text(RING.read_text())
    ring.chmod(0o600)
    async with await WorkflowEnvironment.start_local(**dev_server_options()) as env:
        settings = Settings(
            task_queue="record-sealed",
            home=str(tmp / "home"),
            library_paths=[str(write_library(tmp))],
            allow_unsigned_approvals=True,
            seal_keys_file=str(ring),
        )
        pg = PhasegateClient(env.client, settings.task_queue)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            async with build_worker(env.client, settings, executor=pool):
                sid = "sealed-walk"
                options = SessionOptions(continue_as_new_after_events=40)
                await pg.start(WORKFLOW, str(tmp), options=options, session_id=sid)
                first_run = (await pg.handle(sid).describe()).run_id
                await wait_prefetches(env.client, sid, 1)
                assert not (await pg.submit(sid, 0, {"done": True})).passed
                assert (await pg.submit(sid, 0, EVIDENCE)).passed
                assert (await pg.submit(sid, 1, EVIDENCE)).passed
                rollback = ControlRequest(
                    action="rollback", to_phase=1, actor="lead", reason="again"
                )
                await pg.control(sid, rollback)
                await asyncio.sleep(1)
                for phase in range(1, PHASES):
                    assert (await pg.submit(sid, phase, EVIDENCE)).passed
                await pg.result(sid)
        run_id: str | None = first_run
        while run_id:
            history = await env.client.get_workflow_handle(sid, run_id=run_id).fetch_history()
            name = f"sealed_walk_{run_id[:8]}--{sid}.json"
            if b"binary/phasegate-sealed" in history.SerializeToString():
                (HERE / name).write_text(history.to_json())
                print(f"recorded {name} ({len(history.events)} events)")
            else:  # a run on the last phase prefetches nothing: nothing sealed to replay
                print(f"skipped {name}: nothing sealed in it")
            last = history.events[-1]
            attrs = last.workflow_execution_continued_as_new_event_attributes
            run_id = attrs.new_execution_run_id or None


if __name__ == "__main__":
    asyncio.run(main())
