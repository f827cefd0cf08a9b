"""Load: many concurrent sessions walked through their phases with 1, then 2 worker
processes, against raw Temporal updates at the same concurrency in the same run.

A dev server on a SQLite file (as ``phasegate server`` runs it); phasegate workers
are ``python -m phasegate.worker`` processes, the baseline's workers
(``RawUpdateWorkflow``) as many separate processes. For each worker count:

1. raw: ``--sessions`` trivial workflows each get ``--phases`` updates back to back,
   all at once: updates/s and p50/p95 latency (again after step 2; the mean is the
   baseline, so drift of a shared machine hits both sides alike);
2. phasegate: ``--sessions`` sessions started (worker RSS measured with them open,
   against the same workers idle), then each walked through its ``--phases`` phases,
   all at once: advances/s, p50/p95 of an advance;
3. the histories: failed workflow tasks (must be 0) and bytes per advance (the
   serialized events of every session's runs / advances), raw bytes per update.

    .venv/bin/python bench/load.py [--sessions 200] [--phases 5] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
import time
import uuid
from pathlib import Path

import _common
from _cluster import Cluster, HistoryFigures, history_figures, rss_bytes
from _common import pct
from advance_latency import write_library
from baseline import RawUpdateWorkflow
from temporalio.client import Client

from phasegate.client.api import PhasegateClient

PER_CONNECTION = 50  # one HTTP/2 connection refuses that many concurrent blocking calls
EVIDENCE = {"done": True, "files_changed": ["a.py"], "summary": "did the work well"}
WARM_UP_SESSIONS = 4


@dataclasses.dataclass
class Round:
    """One worker count's figures."""

    workers: int
    raw_rates: tuple[float, float]
    raw_lat: list[float]
    rate: float
    lat: list[float]
    advances: int
    failures: int
    rss_per_session: float
    history: HistoryFigures
    raw_history: HistoryFigures
    raw_updates: int


async def raw_round(clients: list[Client], task_queue: str, n: int, per: int):
    """``n`` raw workflows, ``per`` updates each, all at once: (ids, updates/s, latencies)."""
    handles = [
        await clients[i % len(clients)].start_workflow(
            RawUpdateWorkflow.run, id=f"raw-{uuid.uuid4().hex[:10]}", task_queue=task_queue
        )
        for i in range(n)
    ]
    lat: list[float] = []

    async def drive(handle) -> None:
        for _ in range(per):
            t0 = time.perf_counter()
            await handle.execute_update(RawUpdateWorkflow.bump, EVIDENCE)
            lat.append(time.perf_counter() - t0)

    began = time.perf_counter()
    await asyncio.gather(*(drive(h) for h in handles))
    elapsed = time.perf_counter() - began
    for handle in handles:
        await handle.signal(RawUpdateWorkflow.finish)
    return [h.id for h in handles], n * per / elapsed, lat


async def start_sessions(pgs: list[PhasegateClient], n: int, workspace: str) -> list[str]:
    sem = asyncio.Semaphore(50)

    async def one(i: int) -> str:
        async with sem:
            return await pgs[i % len(pgs)].start("bench_v1", workspace)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def walk_all(pgs: list[PhasegateClient], sids: list[str], phases: int):
    """Walk every session at once, one submission per phase: (advances/s, latencies, failed)."""
    lat: list[float] = []
    failures = 0

    async def walk(pg: PhasegateClient, sid: str) -> None:
        nonlocal failures
        for phase in range(phases):
            t0 = time.perf_counter()
            result = await pg.submit(sid, phase, EVIDENCE, submission_id=f"{sid}-{phase}")
            lat.append(time.perf_counter() - t0)
            if not result.passed:
                failures += 1
                return

    began = time.perf_counter()
    outcomes = await asyncio.gather(
        *(walk(pgs[i % len(pgs)], s) for i, s in enumerate(sids)), return_exceptions=True
    )
    elapsed = time.perf_counter() - began
    failures += sum(isinstance(o, BaseException) for o in outcomes)
    return len(lat) / elapsed, lat, failures


def worker_rss(cluster: Cluster) -> int:
    return sum(rss_bytes(w.pid) for w in cluster.workers)


