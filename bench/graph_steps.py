"""Step graph overhead: an outside agent's step report vs a raw Temporal update, a
function-handler step vs a raw activity round trip, and the history one step adds.

Same in-memory dev server, same run, one worker process apart from the measuring
client (this file's ``--serve``): phasegate's worker, and beside it on
``<queue>-raw`` the two baselines, a workflow whose update only bumps a counter
(``baseline.RawUpdateWorkflow``) and one that runs trivial activities one after
another (``_orch_baseline.RawActivitiesWorkflow``):

- report: ``report_step`` on a one-step loop graph (outside step, outcome
  ``iterate`` back to itself), interleaved with a raw update on a trivial workflow
  (raw, report, raw, report, ...), client wall time; the agent "thinks" between
  pairs, as it reads and works the step it got;
- function step: a graph whose one step is worked by the shipped handler
  ``phasegate.agents.graph_handlers:assess_confidence`` (always allowed) and
  iterates to itself until ``max_rounds``: one step is the handler activity and the
  workflow task between (runs since graph-render-inline render no step no one reads), measured from the server's history as the time from one
  ``run_step_function`` schedule to the next; the baseline is the same measure
  between trivial activities (``_orch_baseline.RawActivitiesWorkflow``);
- history: bytes of a run's events per step, leaving out the first event (the start
  input: the whole graph, pinned) and the last (the result: the whole path), which
  are printed apart.

    .venv/bin/python bench/graph_steps.py [--steps 200] [--warmup 20]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import itertools
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _common
from _common import bench_environment, ms, pct, stop_bench_worker
from _orch_baseline import RawActivitiesWorkflow, noop
from baseline import RawUpdateWorkflow, echo
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from phasegate import SHIPPED_LIBRARY
from phasegate.client.graphs import GraphClient
from phasegate.domain.graph.messages import StepReport
from phasegate.domain.graph.model import Graph
from phasegate.domain.settings import Settings
from phasegate.temporal import connect
from phasegate.worker import build_worker
from phasegate.workflows import StepGraph

TASK_QUEUE = "bench-graph"
ROUNDS = 6  # function runs and raw-activity runs, alternated
ACTIONS = (
    "## Visit {{ visit }}\n\nRead the request, do the work, then report this step with "
    "`iterate` to go round again or `ok` to finish.\n" + "Instructions line.\n" * 20
)


def outside_graph(steps: int) -> Graph:
    """One outside step that loops to itself: each report is one step."""
    return Graph.model_validate(
        {
            "name": "bench-outside",
            "entry": "work",
            "continue_as_new_after": 10_000,
            "steps": [
                {
                    "id": "work",
                    "title": "Work the request",
                    "actions": ACTIONS,
                    "next": {"iterate": "work", "ok": None},
                    "max_visits": steps + 1,
                    "max_iterations": steps,
                }
            ],
        }
    )


def function_graph(steps: int) -> Graph:
    """One function step that iterates to itself ``steps - 1`` times, then ends ``ok``."""
    return Graph.model_validate(
        {
            "name": "bench-function",
            "entry": "think",
            "continue_as_new_after": 10_000,
            "params": {
                "confidence_target": {"type": "float", "default": 0.99},
                "max_rounds": {"type": "int", "default": steps},
            },
            "state": {"confidence": {"type": "float", "default": 0.0}},
            "steps": [
                {
                    "id": "think",
                    "title": "Assess",
                    "actions": ACTIONS,
                    "handler": "phasegate.agents.graph_handlers:assess_confidence",
                    "outcomes": ["ok", "iterate"],
                    "next": {"iterate": "think", "ok": None},
                    "max_visits": steps,
                    "max_iterations": steps,
                }
            ],
        }
    )


# ---------------------------------------------------------- the worker process
async def serve(address: str, home: str) -> None:
    """Phasegate's worker and both baselines (``<queue>-raw``) until SIGTERM; prints
    ``ready`` once they poll."""
    settings = Settings(
        temporal_address=address,
        task_queue=TASK_QUEUE,
        home=home,
        library_paths=[SHIPPED_LIBRARY],
    )
    client = await connect(settings)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        raw = Worker(
            client,
            task_queue=f"{TASK_QUEUE}-raw",
            workflows=[RawUpdateWorkflow, RawActivitiesWorkflow],
            activities=[echo, noop],
            activity_executor=pool,
        )
        async with build_worker(client, settings, executor=pool), raw:
            print("ready", flush=True)
            await stop.wait()


def start_worker(address: str, home: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", address, home], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


# ------------------------------------------------------------ history analysis
def _seconds(event: Any) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


def schedule_gaps(events: Sequence[Any], activity_type: str) -> list[float]:
    """Seconds between consecutive schedules of ``activity_type``: one step each."""
    times = [
        _seconds(ev)
        for ev in events
        if ev.HasField("activity_task_scheduled_event_attributes")
        and ev.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    ]
    return [b - a for a, b in itertools.pairwise(times)]


def sizes(events: Sequence[Any], units: int) -> tuple[float, int, int, float]:
    """(bytes per unit without the first and last events, first event bytes, last
    event bytes, events per unit)."""
    body = [ev.ByteSize() for ev in events[1:-1]]
    return sum(body) / units, events[0].ByteSize(), events[-1].ByteSize(), len(body) / units


# ------------------------------------------------------------ measurements
async def reports(
    client: Client, graphs: GraphClient, steps: int, warmup: int, think: float
) -> tuple[list[float], list[float], list[float], WorkflowHandle, WorkflowHandle]:
    raw = await client.start_workflow(
        RawUpdateWorkflow.run, id=f"raw-{uuid.uuid4()}", task_queue=f"{TASK_QUEUE}-raw"
    )
    rid = await graphs.start(outside_graph(steps + warmup))
    handle = client.get_workflow_handle(rid)
    await graphs.step(rid)  # started and rendered
    payload = {"step_id": "work", "outcome": "iterate"}
    raw_t: list[float] = []
    rep_t: list[float] = []
    local_t: list[float] = []
    for i in range(steps + warmup):
        report = StepReport(step_id="work", outcome="iterate", visit=i + 1, report_id=f"r{i}")
        # The floor of any report that enters a step and renders it before answering:
        # a raw update awaiting one trivial local activity.
        t = time.perf_counter()
        await raw.execute_update(RawUpdateWorkflow.bump_local, payload)
        local = time.perf_counter() - t
        t0 = time.perf_counter()
        await raw.execute_update(RawUpdateWorkflow.bump, payload)
        t1 = time.perf_counter()
        result = await handle.execute_update(StepGraph.report_step, report)
        t2 = time.perf_counter()
        assert result.accepted and result.next_step == "work", result
        if i >= warmup:
            raw_t.append(t1 - t0)
            rep_t.append(t2 - t1)
            local_t.append(local)
        await asyncio.sleep(think)  # the agent reads the step it got and works on it
    final = StepReport(step_id="work", outcome="ok", visit=steps + warmup + 1)
    assert (await handle.execute_update(StepGraph.report_step, final)).status == "completed"
    await raw.signal(RawUpdateWorkflow.finish)
    await raw.result()
    return raw_t, rep_t, local_t, raw, handle


async def main(steps: int, warmup: int, think: float) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-bench-graph-"))
    async with await bench_environment() as env:
        client = env.client
        address = client.service_client.config.target_host
        worker = start_worker(address, str(tmp / "home"))
        try:
            graphs = GraphClient(client, TASK_QUEUE)
            raw_t, rep_t, local_t, raw, outside = await reports(
                client, graphs, steps, warmup, think
            )
            raw_hist = (await raw.fetch_history()).events
            out_hist = (await outside.fetch_history()).events
            # Function steps, then the raw activities, then again: drift hits both alike.
            fn_gaps: list[float] = []
            act_gaps: list[float] = []
            per_round: list[float] = []
            fn_hist: Any = None
            act_hist: Any = None
            for _ in range(ROUNDS):
                rid = await graphs.start(function_graph(steps // ROUNDS + warmup))
                summary = await graphs.result(rid)
                assert summary.status == "completed", summary
                fn_hist = (await client.get_workflow_handle(rid).fetch_history()).events
                fn_gaps += schedule_gaps(fn_hist, "run_step_function")[warmup:]
                act = await client.start_workflow(
                    RawActivitiesWorkflow.run,
                    steps // ROUNDS + warmup,
                    id=f"raw-act-{uuid.uuid4().hex[:8]}",
                    task_queue=f"{TASK_QUEUE}-raw",
                )
                await act.result()
                act_hist = (await act.fetch_history()).events
                fn_round = schedule_gaps(fn_hist, "run_step_function")[warmup:]
                act_round = schedule_gaps(act_hist, "noop")[warmup:]
                act_gaps += act_round
                per_round.append(pct(fn_round, 50) / pct(act_round, 50))
        finally:
            stop_bench_worker(worker)
    n_reports = steps + warmup + 1
    out_b, out_first, out_last, out_ev = sizes(out_hist, n_reports)
    raw_b, _, _, raw_ev = sizes(raw_hist, 2 * (steps + warmup))  # plain and local
    fn_steps = steps // ROUNDS + warmup
    fn_b, fn_first, fn_last, fn_ev = sizes(fn_hist, fn_steps)
    act_b, _, _, act_ev = sizes(act_hist, fn_steps)
    f = {
        "raw_update_p50": pct(raw_t, 50),
        "raw_update_p95": pct(raw_t, 95),
        "report_p50": pct(rep_t, 50),
        "report_p95": pct(rep_t, 95),
        "raw_activity_p50": pct(act_gaps, 50),
        "function_step_p50": pct(fn_gaps, 50),
        "function_step_p95": pct(fn_gaps, 95),
        "report_bytes": out_b,
        "raw_update_bytes": raw_b,
        "function_bytes": fn_b,
        "raw_activity_bytes": act_b,
    }
    f["raw_local_p50"] = pct(local_t, 50)
    f["report_ratio"] = f["report_p50"] / f["raw_update_p50"]
    f["floor_ratio"] = f["raw_local_p50"] / f["raw_update_p50"]
    f["function_ratio"] = f["function_step_p50"] / f["raw_activity_p50"]
    verdict = "OK" if f["report_ratio"] <= 1.3 else "OVER TARGET"
    print(
        f"step graph overhead: {len(rep_t)} outside reports interleaved with raw updates "
        f"(after {warmup} warm-up, {think * 1000:.0f} ms think time between pairs); "
        f"{len(fn_gaps)} function steps and {len(act_gaps)} raw activities ({ROUNDS} runs each, "
        f"alternated, first {warmup} steps of each run left out)"
    )
    print(
        f"  raw update                p50 {ms(f['raw_update_p50'])}   p95 {ms(f['raw_update_p95'])}"
    )
    print(
        f"  report_step (outside)     p50 {ms(f['report_p50'])}   p95 {ms(f['report_p95'])}   "
        "(validated, applied, next step entered and its actions rendered)"
    )
    print(f"  ratio report/raw update p50 = {f['report_ratio']:.2f}x  (target <= 1.30x: {verdict})")
    print(
        f"  raw update + 1 local activity p50 {ms(f['raw_local_p50'])}: {f['floor_ratio']:.2f}x "
        "raw, the floor for a report answered after the next step's render; report = "
        f"{f['report_p50'] / f['raw_local_p50']:.2f}x that"
    )
    print(
        f"  raw activity round trip   p50 {ms(f['raw_activity_p50'])}   (schedule -> next schedule)"
    )
    print(
        f"  function-handler step     p50 {ms(f['function_step_p50'])}   "
        f"p95 {ms(f['function_step_p95'])}   (handler activity + "
        "workflow task)"
    )
    print(
        f"  ratio function step/raw activity p50 = {f['function_ratio']:.2f}x pooled; per round "
        + ", ".join(f"{r:.2f}x" for r in per_round)
    )
    print(
        f"  history per step: outside report {out_b:.0f} B / {out_ev:.1f} events "
        f"(a raw update {raw_b:.0f} B / {raw_ev:.1f}, the mean of the plain and the local-activity ones); function step {fn_b:.0f} B / "
        f"{fn_ev:.1f} events (a raw activity {act_b:.0f} B / {act_ev:.1f}); "
        f"start event (the pinned graph) {out_first} B outside / {fn_first} B function; "
        f"result event (the whole path) {out_last} B after {n_reports} steps / "
        f"{fn_last} B after {fn_steps}"
    )
    return f


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _common.run(serve(sys.argv[2], sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--think-ms",
        type=float,
        default=50.0,
        help="pause after each pair, as an agent works the step it got",
    )
    args = parser.parse_args()
    _common.run(main(args.steps, args.warmup, args.think_ms / 1000))
