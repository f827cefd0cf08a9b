"""Sealed prefetch: the advance of a session whose worker seals its prefetched phase
(``PHASEGATE_SEAL_KEYS``) vs a raw Temporal update, and vs the same advance unsealed.

Two worker processes on one dev server: one holding a seal key ring, one without. The
measuring client holds no key (as an agent's). Each advance is timed right after a raw
update on the same client, and followed by the agent's pause as it works on the phase it
just got (the next prefetch lands in it); sealed and unsealed sessions take turns, which
goes first alternating. Prints p50/p95 of
each and the ratios from this run. Target: sealed advance p50 <= 1.3x raw p50.

    .venv/bin/python bench/sealed_prefetch.py [--phases 200] [--think-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path

import _common
from _common import bench_environment, ms, pct, start_bench_worker, stop_bench_worker
from advance_latency import write_library
from baseline import RawUpdateWorkflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import CheckpointSubmission
from phasegate.workflows.gated_session import GatedSession

EVIDENCE = {"done": True, "files_changed": ["a.py"], "summary": "did the work well"}


async def _history_counts(client: Client, sid: str) -> tuple[int, int]:
    """(sealed payloads, local renders at an advance) over the session's runs."""
    sealed = renders = 0
    async for event in client.get_workflow_handle(sid).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            for p in event.activity_task_completed_event_attributes.result.payloads:
                sealed += p.metadata.get("encoding") == b"binary/phasegate-sealed"
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            renders += b"render_phase" in event.marker_recorded_event_attributes.SerializeToString()
    return sealed, renders


async def measure(
    client: Client, queues: dict[str, str], tmp: Path, phases: int, warmup: int, think: float
) -> tuple[dict[str, list[float]], dict[str, str]]:
    raw = await client.start_workflow(
        RawUpdateWorkflow.run, id=f"raw-{uuid.uuid4()}", task_queue=f"{queues['sealed']}-raw"
    )
    handles = {}
    sessions = {}
    for kind, queue in queues.items():
        pg = PhasegateClient(client, queue)
        sessions[kind] = await pg.start("bench_v1", str(tmp))
        handles[kind] = pg.handle(sessions[kind])
    times: dict[str, list[float]] = {"raw": [], "sealed": [], "unsealed": []}
    await asyncio.sleep(0.5)  # the first prefetches land
    for i in range(phases - 1):
        # Each advance right after a raw update, both after the agent's pause (the previous
        # advance's background prefetch has landed); which kind goes first alternates.
        for kind in ("sealed", "unsealed") if i % 2 else ("unsealed", "sealed"):
            t0 = time.perf_counter()
            await raw.execute_update(RawUpdateWorkflow.bump, EVIDENCE)
            t1 = time.perf_counter()
            result = await handles[kind].execute_update(
                GatedSession.submit_checkpoint, CheckpointSubmission(phase=i, evidence=EVIDENCE)
            )
            t2 = time.perf_counter()
            assert result.passed and result.next_phase and result.next_phase.phase == i + 1
            if i >= warmup:
                times["raw"].append(t1 - t0)
                times[kind].append(t2 - t1)
            await asyncio.sleep(think)  # the agent works on the phase it just got
    await raw.signal(RawUpdateWorkflow.finish)
    return times, sessions


async def main(phases: int, warmup: int, think: float) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-bench-"))
    write_library(tmp / "lib", phases)
    ring = tmp / "seal-ring.json"
    keys.new_seal_ring(ring)
    queues = {"sealed": "bench-sealed", "unsealed": "bench-plain"}
    load_before = os.getloadavg()
    async with await bench_environment() as env:
        client = env.client  # the agent's: no seal key
        address = client.service_client.config.target_host
        workers = [
            start_bench_worker(
                address,
                queues["sealed"],
                str(tmp / "lib"),
                str(tmp / "home-sealed"),
                {"seal_keys_file": str(ring)},
            ),
            start_bench_worker(address, queues["unsealed"], str(tmp / "lib"), str(tmp / "home")),
        ]
        try:
            times, sessions = await measure(client, queues, tmp, phases, warmup, think)
            sealed_payloads, renders = await _history_counts(client, sessions["sealed"])
        finally:
            for worker in workers:
                stop_bench_worker(worker)
    figures = {f"{k}_{q}": pct(v, q) for k, v in times.items() for q in (50, 95)}
    figures["ratio_sealed"] = figures["sealed_50"] / figures["raw_50"]
    figures["ratio_unsealed"] = figures["unsealed_50"] / figures["raw_50"]
    load_after = os.getloadavg()
    print(
        f"sealed prefetch: {len(times['sealed'])} sealed and {len(times['unsealed'])} unsealed "
        f"advances, each after a raw update (after {warmup} warm-up rounds, "
        f"{think * 1000:.0f} ms agent think time); load {load_before[0]:.1f} -> "
        f"{load_after[0]:.1f} on {os.cpu_count()} cores"
    )
    for kind, label in (
        ("raw", "raw update          "),
        ("sealed", "advance, sealed     "),
        ("unsealed", "advance, unsealed   "),
    ):
        print(f"  {label} p50 {ms(figures[f'{kind}_50'])}   p95 {ms(figures[f'{kind}_95'])}")
    verdict = "OK" if figures["ratio_sealed"] <= 1.3 else "OVER TARGET"
    print(
        f"  ratio sealed advance/raw p50 = {figures['ratio_sealed']:.2f}x (target <= 1.30x: "
        f"{verdict}); unsealed advance/raw = {figures['ratio_unsealed']:.2f}x; sealed/unsealed "
        f"= {figures['sealed_50'] / figures['unsealed_50']:.2f}x"
    )
    print(
        f"  sealed session: {sealed_payloads} sealed prefetches in history, {renders} phases "
        "rendered at their advance (a prefetch that missed)"
    )
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--think-ms", type=float, default=50.0)
    args = parser.parse_args()
    _common.run(main(args.phases, args.warmup, args.think_ms / 1000))