async def one_round(
    cluster: Cluster, clients: list[Client], workers: int, sessions: int, phases: int
) -> Round:
    for _ in range(workers):
        await asyncio.to_thread(cluster.start_worker)
        await asyncio.to_thread(cluster.start_raw_worker)
    try:
        pgs = [PhasegateClient(c, cluster.task_queue) for c in clients]
        workspace = str(cluster.root)
        # Warm-up: every code path the walk takes is loaded before idle RSS is read.
        await walk_all(pgs, await start_sessions(pgs, WARM_UP_SESSIONS, workspace), phases)
        raw_queue = f"{cluster.task_queue}-raw"
        raw_ids, raw_before, raw_lat = await raw_round(clients, raw_queue, sessions, phases)
        idle = worker_rss(cluster)
        sids = await start_sessions(pgs, sessions, workspace)
        rss_per_session = (worker_rss(cluster) - idle) / sessions
        rate, lat, failures = await walk_all(pgs, sids, phases)
        # The baseline again after the walk: a shared machine drifts, the mean evens it.
        _, raw_after, raw_lat_after = await raw_round(clients, raw_queue, sessions, phases)
        raw_lat += raw_lat_after
        history = await history_figures(clients[0], sids)
        raw_history = await history_figures(clients[0], raw_ids)
    finally:
        await asyncio.to_thread(cluster.stop_workers)
    return Round(
        workers,
        (raw_before, raw_after),
        raw_lat,
        rate,
        lat,
        len(lat),
        failures,
        rss_per_session,
        history,
        raw_history,
        sessions * phases,
    )


def report(r: Round) -> None:
    ms = 1000
    print(f"{r.workers} worker process{'es' if r.workers > 1 else ''}:", flush=True)
    raw_rate = sum(r.raw_rates) / 2
    print(
        f"  raw updates    {raw_rate:7.1f}/s   p50 {pct(r.raw_lat, 50) * ms:7.1f} ms"
        f"   p95 {pct(r.raw_lat, 95) * ms:7.1f} ms   (baseline; {r.raw_rates[0]:.1f} "
        f"before, {r.raw_rates[1]:.1f} after)"
    )
    print(
        f"  advances       {r.rate:7.1f}/s   p50 {pct(r.lat, 50) * ms:7.1f} ms"
        f"   p95 {pct(r.lat, 95) * ms:7.1f} ms   {r.rate / raw_rate:.2f}x raw"
    )
    print(
        f"  failed workflow tasks {r.history.failed_workflow_tasks} "
        f"(raw {r.raw_history.failed_workflow_tasks}), failed walks {r.failures}, "
        f"advances {r.advances}/{r.raw_updates}"
    )
    print(f"  worker RSS per open session {r.rss_per_session / 1024:.1f} KiB")
    per_adv = r.history.bytes / max(1, r.advances)
    per_raw = r.raw_history.bytes / max(1, r.raw_updates)
    print(
        f"  history bytes per advance {per_adv:.0f} B (raw {per_raw:.0f} B per update, "
        f"{per_adv / per_raw:.1f}x); {r.history.events / max(1, r.advances):.1f} events "
        f"per advance (raw {r.raw_history.events / max(1, r.raw_updates):.1f})",
        flush=True,
    )
    top = r.history.bytes_by_type.most_common(3)
    print(
        "  largest per advance: "
        + ", ".join(f"{name.lower()} {size / max(1, r.advances):.0f} B" for name, size in top),
        flush=True,
    )


async def main(sessions: int, phases: int, worker_counts: list[int], in_memory: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="phasegate-load-") as tmp:
        root = Path(tmp)
        write_library(root / "library", phases)
        cluster = Cluster(root, root / "library", in_memory=in_memory)
        await asyncio.to_thread(cluster.start_server)
        try:
            clients = [await cluster.client() for _ in range(max(1, sessions // PER_CONNECTION))]
            print(
                f"{sessions} concurrent sessions x {phases} phases; dev server "
                + ("in memory" if in_memory else "on a SQLite file"),
                flush=True,
            )
            for workers in worker_counts:
                report(await one_round(cluster, clients, workers, sessions, phases))
        finally:
            await asyncio.to_thread(cluster.stop)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--phases", type=int, default=5)
    parser.add_argument("--workers", default="1,2", help="worker process counts, in turn")
    parser.add_argument(
        "--in-memory", action="store_true", help="dev server without a database file"
    )
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    _common.run(main(args.sessions, args.phases, counts, args.in_memory))
