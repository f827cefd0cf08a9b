"""Many agents at once: advances per second and client calls per advance, at 200
concurrent sessions, vs raw Temporal updates per second on the same server.

Each session is walked by ``phasegate.testing.ScriptedAgent``: it builds evidence
from the gate's JSON Schema and takes the next phase from the advance's result,
so an advance costs one call. For comparison the same run also walks sessions
the old way (status + phase query before every submission: three calls per
advance). The baseline: every session replaced by a trivial workflow receiving
as many raw updates, with the same concurrency; and, after the walks, the same raw
updates carrying an advance's bytes (the median evidence one agent submitted in, an
answer the size of its median advance's answer out): what an advance must carry costs
that much before phasegate does anything.

    .venv/bin/python bench/concurrent_agents.py [--sessions 200] [--phases 10]
    .venv/bin/python bench/concurrent_agents.py --workflow spec_execution_v1  # the flagship
    .venv/bin/python bench/concurrent_agents.py --ahead 131072  # phases rendered ahead
    .venv/bin/python bench/concurrent_agents.py --sealed  # sealed: phases ahead by default

With ``--workflow spec_execution_v1`` every session works a real 7-phase Kiro spec (phase
0, approved by an unsigned ``lead``, then 6 dynamic phases whose gate checks the files the
evidence lists), all in one workspace, with the evidence that passes its gates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import _common
from _common import (
    CpuMeter,
    bench_environment,
    seal_ring,
    start_bench_worker,
    stop_bench_worker,
)
from advance_latency import write_library
from baseline import RawUpdateWorkflow
from temporalio.api.enums.v1 import TimeoutType, WorkflowTaskFailedCause
from temporalio.client import Client

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import PhaseView, SessionOptions
from phasegate.domain.settings import Settings
from phasegate.temporal import SHIPPED_LIBRARY, connect
from phasegate.testing import (
    EvidenceTable,
    ScriptedAgent,
    Step,
    complete_evidence,
    known_good,
    unsigned_approver,
    workspace_for,
)

PER_CONNECTION = 50
SPEC = _common.REPO / "tests" / "fixtures" / "tasks" / "real" / "kiro-ui-design-system.md"


class QueryEveryPhase(ScriptedAgent):
    """The agent before the advance carried the next view: it asks status + phase first."""

    async def advance_all(self, session_id: str) -> int:
        while True:
            view = await self._current(session_id)
            assert view is not None
            evidence = self.evidence_for(view)
            result = await self.client.submit(session_id, view.phase, evidence)
            self.steps.append(Step(view.phase, view.label, evidence, result))
            assert result.passed, result.problems
            if result.completed:
                return len(self.steps)


KEPT = Path(tempfile.gettempdir()) / "phasegate-bench-failed-histories"


async def task_troubles(client: Client, sids: list[str], keep: Path) -> list[str]:
    """The sessions' workflow tasks that failed or timed out, one line each (the first
    attempt of a workflow task that timed out on the worker's sticky queue included). The
    history of a session whose workflow task failed is kept in ``keep`` (JSON, for
    ``temporalio.worker.Replayer``; a folder of :data:`KEPT` per run)."""
    troubles: list[str] = []

    async def one(sid: str) -> None:
        async for event in client.get_workflow_handle(sid).fetch_history_events():
            if event.HasField("workflow_task_failed_event_attributes"):
                failed = event.workflow_task_failed_event_attributes
                cause = WorkflowTaskFailedCause.Name(failed.cause)
                keep.mkdir(parents=True, exist_ok=True)
                history = await client.get_workflow_handle(sid).fetch_history()
                (keep / f"{sid}.json").write_text(history.to_json())
                troubles.append(f"{sid} event {event.event_id}: failed ({cause}) "
                                f"{failed.failure.message[:300]}")  # fmt: skip
            elif event.HasField("workflow_task_timed_out_event_attributes"):
                kind = TimeoutType.Name(event.workflow_task_timed_out_event_attributes.timeout_type)
                troubles.append(f"{sid} event {event.event_id}: timed out ({kind})")

    sem = asyncio.Semaphore(50)

    async def bounded(sid: str) -> None:
        async with sem:
            await one(sid)

    await asyncio.gather(*(bounded(sid) for sid in sids))
    return troubles


async def walk_all(
    pgs: list[PhasegateClient], agent_cls: type[ScriptedAgent], n: int, kind: Kind, cpu: CpuMeter
) -> tuple[float, float, dict, list[str], str]:
    """Start ``n`` sessions, walk them all at once; (advances/s, calls per advance, an
    advance's bytes: the median evidence submitted and answer returned, as JSON, and the
    workflow tasks that failed or timed out). An agent that fails fails the walk, with
    what its session's history says of its workflow tasks."""
    sids = await start_sessions(pgs, n, kind)
    evidence: EvidenceTable = known_good(kind.workflow_type) if kind.workspace else {"*": _evidence}
    approve = unsigned_approver("lead")
    agents = [agent_cls(pgs[i % len(pgs)], evidence, approve=approve) for i in range(n)]
    cpu.start()
    began = time.perf_counter()
    # advance_all: no status query of 200 completed sessions at the end (each would
    # replay its whole history on the worker), only the advances are timed.
    walked = await asyncio.gather(
        *(a.advance_all(s) for a, s in zip(agents, sids, strict=True)), return_exceptions=True
    )
    elapsed = time.perf_counter() - began
    advances = sum(len(a.steps) for a in agents)
    spent = cpu.per_op(advances)
    troubles = await task_troubles(pgs[0].temporal, sids, KEPT / pgs[0].task_queue)
    errors = [w for w in walked if isinstance(w, BaseException)]
    if errors:
        raise RuntimeError(
            f"{len(errors)} of {n} agents failed, the first: {errors[0]}; workflow tasks "
            f"failed or timed out: {len(troubles)}{': ' if troubles else ''}"
            + "; ".join(troubles[:5])
        )
    calls = advances + sum(a.queries for a in agents)
    return advances / elapsed, calls / advances, advance_bytes(agents[0]), troubles, spent


