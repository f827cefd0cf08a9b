"""Sessions at scale: many open sessions of a shipped workflow on one worker process.

Starts ``--sessions`` raw workflows (the baseline: a trivial workflow waiting for updates,
served from the same worker process, polled and capped as phasegate's main worker), then
as many sessions of ``production_code_v2`` (one dev server, one worker process as
``phasegate worker`` builds it, agents on their own connections). Reports, from one run:

- start rate: workflows started per second by the clients (50 in flight at a time);
- ready rate: sessions whose definition is loaded and first phase rendered (their
  ``PhasegateStatus`` search attribute left ``starting``), per second from the first start
  to the last ready (the server's event times), and its ratio to the start rate (target
  >= 0.5x); the same for the raw workflows (ready: their first workflow task completed),
  which is what the server and one worker process reach for a workflow that does nothing,
  and the sessions' ready rate as a ratio of it;
- worker RSS: before the first session and with every session open, per open session;
- a submission to any open session vs a raw update to any raw workflow: ``--probes``
  of each, interleaved, each to a different random session / raw workflow, most of which
  the worker's workflow cache (1,000 runs a worker by default) no longer holds and so
  replays; p50/p95 and the ratio of p95s (target <= 2x).

    .venv/bin/python bench/scale_sessions.py [--sessions 10000] [--probes 300] [--sealed]

``--sealed``: the worker holds a seal key ring, so each session's first workflow task
renders its phases ahead (sealed) instead of the next phase only.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _common
from _common import (
    bench_environment,
    ms,
    pct,
    seal_ring,
    start_bench_worker,
    stop_bench_worker,
)
from baseline import RawUpdateWorkflow
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

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


def _session_ready(event: HistoryEvent) -> bool:
    """A session is ready at its first ``PhasegateStatus`` upsert (loaded and rendered)."""
    return "PhasegateStatus" in (
        event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    )


def _raw_ready(event: HistoryEvent) -> bool:
    """A raw workflow is ready once its first workflow task completed."""
    return event.HasField("workflow_task_completed_event_attributes")


async def ready_span(
    client: Client, ids: list[str], ready_at: Callable[[HistoryEvent], bool], what: str
) -> float:
    """Seconds, in the server's own event times, from the first workflow's start to the
    last one's ``ready_at`` event; waits (polling the histories not yet ready) until every
    workflow got there. Also prints where a workflow's wait went: its workflow tasks until
    ready, queued (scheduled to started: waiting for the worker to poll) and in the worker
    (started to completed)."""
    first: dict[str, float] = {}
    ready: dict[str, float] = {}
    failed: set[str] = set()
    queued: dict[str, list[float]] = {}
    working: dict[str, list[float]] = {}

    async def one(wid: str) -> None:
        marks: dict[str, float] = {}
        queued[wid], working[wid] = [], []
        async for event in client.get_workflow_handle(wid).fetch_history_events():
            when = event.event_time.ToDatetime().timestamp()
            if event.HasField("workflow_execution_started_event_attributes"):
                first[wid] = when
            elif event.HasField("workflow_task_scheduled_event_attributes"):
                marks["scheduled"] = when
            elif event.HasField("workflow_task_started_event_attributes"):
                queued[wid].append(when - marks["scheduled"])
                marks["started"] = when
            elif event.HasField("workflow_task_completed_event_attributes"):
                working[wid].append(when - marks["started"])
            elif event.HasField("workflow_task_failed_event_attributes"):
                failed.add(wid)
            if ready_at(event):
                ready[wid] = when
                return

    waiting = list(ids)
    while waiting:
        await in_batches(len(waiting), lambda i, these=waiting: one(these[i]))
        waiting = [wid for wid in waiting if wid not in ready]
        if waiting:
            print(f"  {what}: {len(ids) - len(waiting)}/{len(ids)} ready", flush=True)
            await asyncio.sleep(2.0)
    tasks = [t for wid in ids for t in working[wid]]
    waits = [t for wid in ids for t in queued[wid]]
    print(
        f"  {what}: failed workflow tasks before ready: {len(failed)}; workflow tasks until "
        f"ready: {len(tasks) / len(ids):.2f} each; queued p50 {ms(pct(waits, 50))} "
        f"p95 {ms(pct(waits, 95))}, in the worker p50 {ms(pct(tasks, 50))} "
        f"p95 {ms(pct(tasks, 95))}",
        flush=True,
    )
    return max(ready.values()) - min(first.values())


async def wait_raw_ready(raws: list[WorkflowHandle], began: float) -> None:
    """Until the last started raw workflows ran their first workflow task (the backlog is
    served about in order; ready_span then checks every one). Reads 50 histories a second,
    not all of them, so the wait adds little to the server's load."""
    last = raws[-IN_FLIGHT:]
    while True:
        done = 0
        for handle in last:
            async for event in handle.fetch_history_events():
                if _raw_ready(event):
                    done += 1
                    break
        print(
            f"  raw workflows: the last {len(last)} started: {done} ready at "
            f"{time.perf_counter() - began:6.1f} s",
            flush=True,
        )
        if done == len(last):
            return
        await asyncio.sleep(1.0)


