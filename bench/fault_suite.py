"""Fault suite: sessions walked while workers and the dev server are killed with SIGKILL.

A dev server runs on a SQLite file, two ``python -m phasegate.worker`` processes
serve it, and every session is walked by a :class:`RetryingAgent` that retries
through failures with the same submission id. While the sessions walk:

- A: a worker is killed while updates are in flight (plain phases), then restarted;
- B: the worker running a verify check (held until then, 1 s after) is killed, then
  restarted;
- C: the dev server is killed and restarted on the same file and port.

Afterwards each session's status and result must show: completed; every phase's
recorded evidence is what the agent submitted (lost evidence 0); one passing
attempt and one completion per phase (double advances 0). Failed workflow tasks
are counted from the histories. Not a test: it prints figures (tests/test_faults.py
runs a small version and asserts them).

    .venv/bin/python bench/fault_suite.py [--sessions 20] [--phases 7]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common
from _cluster import Cluster, history_figures
from advance_latency import write_library

from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import CheckpointResult, CheckpointSubmission
from phasegate.workflows.gated_session import GatedSession

WORKFLOW = "faults_v1"
# The command writes its worker's pid (its parent) to a marker while it runs, so the
# suite knows a check is running and which worker process runs it. Until the suite has
# killed a checking worker (scenario B: it then writes RELEASE next to the workspaces)
# a check lasts up to 30 s, so B finds one running however fast the walk went before;
# after it, 1 s.
RELEASE = "faults-released"
SLOW_CHECK = {
    "name": "slow_check",
    "kind": "command",
    "argv": [
        "sh",
        "-c",
        "echo $PPID > .verifying-$$; i=0; while [ ! -e ../" + RELEASE + " ] && "
        "[ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; sleep 1; rm -f .verifying-$$",
    ],
    "timeout_seconds": 60,
}
RESTART_DELAY = 0.5  # a killed process stays dead this long before its restart
PER_CONNECTION = 10


def write_fault_library(root: Path, phases: int) -> list[int]:
    """``faults_v1``: ``phases`` phases; the middle ones run the slow verify check.

    Returns the phase numbers with the check (plain phases before them, for scenario A).
    """
    write_library(root, phases, workflow_type=WORKFLOW)
    verified = [p for p in range(phases) if phases // 3 <= p < phases // 3 + max(1, phases // 3)]
    for p in verified:
        gate = root / WORKFLOW / "phases" / str(p) / "gate-definition.yaml"
        gate.write_text(gate.read_text() + f"verify: {json.dumps([SLOW_CHECK])}\n")
    return verified


class RetryingAgent:
    """Walks one session, retrying every call that fails with the same submission id.

    A call that fails or takes longer than ``patience`` seconds (no answer, server
    down, ...) is sent again with the same submission id. A submission the workflow
    refused because its checks could not run (a killed verify) is submitted again
    under a new id. Each passed submission is also delivered once more under a fresh
    update id, whose answer must be the first one.
    """

    def __init__(
        self,
        pg: PhasegateClient,
        session_id: str,
        think: float,
        calls: Counter[str],
        patience: float = 10.0,
    ) -> None:
        self.pg = pg
        self.session_id = session_id
        self.think = think
        self.calls = calls  # shared: "in_flight", "advances", "errors", "refused"
        self.passed: dict[int, tuple[str, dict[str, Any]]] = {}
        self.errors: list[str] = []
        self.done = False
        self.slowest = 0.0
        self.patience = patience
        # Held before phase ``hold_at`` until ``hold`` is set: a session still walking when
        # the suite kills the dev server (scenario C), however fast the others finished.
        self.hold: asyncio.Event | None = None
        self.hold_at = -1

    def evidence(self, phase: int) -> dict[str, Any]:
        """Evidence unique to this session and phase, so a lost or swapped one shows."""
        return {
            "done": True,
            "files_changed": [f"{self.session_id}/phase_{phase}.py"],
            "summary": f"phase {phase} of {self.session_id} done",
        }

    async def walk(self, max_tries: int = 200) -> None:
        phase, attempt, tries, began = 0, 0, 0, time.monotonic()
        while not self.done:
            if self.hold is not None and phase == self.hold_at and not self.hold.is_set():
                await self.hold.wait()
                began = time.monotonic()
            submission_id = f"{self.session_id}-p{phase}-a{attempt}"
            tries += 1
            if tries > max_tries:
                raise RuntimeError(f"{self.session_id}: gave up at phase {phase}: {self.errors}")
            self.calls["in_flight"] += 1
            try:
                result = await asyncio.wait_for(
                    self.pg.submit(
                        self.session_id, phase, self.evidence(phase), submission_id=submission_id
                    ),
                    timeout=self.patience,
                )
            except Exception as exc:  # noqa: BLE001 - any failure: retry the same id
                self.calls["errors"] += 1
                self.errors.append(f"phase {phase}: {type(exc).__name__}: {str(exc)[:120]}")
                await asyncio.sleep(0.5)
                continue
            finally:
                self.calls["in_flight"] -= 1
            if not result.passed:  # e.g. "the workspace checks could not run"
                self.calls["refused"] += 1
                attempt += 1
                continue
            took = time.monotonic() - began
            self.slowest = max(self.slowest, took)
            if took > 3:
                self.errors.append(f"phase {phase}: advanced after {took:.1f} s")
            self.passed[phase] = (submission_id, self.evidence(phase))
            self.calls["advances"] += 1
            if not result.completed:  # a completed session takes no more updates
                await self.send_again(phase, submission_id, result)
            self.done = result.completed
            phase, attempt, began = result.current_phase, 0, time.monotonic()
            await asyncio.sleep(self.think)

    async def send_again(self, phase: int, submission_id: str, first: CheckpointResult) -> None:
        """Deliver the passed submission once more under a new update id (as a client that
        lost the answer would): the workflow must answer with the first result."""
        sub = CheckpointSubmission(
            phase=phase, evidence=self.evidence(phase), submission_id=submission_id
        )
        for _ in range(20):
            try:
                again = await asyncio.wait_for(
                    self.pg.handle(self.session_id).execute_update(
                        GatedSession.submit_checkpoint, sub, id=f"again-{uuid.uuid4()}"
                    ),
                    timeout=self.patience,
                )
            except Exception as exc:  # noqa: BLE001 - faults are injected meanwhile: try again
                self.errors.append(f"phase {phase} again: {type(exc).__name__}: {str(exc)[:120]}")
                await asyncio.sleep(0.5)
                continue
            self.calls["repeats"] += 1
            if _answer(again) != _answer(first):
                self.calls["repeats_differed"] += 1
                self.errors.append(f"phase {phase}: repeat {again} after {first}")
            return


def _answer(result: CheckpointResult) -> tuple[Any, ...]:
    """What a repeat must give back unchanged (its next-phase view may be left out)."""
    return (
        result.passed,
        result.current_phase,
        result.completed,
        result.attempt,
        result.submission_id,
    )


@dataclasses.dataclass
class Kill:
    """One SIGKILL: what was running at that instant."""

    scenario: str
    at: float
    updates_in_flight: int
    verifies_running: int
    sessions_walking: int
    down_seconds: float = 0.0
    workers_replaced: int = 0


@dataclasses.dataclass
class FaultReport:
    """What the suite found; the invariants are the first four after ``phases``."""

    sessions: int
    phases: int
    completed: int = 0
    lost_evidence: int = 0
    double_advances: int = 0
    failed_workflow_tasks: int = 0
    timed_out_workflow_tasks: int = 0
    timed_out_activities: int = 0
    retried_activities: int = 0
    retried_workflow_tasks: int = 0
    slowest_advance: float = 0.0
    repeats: int = 0
    repeats_differed: int = 0
    client_errors_retried: int = 0
    refused_resubmitted: int = 0
    walk_seconds: float = 0.0
    kills: list[Kill] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    retried: list[str] = dataclasses.field(default_factory=list)

    def print(self) -> None:
        print(f"fault suite: {self.sessions} sessions x {self.phases} phases, 2 worker processes")
        print(f"  {'kill':<28}{'at':>7}{'updates':>9}{'verifies':>10}{'walking':>9}{'down':>8}")
        print(
            "  (updates: submissions in flight; verifies: checks running; walking: sessions"
            " not complete; down: killed until restarted)"
        )
        for k in self.kills:
            print(
                f"  {k.scenario:<28}{k.at:6.1f}s{k.updates_in_flight:>9}{k.verifies_running:>10}"
                f"{k.sessions_walking:>9}{k.down_seconds:7.1f}s"
            )
        rows = [
            ("sessions completed", f"{self.completed}/{self.sessions}"),
            ("lost evidence", self.lost_evidence),
            ("double advances", self.double_advances),
            ("failed workflow tasks", self.failed_workflow_tasks),
            ("timed-out workflow tasks", self.timed_out_workflow_tasks),
            ("workers died with server", sum(k.workers_replaced for k in self.kills)),
            ("activities run again", self.retried_activities),
            ("workflow tasks run again", self.retried_workflow_tasks),
            ("repeats answered as first", f"{self.repeats - self.repeats_differed}/{self.repeats}"),
            ("slowest advance", f"{self.slowest_advance:.1f} s"),
            ("client errors retried", self.client_errors_retried),
            ("refused, resubmitted", self.refused_resubmitted),
            ("walk time", f"{self.walk_seconds:.1f} s"),
        ]
        for name, value in rows:
            print(f"  {name:<28}{value}")
        for problem in self.problems[:20]:
            print(f"  PROBLEM {problem}")


async def _until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _markers(workspaces: Path) -> dict[int, int]:
    """Running slow checks per worker pid (from the markers the check writes)."""
    found: Counter[int] = Counter()
    for marker in workspaces.glob("*/.verifying-*"):
        try:
            found[int(marker.read_text().strip())] += 1
        except (OSError, ValueError):  # removed or half-written meanwhile
            continue
    return dict(found)


async def inject_faults(
    cluster: Cluster,
    agents: list[RetryingAgent],
    calls: Counter[str],
    workspaces: Path,
    held: int = 0,
) -> list[Kill]:
    """Scenarios A, B, C in turn, each once its moment has come (``held``: agents that
    wait before their last phase until C is over, so C finds a session mid-walk)."""
    began = time.monotonic()
    kills: list[Kill] = []

    def walking() -> int:
        return sum(not a.done for a in agents)

    def kill_record(name: str) -> Kill:
        running = sum(_markers(workspaces).values())
        kill = Kill(name, time.monotonic() - began, calls["in_flight"], running, walking())
        kills.append(kill)
        return kill

    # A: updates in flight on plain phases, no check running, the walk under way.
    await _until(
        lambda: (
            calls["in_flight"] > 0 and calls["advances"] >= len(agents) and not _markers(workspaces)
        ),
        timeout=60,
    )
    kill = kill_record("A worker, mid-update")
    down = time.monotonic()
    cluster.kill_worker(cluster.workers[0])
    await asyncio.sleep(RESTART_DELAY)
    await asyncio.to_thread(cluster.start_worker)
    kill.down_seconds = time.monotonic() - down

    # B: the worker running a slow check (its pid is in the marker).
    def checking_worker() -> subprocess.Popen[bytes] | None:
        live = [cluster.worker_by_pid(pid) for pid in _markers(workspaces)]
        return next((w for w in live if w is not None), None)

    await _until(lambda: checking_worker() is not None, timeout=60)
    victim = checking_worker()
    kill = kill_record("B worker, mid-verify")
    if victim is None:
        kill.scenario += " (no check ran)"
    else:
        down = time.monotonic()
        cluster.kill_worker(victim)
        (workspaces / RELEASE).touch()  # the checks after this one take their 1 s
        await asyncio.sleep(RESTART_DELAY)
        await asyncio.to_thread(cluster.start_worker)
        kill.down_seconds = time.monotonic() - down

    # C: the dev server, while sessions are mid-walk with updates in flight.
    await _until(lambda: calls["in_flight"] > 0 or walking() <= held, timeout=60)
    kill = kill_record("C dev server, mid-walk")
    down = time.monotonic()
    cluster.kill_server()
    await asyncio.sleep(RESTART_DELAY)
    await asyncio.to_thread(cluster.start_server)
    kill.down_seconds = time.monotonic() - down
    kill.workers_replaced = await asyncio.to_thread(cluster.replace_dead_workers)
    return kills


async def check_sessions(
    pg: PhasegateClient, agents: list[RetryingAgent], phases: int, report: FaultReport
) -> None:
    """The invariants, from each session's status and result (its SessionSummary)."""
    for agent in agents:
        sid = agent.session_id
        try:
            status = await pg.status(sid)
            summary = await pg.result(sid)
        except PhasegateError as exc:
            report.problems.append(f"{sid}: cannot read: {exc}")
            continue
        report.completed += (
            status.status == "completed"
            and summary.status == "completed"
            and sorted(set(summary.completed_phases)) == list(range(phases))
        )
        # Each phase completes once and passes once, whichever record is asked.
        for counts in (
            Counter(summary.completed_phases),
            Counter(c.phase for c in status.completed_phases),
            Counter(a.phase for a in status.attempt_log if a.passed),
        ):
            extra = sum(n - 1 for n in counts.values() if n > 1)
            if extra:
                report.problems.append(f"{sid}: phases counted twice: {dict(counts)}")
                report.double_advances += extra
                break
        for phase in range(phases):
            artifact = summary.artifacts.get(str(phase))
            submitted = agent.passed.get(phase)
            if (
                artifact is None
                or submitted is None
                or (artifact.submission_id, artifact.evidence) != submitted
            ):
                report.lost_evidence += 1
                recorded = artifact and (artifact.submission_id, artifact.evidence)
                report.problems.append(
                    f"{sid}: phase {phase} recorded {recorded}, sent {submitted}"
                )


