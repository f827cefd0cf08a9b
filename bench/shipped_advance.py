"""Advance latency of the shipped workflows (``spec_execution_v1``, ``production_code_v2``,
``test_generation_v3``), their verify checks included, vs a raw Temporal update.

An advance is a passing ``submit_checkpoint`` that returns the next phase. Sessions are
walked with the evidence that passes every shipped gate (``phasegate.testing.known_good``)
in workspaces those gates accept (``workspace_for``); before each submission the same
client times one raw update on a trivial workflow (interleaved, same server, same worker
process, same run), and one raw update that awaits one trivial local activity (the floor
of any advance that runs its file checks on the session worker). Approvals are made (unsigned, by ``lead``) but not counted as
advances. Advances whose gate ran a command (test_generation_v3's pytest phase) are
reported apart: they cost the command's own run time, not the engine's. Target: each
workflow's advance p50 <= 1.3x the raw update's p50.

    .venv/bin/python bench/shipped_advance.py [--sessions 6] [--think-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import _common
from _common import bench_environment, ms, pct, start_bench_worker, stop_bench_worker
from baseline import RawUpdateWorkflow
from temporalio.client import Client, WorkflowHandle

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import PhaseView, SessionOptions
from phasegate.temporal import SHIPPED_LIBRARY
from phasegate.testing import ScriptedAgent, known_good, unsigned_approver, workspace_for

SPEC = _common.REPO / "tests" / "fixtures" / "tasks" / "real" / "kiro-autism-center.md"
"""A real Kiro tasks.md of 21 phases: 20 dynamic advances per spec_execution_v1 session."""

EXTRA: dict = {}
PREFETCH = [True]  # SessionOptions.prefetch of the sessions walked
WORKFLOWS = ("spec_execution_v1", "production_code_v2", "test_generation_v3")


@dataclass
class Figures:
    """Seconds per kind of call for one workflow type."""

    raw: list[float] = field(default_factory=list)
    raw_local: list[float] = field(default_factory=list)  # a raw update + 1 local activity
    advance: list[float] = field(default_factory=list)  # no command check ran
    advance_checked: list[float] = field(default_factory=list)  # file checks ran
    advance_command: list[float] = field(default_factory=list)  # a command check ran
    parked: list[float] = field(default_factory=list)  # passed, now awaits approval


async def walk(
    pg: PhasegateClient,
    raw: WorkflowHandle,
    workflow_type: str,
    root: Path,
    think: float,
    figures: Figures,
) -> None:
    """Start one session and walk it to the end, timing each submission after a raw update."""
    ws = workspace_for(workflow_type, root / uuid.uuid4().hex[:8])
    options = SessionOptions(prefetch=PREFETCH[0])
    if workflow_type == "spec_execution_v1":
        shutil.copyfile(SPEC, ws / SPEC.name)  # a spec is read from inside the target
        options = SessionOptions(spec_path=str(ws / SPEC.name), prefetch=PREFETCH[0])
    sid = await pg.start(workflow_type, str(ws), options=options)
    await pg.wait_started(sid)
    agent = ScriptedAgent(pg, known_good(workflow_type), approve=unsigned_approver("lead"))
    view = await agent._current(sid)  # the agent's own walk, timed here
    while view is not None:
        evidence = agent.evidence_for(view)
        tl = time.perf_counter()
        await raw.execute_update(RawUpdateWorkflow.bump_local, evidence)
        t0 = time.perf_counter()
        await raw.execute_update(RawUpdateWorkflow.bump, evidence)
        t1 = time.perf_counter()
        result = await pg.submit(sid, view.phase, evidence)
        t2 = time.perf_counter()
        assert result.passed, (workflow_type, view.phase, result.problems)
        figures.raw.append(t1 - t0)
        figures.raw_local.append(t0 - tl)
        if isinstance(result.next_phase, PhaseView):
            if any(r.kind == "command" for r in result.verify):
                figures.advance_command.append(t2 - t1)
            else:
                figures.advance.append(t2 - t1)
                if result.verify:
                    figures.advance_checked.append(t2 - t1)
        elif result.awaiting_approval:
            figures.parked.append(t2 - t1)
        await asyncio.sleep(think)  # the agent works on the phase it just got
        if result.completed:
            view = None
        elif isinstance(result.next_phase, PhaseView):
            view = result.next_phase
        else:
            view = await agent._current(sid)  # approves, then reads


def report(workflow_type: str, f: Figures) -> float:
    raw50 = pct(f.raw, 50)
    print(f"{workflow_type}: {len(f.advance)} advances, {len(f.raw)} raw updates")
    print(f"  raw update             p50 {ms(raw50)}   p95 {ms(pct(f.raw, 95))}")
    local50 = pct(f.raw_local, 50)
    print(
        f"  raw update + 1 local activity  p50 {ms(local50)}   ratio {local50 / raw50:.2f}x "
        "(the floor of an advance that runs one local activity, e.g. its file checks)"
    )
    ratio = pct(f.advance, 50) / raw50
    verdict = "OK" if ratio <= 1.3 else "OVER TARGET"
    print(
        f"  advance                p50 {ms(pct(f.advance, 50))}   p95 {ms(pct(f.advance, 95))}"
        f"   ratio {ratio:.2f}x  (target <= 1.30x: {verdict})"
    )
    if f.advance_checked:
        checked50 = pct(f.advance_checked, 50)
        print(
            f"    of which with file checks ({len(f.advance_checked)})  p50 {ms(checked50)}   "
            f"ratio {checked50 / raw50:.2f}x, {checked50 / local50:.2f}x the floor"
        )
    if f.advance_command:
        print(
            f"  advance running a command ({len(f.advance_command)})  p50 "
            f"{ms(pct(f.advance_command, 50))}   (the command's own run time; not the target)"
        )
    if f.parked:
        print(
            f"  submission -> awaits approval ({len(f.parked)})  p50 {ms(pct(f.parked, 50))}"
            f"   ratio {pct(f.parked, 50) / raw50:.2f}x"
        )
    return ratio


async def main(sessions: int, think: float, workflows: list[str]) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-bench-"))
    # test_generation_v3 runs `python3 -m pytest`: this interpreter (with pytest) first.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    ratios: dict[str, float] = {}
    async with await bench_environment() as env:
        client: Client = env.client
        worker = start_bench_worker(
            client.service_client.config.target_host,
            "bench",
            SHIPPED_LIBRARY,
            str(tmp / "home"),
            {"allow_unsigned_approvals": True, **EXTRA},
        )
        try:
            pg = PhasegateClient(client, "bench")
            raw = await client.start_workflow(
                RawUpdateWorkflow.run, id=f"raw-{uuid.uuid4()}", task_queue="bench-raw"
            )
            for _ in range(2):  # warm-up: both workflows' code paths, neither counted
                await walk(pg, raw, "production_code_v2", tmp, think, Figures())
            print(
                f"{sessions} sessions of each, walked one at a time; {think * 1000:.0f} ms "
                f"agent think time after each submission; prefetch {PREFETCH[0]}",
                flush=True,
            )
            for workflow_type in workflows:
                figures = Figures()
                for _ in range(sessions):
                    await walk(pg, raw, workflow_type, tmp, think, figures)
                ratios[workflow_type] = report(workflow_type, figures)
            await raw.signal(RawUpdateWorkflow.finish)
        finally:
            stop_bench_worker(worker)
    return ratios


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--think-ms", type=float, default=50.0)
    parser.add_argument("--workflow", action="append", choices=WORKFLOWS)
    parser.add_argument("--no-context", action="store_true", help="context_k = 0 (no RAG)")
    parser.add_argument("--no-prefetch", action="store_true", help="sessions without prefetch")
    args = parser.parse_args()
    PREFETCH[0] = not args.no_prefetch
    if args.no_context:
        EXTRA["context_k"] = 0
    _common.run(main(args.sessions, args.think_ms / 1000, args.workflow or list(WORKFLOWS)))