async def raw_burst(clients: list[Client], n: int, task_queue: str) -> tuple[list, float, float]:
    """Start ``n`` raw workflows as the sessions will be (50 in flight); their handles,
    seconds to start them all, and seconds from the first start to the last ready."""
    began = time.perf_counter()
    raws = await in_batches(
        n,
        lambda i: clients[i % len(clients)].start_workflow(
            RawUpdateWorkflow.run, id=f"raw-{i}-{uuid.uuid4().hex[:6]}", task_queue=task_queue
        ),
    )
    started = time.perf_counter() - began
    print(f"  started {n} raw workflows in {started:.1f} s", flush=True)
    await wait_raw_ready(raws, began)
    ready = await ready_span(clients[0], [r.id for r in raws], _raw_ready, "raw workflows")
    return raws, started, ready


async def main(sessions: int, probes: int, sealed: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-scale-"))
    workspace = workspace_for(WORKFLOW, tmp / "ws")
    async with await bench_environment() as env:
        address = env.client.service_client.config.target_host
        task_queue = f"scale-{uuid.uuid4().hex[:6]}"
        worker = start_bench_worker(
            address, task_queue, SHIPPED_LIBRARY, str(tmp / "home"),
            {"allow_unsigned_approvals": True,
             "seal_keys_file": seal_ring(tmp) if sealed else None},
            raw_as_phasegate=True,  # the two bursts run one after the other
        )  # fmt: skip
        try:
            clients = [
                await connect(Settings(temporal_address=address))
                for _ in range(max(1, min(sessions, 1000) // PER_CONNECTION))
            ]
            pgs = [PhasegateClient(c, task_queue) for c in clients]
            print(f"{sessions} raw workflows, then {sessions} {WORKFLOW} sessions"
                  f"{' (sealed)' if sealed else ''}, on one worker process")  # fmt: skip
            raws, raw_started, raw_ready = await raw_burst(clients, sessions, f"{task_queue}-raw")

            rss0 = rss_kib(worker.pid)
            print(f"  worker RSS {rss0 / 1024:.0f} MiB", flush=True)
            began = time.perf_counter()
            sids = await in_batches(
                sessions, lambda i: pgs[i % len(pgs)].start(WORKFLOW, str(workspace), wait=False)
            )
            started = time.perf_counter() - began
            print(f"  started {sessions} sessions in {started:.1f} s", flush=True)
            await wait_ready(env.client, sessions, task_queue, began)
            ready = await ready_span(env.client, sids, _session_ready, "sessions")
            rss1 = rss_kib(worker.pid)

            view = await pgs[0].phase(sids[0])  # all sessions are alike: one view
            assert isinstance(view, PhaseView), view
            evidence = ScriptedAgent(pgs[0], known_good(WORKFLOW)).evidence_for(view)
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
            report(
                sessions, Rates(started, ready), Rates(raw_started, raw_ready), rss0, rss1,
                raw_t, sub_t,
            )  # fmt: skip
        finally:
            stop_bench_worker(worker)


@dataclass
class Rates:
    """Seconds to start a burst (clients' clock) and from its first start to its last
    ready (the server's event times)."""

    started: float
    ready: float


def report(
    n: int, sessions: Rates, raw: Rates, rss0: int, rss1: int, raw_t: list[float],
    sub_t: list[float],
) -> None:  # fmt: skip
    for what, r in (("raw workflows", raw), ("sessions", sessions)):
        print(
            f"{what + ':':15s} started {n / r.started:6.1f}/s, ready {n / r.ready:6.1f}/s: "
            f"{r.started / r.ready:.2f}x the start rate"
        )
    print(
        f"ready rate:     sessions {sessions.started / sessions.ready:.2f}x their start rate "
        f"(target >= 0.5x; raw workflows {raw.started / raw.ready:.2f}x), "
        f"{raw.ready / sessions.ready:.2f}x the raw workflows' ready rate"
    )
    print(
        f"worker RSS:     {rss0 / 1024:.0f} -> {rss1 / 1024:.0f} MiB with {n} sessions open, "
        f"{(rss1 - rss0) / n:.1f} KiB per open session"
    )
    print(f"raw update to any raw workflow   p50 {ms(pct(raw_t, 50))}  p95 {ms(pct(raw_t, 95))}")
    print(
        f"submission to any open session   p50 {ms(pct(sub_t, 50))}  p95 {ms(pct(sub_t, 95))}  "
        f"p95 ratio {pct(sub_t, 95) / pct(raw_t, 95):.2f}x (target <= 2x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument(
        "--sealed", action="store_true", help="the worker holds a seal key ring (phases ahead)"
    )
    args = parser.parse_args()
    _common.run(main(args.sessions, min(args.probes, args.sessions), args.sealed))
