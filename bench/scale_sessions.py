"""Sessions at scale: many open sessions of a shipped workflow on one worker process.

Starts ``--sessions`` sessions of ``production_code_v2`` (one dev server, one worker
process as ``phasegate worker`` builds it, agents on their own connections), and as many
raw workflows (the baseline: a trivial workflow waiting for updates, served by a worker in
the same process with the same workflow cache size). Reports, from one run:

- start rate: sessions started per second by the clients (50 in flight at a time);
- ready rate: sessions whose definition is loaded and first phase rendered (their
  ``PhasegateStatus`` search attribute left ``starting``), per second from the first start
  to the last ready, and its ratio to the start rate (target >= 0.5x);
- worker RSS: before the first session and with every session open, per open session;
- a submission to any open session vs a raw update to any raw workflow: ``--probes``
  of each, interleaved, each to a different random session / raw workflow, most of which
  the worker's workflow cache (1,000 runs a worker by default) no longer holds and so
  replays; p50/p95 and the ratio of p95s (target <= 2x).

    .venv/bin/python bench/scale_sessions.py [--sessions 10000] [--probes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import uuid
from pathlib import Path

import _common
from _common import bench_environment, ms, pct, start_bench_worker, stop_bench_worker
from baseline import RawUpdateWorkflow
from temporalio.client import Client

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import PhaseView
from phasegate.domain.settings import Settings
from phasegate.temporal import SHIPPED_LIBRARY, connect
from phasegate.testing import ScriptedAgent, known_good, workspace_for

WORKFLOW = "production_code_v2"
PER_CONNECTION = 50  # agents per connection (one HTTP/2 connection each)
IN_FLIGHT = 50


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


async def in_batches(n: int, make) -> list:
    sem = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int):
        async with sem:
            return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def wait_ready(client: Client, n: int, task_queue: str, began: float) -> None:
    """Until ``n`` sessions on ``task_queue`` left ``starting`` (as visibility shows it)."""
    query = f"TaskQueue = '{task_queue}' AND PhasegateStatus != 'starting'"
    last = -1
    while last < n:
        ready = (await client.count_workflows(query)).count
        if ready != last:
            print(f"  ready: {ready}/{n} at {time.perf_counter() - began:6.1f} s", flush=True)
            last = ready
        await asyncio.sleep(1.0)


async def ready_span(client: Client, sids: list[str]) -> float:
    """Seconds, in the server's own event times, from the first session's start to the
    last one's first ``PhasegateStatus`` upsert (once loaded and rendered). Also
    prints where a session's wait went: its workflow tasks until ready, queued (scheduled
    to started: waiting for the worker to poll) and in the worker (started to completed)."""
    first: list[float] = []
    ready: list[float] = []
    failed: list[str] = []
    queued: list[float] = []
    working: list[float] = []

    async def one(sid: str) -> None:
        marks: dict[str, float] = {}
        async for event in client.get_workflow_handle(sid).fetch_history_events():
            when = event.event_time.ToDatetime().timestamp()
            if event.HasField("workflow_execution_started_event_attributes"):
                first.append(when)
            elif event.HasField("workflow_task_scheduled_event_attributes"):
                marks["scheduled"] = when
            elif event.HasField("workflow_task_started_event_attributes"):
                queued.append(when - marks["scheduled"])
                marks["started"] = when
            elif event.HasField("workflow_task_completed_event_attributes"):
                working.append(when - marks["started"])
            elif event.HasField("workflow_task_failed_event_attributes"):
                failed.append(sid)
            elif "PhasegateStatus" in (
                event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            ):
                ready.append(when)
                return

    await in_batches(len(sids), lambda i: one(sids[i]))
    assert len(ready) == len(sids), f"{len(sids) - len(ready)} sessions never got ready"
    print(f"  failed workflow tasks before ready: {len(failed)}", flush=True)
    print(
        f"  workflow tasks until ready: {len(working) / len(sids):.2f} a session; queued "
        f"p50 {ms(pct(queued, 50))} p95 {ms(pct(queued, 95))}, in the worker "
        f"p50 {ms(pct(working, 50))} p95 {ms(pct(working, 95))}",
        flush=True,
    )
    return max(ready) - min(first)


async def main(sessions: int, probes: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-scale-"))
    workspace = workspace_for(WORKFLOW, tmp / "ws")
    async with await bench_environment() as env:
        address = env.client.service_client.config.target_host
        task_queue = f"scale-{uuid.uuid4().hex[:6]}"
        worker = start_bench_worker(
            address, task_queue, SHIPPED_LIBRARY, str(tmp / "home"),
            {"allow_unsigned_approvals": True},
        )  # fmt: skip
        try:
            clients = [
                await connect(Settings(temporal_address=address))
                for _ in range(max(1, min(sessions, 1000) // PER_CONNECTION))
            ]
            pgs = [PhasegateClient(c, task_queue) for c in clients]
            rss0 = rss_kib(worker.pid)
            print(
                f"{sessions} {WORKFLOW} sessions on one worker process; RSS {rss0 / 1024:.0f} MiB"
            )

            began = time.perf_counter()
            sids = await in_batches(
                sessions, lambda i: pgs[i % len(pgs)].start(WORKFLOW, str(workspace), wait=False)
            )
            started = time.perf_counter() - began
            print(f"  started {sessions} in {started:.1f} s", flush=True)
            await wait_ready(env.client, sessions, task_queue, began)
            ready = await ready_span(env.client, sids)
            rss1 = rss_kib(worker.pid)

            raws = await in_batches(
                sessions,
                lambda i: clients[i % len(clients)].start_workflow(
                    RawUpdateWorkflow.run, id=f"raw-{i}-{uuid.uuid4().hex[:6]}",
                    task_queue=f"{task_queue}-raw",
                ),
            )  # fmt: skip
            print(f"  started {sessions} raw workflows", flush=True)
            view = await pgs[0].phase(sids[0])  # all sessions are alike: one view
            assert isinstance(view, PhaseView), view
            evidence = ScriptedAgent(pgs[0], known_good(WORKFLOW)).evidence_for(view)
            # Probe only once the raw workflows have all run their first workflow task
            # (as the sessions have): the last started, answered, mark the backlog's end.
            await asyncio.gather(
                *(r.execute_update(RawUpdateWorkflow.bump, evidence) for r in raws[-100:])
            )
            raw_t: list[float] = []
            sub_t: list[float] = []
            for sid, raw in zip(
                random.sample(sids, probes), random.sample(raws, probes), strict=True
            ):
                t0 = time.perf_counter()
                await raw.execute_update(RawUpdateWorkflow.bump, evidence)
                t1 = time.perf_counter()
                result = await pgs[0].submit(sid, view.phase, evidence)
                t2 = time.perf_counter()
                assert result.passed, result.problems
                raw_t.append(t1 - t0)
                sub_t.append(t2 - t1)
            report(sessions, started, ready, rss0, rss1, raw_t, sub_t)
        finally:
            stop_bench_worker(worker)


def report(
    n: int, started: float, ready: float, rss0: int, rss1: int, raw: list[float], sub: list[float]
) -> None:
    start_rate, ready_rate = n / started, n / ready
    print(f"start rate:  {start_rate:7.1f} sessions/s")
    print(
        f"ready rate:  {ready_rate:7.1f} sessions/s   {ready_rate / start_rate:.2f}x the start "
        "rate (target >= 0.5x)"
    )
    print(
        f"worker RSS:  {rss0 / 1024:.0f} -> {rss1 / 1024:.0f} MiB with {n} sessions open, "
        f"{(rss1 - rss0) / n:.1f} KiB per open session"
    )
    print(f"raw update to any raw workflow   p50 {ms(pct(raw, 50))}  p95 {ms(pct(raw, 95))}")
    print(
        f"submission to any open session   p50 {ms(pct(sub, 50))}  p95 {ms(pct(sub, 95))}  "
        f"p95 ratio {pct(sub, 95) / pct(raw, 95):.2f}x (target <= 2x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--probes", type=int, default=300)
    args = parser.parse_args()
    _common.run(main(args.sessions, min(args.probes, args.sessions)))