async def run_suite(
    root: Path, sessions: int, phases: int, think: float = 0.2, deadline: float = 300
) -> FaultReport:
    """Start the cluster under ``root``, walk ``sessions`` through the three kills, check."""
    write_fault_library(root / "library", phases)
    cluster = Cluster(root, root / "library")
    report = FaultReport(sessions, phases)
    await asyncio.to_thread(cluster.start_server)
    try:
        for _ in range(2):
            await asyncio.to_thread(cluster.start_worker)
        connections = [await cluster.client() for _ in range(max(1, sessions // PER_CONNECTION))]
        pgs = [PhasegateClient(c, cluster.task_queue) for c in connections]
        calls: Counter[str] = Counter()
        agents = []
        for i in range(sessions):
            workspace = root / "ws" / str(i)
            workspace.mkdir(parents=True)
            pg = pgs[i % len(pgs)]
            sid = await pg.start(WORKFLOW, str(workspace))
            agents.append(RetryingAgent(pg, sid, think, calls))
        agents[0].hold, agents[0].hold_at = asyncio.Event(), phases - 1
        began = time.monotonic()
        walks = asyncio.gather(*(a.walk() for a in agents))
        try:
            try:
                report.kills = await inject_faults(cluster, agents, calls, root / "ws", held=1)
            finally:
                agents[0].hold.set()  # after C (or a failed injection): walk on
            await asyncio.wait_for(walks, timeout=deadline)
        except Exception as exc:  # noqa: BLE001 - a finding of its own: report it
            walks.cancel()
            report.problems.append(f"walk did not finish: {type(exc).__name__}: {exc}")
        report.walk_seconds = time.monotonic() - began
        report.client_errors_retried = calls["errors"]
        report.retried = [f"{a.session_id}: {e}" for a in agents for e in a.errors]
        report.refused_resubmitted = calls["refused"]
        await check_sessions(pgs[0], agents, phases, report)
        figures = await history_figures(connections[0], [a.session_id for a in agents])
        report.failed_workflow_tasks = figures.failed_workflow_tasks
        report.timed_out_workflow_tasks = figures.timed_out_workflow_tasks
        report.timed_out_activities = figures.timed_out_activities
        report.retried_activities = figures.retried_activities
        report.retried_workflow_tasks = figures.retried_workflow_tasks
        report.slowest_advance = max(a.slowest for a in agents)
        report.repeats = calls["repeats"]
        report.repeats_differed = calls["repeats_differed"]
    finally:
        await asyncio.to_thread(cluster.stop)
    return report


async def main(sessions: int, phases: int, think: float) -> None:
    with tempfile.TemporaryDirectory(prefix="phasegate-faults-") as tmp:
        report = await run_suite(Path(tmp), sessions, phases, think)
    report.print()
    ok = (
        report.completed == sessions
        and not report.lost_evidence
        and not report.double_advances
        and not report.failed_workflow_tasks
        and not report.repeats_differed
    )
    print(f"  verdict: {'OK' if ok else 'FAILED'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--phases", type=int, default=7)
    parser.add_argument("--think-ms", type=float, default=200.0, help="agent pause per phase")
    args = parser.parse_args()
    _common.run(main(args.sessions, args.phases, args.think_ms / 1000))