def advance_bytes(agent: ScriptedAgent) -> dict:
    """A raw update's payload carrying what one of ``agent``'s advances carried (medians
    over its walk, as JSON): the evidence it submitted, and the size of the answer."""
    steps = sorted(agent.steps, key=lambda step: len(json.dumps(step.evidence)))
    answers = sorted(len(step.result.model_dump_json()) for step in agent.steps)
    return {"evidence": steps[len(steps) // 2].evidence, "answer_bytes": answers[len(answers) // 2]}


def _evidence(view: PhaseView) -> dict:
    return complete_evidence({}, view)


async def raw_updates(
    clients, task_queue: str, sessions: int, per: int, cpu: CpuMeter, payload: dict | None = None
) -> tuple[float, str]:
    """Raw updates per second, ``per`` on each of ``sessions`` trivial workflows at once:
    ``bump`` with an empty payload, or ``bump_sized`` with ``payload``; and their CPU."""
    handles = [
        await clients[i % len(clients)].start_workflow(
            RawUpdateWorkflow.run, id=f"raw-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        for i in range(sessions)
    ]

    async def drive(h) -> None:
        for _ in range(per):
            if payload is None:
                await h.execute_update(RawUpdateWorkflow.bump, {})
            else:
                await h.execute_update(RawUpdateWorkflow.bump_sized, payload)

    cpu.start()
    began = time.perf_counter()
    await asyncio.gather(*(drive(h) for h in handles))
    elapsed = time.perf_counter() - began
    spent = cpu.per_op(sessions * per)
    for h in handles:
        await h.signal(RawUpdateWorkflow.finish)
    return sessions * per / elapsed, spent


class Kind:
    """What the sessions run: the synthetic bench_v1, or spec_execution_v1 over SPEC."""

    def __init__(self, workflow_type: str, root: Path) -> None:
        self.workflow_type = workflow_type
        self.workspace: Path | None = None
        self.options = SessionOptions()
        if workflow_type == "spec_execution_v1":
            self.workspace = workspace_for(workflow_type, root)
            shutil.copyfile(SPEC, self.workspace / SPEC.name)
            self.options = SessionOptions(spec_path=str(self.workspace / SPEC.name))

    @property
    def target(self) -> str:
        return str(self.workspace or "/tmp")


async def start_sessions(pgs: list[PhasegateClient], n: int, kind: Kind) -> list[str]:
    sem = asyncio.Semaphore(50)

    async def one(i: int) -> str:
        async with sem:
            return await pgs[i % len(pgs)].start(
                kind.workflow_type, kind.target, options=kind.options
            )

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def main(
    sessions: int,
    phases: int,
    prefetch: bool = True,
    workflow_type: str = "bench_v1",
    ahead: int | None = None,
    sealed: bool = False,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        library = Path(tmp) / "library"
        write_library(library, phases)
        kind = Kind(workflow_type, Path(tmp))
        if kind.workspace is not None:
            library = Path(SHIPPED_LIBRARY)
            phases = 7  # the raw baseline: as many updates per session as submissions
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        ring = seal_ring(Path(tmp)) if sealed else None
        async with await bench_environment() as env:
            worker = start_bench_worker(
                env.client.service_client.config.target_host,
                task_queue,
                str(library),
                tmp,
                {
                    "prefetch": prefetch,
                    "allow_unsigned_approvals": True,
                    "prefetch_ahead_bytes": ahead,
                    # A seal key ring: prefetches sealed, and phases ahead by default.
                    "seal_keys_file": ring,
                },
            )
            cpu = CpuMeter(env.client.service_client.config.target_host, worker.pid)
            try:
                # Agents are separate programs: one connection per 50 of them (a single
                # HTTP/2 connection refuses that many concurrent blocking calls).
                address = env.client.service_client.config.target_host
                clients = [
                    await connect(Settings(temporal_address=address))
                    for _ in range(max(1, sessions // PER_CONNECTION))
                ]
                pgs = [PhasegateClient(c, task_queue) for c in clients]
                print(
                    f"{sessions} concurrent {workflow_type} sessions x {phases} phases, prefetch "
                    f"{'on' if prefetch else 'off'}{', sealed' if sealed else ''}, phases ahead "
                    f"{'the default' if ahead is None else f'{ahead} bytes'}",
                    flush=True,
                )
                raw, spent = await raw_updates(clients, f"{task_queue}-raw", sessions, phases, cpu)
                print(f"raw updates:               {raw:6.1f}/s (baseline)", flush=True)
                print(f"    {spent}", flush=True)
                sized: dict | None = None
                for label, agent_cls in (
                    ("advances, view in result: ", ScriptedAgent),
                    ("advances, query first:    ", QueryEveryPhase),
                ):
                    try:
                        rate, calls, carried, troubles, spent = await walk_all(
                            pgs, agent_cls, sessions, kind, cpu
                        )
                    except Exception as exc:  # noqa: BLE001 - a figure of its own: say why
                        print(f"{label}failed: {exc}", flush=True)
                        continue
                    sized = sized or carried
                    print(
                        f"{label}{rate:6.1f}/s  {calls:.2f} calls/advance  {rate / raw:.2f}x raw"
                        f"  {len(troubles)} workflow tasks failed or timed out",
                        flush=True,
                    )
                    print(f"    {spent}", flush=True)
                    for line in troubles[:5]:
                        print(f"    {line}", flush=True)
                    if troubles:
                        keep = KEPT / task_queue
                        if ring is not None and keep.is_dir():  # sealed: replays with its ring
                            shutil.copy(ring, keep / "seal-ring.json")
                        print(f"    histories kept in {keep}", flush=True)
                if sized is not None:
                    # The same raw updates carrying an advance's bytes: what is left of an
                    # advance beyond what it must carry.
                    raw_sized, spent = await raw_updates(
                        clients, f"{task_queue}-raw", sessions, phases, cpu, sized
                    )
                    print(
                        f"raw updates, an advance's bytes ({len(json.dumps(sized['evidence']))} B "
                        f"of evidence in, {sized['answer_bytes']} B out): {raw_sized:6.1f}/s "
                        f"({raw_sized / raw:.2f}x raw)",
                        flush=True,
                    )
                    print(f"    {spent}", flush=True)
            finally:
                stop_bench_worker(worker)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--phases", type=int, default=10)
    parser.add_argument(
        "--no-prefetch", action="store_true", help="the worker renders each phase at its advance"
    )
    parser.add_argument("--workflow", choices=["bench_v1", "spec_execution_v1"], default="bench_v1")
    parser.add_argument(
        "--ahead",
        type=int,
        metavar="BYTES",
        help="PHASEGATE_PREFETCH_AHEAD on the worker (a prefetch renders the phases that fit)",
    )
    parser.add_argument(
        "--sealed", action="store_true", help="the worker holds a seal key ring (sealed prefetch)"
    )
    args = parser.parse_args()
    _common.run(
        main(
            args.sessions, args.phases, not args.no_prefetch, args.workflow, args.ahead, args.sealed
        )
    )
