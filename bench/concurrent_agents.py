"""Many agents at once: advances per second and client calls per advance, at 200
concurrent sessions, vs raw Temporal updates per second on the same server.

Each session is walked by ``phasegate.testing.ScriptedAgent``: it builds evidence
from the gate's JSON Schema and takes the next phase from the advance's result,
so an advance costs one call. For comparison the same run also walks sessions
the old way (status + phase query before every submission: three calls per
advance). The baseline: every session replaced by a trivial workflow receiving
as many raw updates, with the same concurrency.

    .venv/bin/python bench/concurrent_agents.py [--sessions 200] [--phases 10]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path

import _common
from _common import bench_environment, start_bench_worker, stop_bench_worker
from advance_latency import write_library
from baseline import RawUpdateWorkflow

from phasegate.client.api import PhasegateClient
from phasegate.domain.messages import PhaseView
from phasegate.testing import ScriptedAgent, complete_evidence


class QueryEveryPhase(ScriptedAgent):
    """The agent before the advance carried the next view: it asks status + phase first."""

    async def walk(self, session_id: str):  # type: ignore[override]
        while True:
            view = await self._current(session_id)
            if view is None:
                return await self.client.status(session_id)
            result = await self.client.submit(session_id, view.phase, self.evidence_for(view))
            self.steps.append(result)  # type: ignore[arg-type]
            assert result.passed, result.problems


async def walk_all(pg: PhasegateClient, sids: list[str], agent_cls: type[ScriptedAgent]):
    agents = [agent_cls(pg, {"*": _evidence}) for _ in sids]
    began = time.perf_counter()
    finals = await asyncio.gather(*(a.walk(s) for a, s in zip(agents, sids, strict=True)))
    elapsed = time.perf_counter() - began
    assert all(f.status == "completed" for f in finals)
    advances = sum(len(a.steps) for a in agents)
    calls = advances + sum(a.queries for a in agents)
    return advances / elapsed, calls / advances


def _evidence(view: PhaseView) -> dict:
    return complete_evidence({}, view)


async def raw_updates(client, task_queue: str, sessions: int, per: int) -> float:
    handles = [
        await client.start_workflow(
            RawUpdateWorkflow.run, id=f"raw-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        for _ in range(sessions)
    ]

    async def drive(h) -> None:
        for _ in range(per):
            await h.execute_update(RawUpdateWorkflow.bump, {})

    began = time.perf_counter()
    await asyncio.gather(*(drive(h) for h in handles))
    elapsed = time.perf_counter() - began
    for h in handles:
        await h.signal(RawUpdateWorkflow.finish)
    return sessions * per / elapsed


async def start_sessions(pg: PhasegateClient, n: int) -> list[str]:
    sem = asyncio.Semaphore(50)

    async def one() -> str:
        async with sem:
            return await pg.start("bench_v1", "/tmp")

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def main(sessions: int, phases: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        library = Path(tmp) / "library"
        write_library(library, phases)
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        async with await bench_environment() as env:
            worker = start_bench_worker(
                env.client.service_client.config.target_host, task_queue, str(library), tmp
            )
            try:
                pg = PhasegateClient(env.client, task_queue)
                print(f"{sessions} concurrent sessions x {phases} phases", flush=True)
                raw = await raw_updates(env.client, f"{task_queue}-raw", sessions, phases)
                print(f"raw updates:          {raw:7.1f}/s (baseline)", flush=True)
                old, old_calls = await walk_all(
                    pg, await start_sessions(pg, sessions), QueryEveryPhase
                )
                print(
                    f"advances, query first: {old:6.1f}/s  {old_calls:.2f} calls/advance  "
                    f"{old / raw:.2f}x raw",
                    flush=True,
                )
                new, new_calls = await walk_all(
                    pg, await start_sessions(pg, sessions), ScriptedAgent
                )
                print(
                    f"advances, view in result: {new:5.1f}/s  {new_calls:.2f} calls/advance  "
                    f"{new / raw:.2f}x raw",
                    flush=True,
                )
            finally:
                stop_bench_worker(worker)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--phases", type=int, default=10)
    args = parser.parse_args()
    _common.run(main(args.sessions, args.phases))
