"""Processes the fault and load benches kill and measure: a dev server on a SQLite file
and phasegate workers, each a separate OS process (as ``phasegate server`` and
``phasegate worker`` run them), plus the history figures read back afterwards.

Workers run as ``python -m phasegate.worker`` configured by environment variables
only, so they serve whatever task queues the installed worker polls.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from phasegate.client.devserver import DevServer, free_port
from phasegate.domain.settings import Settings
from phasegate.temporal import connect

BENCH = Path(__file__).resolve().parent
READY_WAIT = 60.0


class Cluster:
    """One dev server on ``root/temporal.db`` (or in memory) and worker processes.

    Args:
        root: Scratch folder: the SQLite file, worker homes and logs go here.
        library: Workflow library folder the workers load (PHASEGATE_LIBRARY).
        task_queue: The workers' task queue; a fresh one by default.
        in_memory: Keep the server's database in memory (nothing survives a restart).
    """

    def __init__(
        self,
        root: Path,
        library: Path,
        task_queue: str | None = None,
        *,
        in_memory: bool = False,
    ) -> None:
        self.root = root
        self.library = library
        self.task_queue = task_queue or f"bench-{uuid.uuid4().hex[:6]}"
        self.db = None if in_memory else root / "temporal.db"
        self.port = free_port()
        self.server: DevServer | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.raw_workers: list[subprocess.Popen[bytes]] = []
        self._logs = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def client(self) -> Client:
        """A new client connection (pydantic converter) to this cluster's server."""
        return await connect(Settings(temporal_address=self.address))

    # ---- dev server ----------------------------------------------------

    def start_server(self) -> None:
        """Start (or restart, on the same file and port) the dev server; wait for its port."""
        self.server = DevServer(
            port=self.port,
            db=str(self.db) if self.db else None,
            log_file=str(self.root / "server.log"),
        ).start(timeout=60)

    def kill_server(self) -> None:
        """SIGKILL the dev server: no shutdown, whatever it had not written is gone."""
        assert self.server is not None and self.server.proc is not None
        self.server.proc.kill()
        self.server.proc.wait()

    # ---- workers -------------------------------------------------------

    def start_worker(self) -> subprocess.Popen[bytes]:
        """Start one ``python -m phasegate.worker`` process and wait until it polls."""
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": self.address,
            "PHASEGATE_TASK_QUEUE": self.task_queue,
            "PHASEGATE_LIBRARY": str(self.library),
            "PHASEGATE_HOME": str(self.root / "home"),
        }
        proc = self._spawn([sys.executable, "-m", "phasegate.worker"], env, "phasegate worker:")
        self.workers.append(proc)
        return proc

    def start_raw_worker(self) -> subprocess.Popen[bytes]:
        """Start one process serving only the raw-update baseline on ``<task queue>-raw``."""
        argv = [sys.executable, str(BENCH / "_bench_worker.py"), "--raw-only"]
        proc = self._spawn([*argv, self.address, self.task_queue], dict(os.environ), "ready")
        self.raw_workers.append(proc)
        return proc

    def _spawn(self, argv: list[str], env: dict[str, str], ready: str) -> subprocess.Popen[bytes]:
        self._logs += 1
        log = self.root / f"worker-{self._logs}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, env=env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + READY_WAIT
        while ready not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"worker did not start; its log {log}:\n{log.read_text()}")
            time.sleep(0.05)
        return proc

    def kill_worker(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL one worker process (no drain, no clean-up) and forget it."""
        proc.kill()
        proc.wait()
        self.workers.remove(proc)

    def worker_by_pid(self, pid: int) -> subprocess.Popen[bytes] | None:
        return next((w for w in self.workers if w.pid == pid), None)

    def replace_dead_workers(self) -> int:
        """Start a new worker for each one that exited on its own; how many were replaced."""
        dead = [w for w in self.workers if w.poll() is not None]
        for proc in dead:
            self.workers.remove(proc)
            self.start_worker()
        return len(dead)

    def stop_workers(self) -> None:
        """SIGTERM every worker (they drain and exit), SIGKILL any that hang."""
        for proc in [*self.workers, *self.raw_workers]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.workers, *self.raw_workers]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.workers.clear()
        self.raw_workers.clear()

    def stop(self) -> None:
        self.stop_workers()
        if self.server is not None:
            self.server.stop()


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclasses.dataclass
class HistoryFigures:
    """What the recorded histories of a set of workflows show."""

    runs: int = 0
    events: int = 0
    bytes: int = 0
    failed_workflow_tasks: int = 0
    timed_out_workflow_tasks: int = 0
    timed_out_activities: int = 0
    retried_activities: int = 0
    retried_workflow_tasks: int = 0
    bytes_by_type: Counter[str] = dataclasses.field(default_factory=Counter)

    def add(self, history: WorkflowHistory) -> None:
        self.runs += 1
        for event in history.events:
            self.events += 1
            self.bytes += event.ByteSize()
            kind = event.event_type
            self.bytes_by_type[EventType.Name(kind).removeprefix("EVENT_TYPE_")] += event.ByteSize()
            self.failed_workflow_tasks += kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            self.timed_out_workflow_tasks += kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
            self.timed_out_activities += kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
            # A retried attempt leaves no event of its own: its successor's attempt shows it.
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attempt = event.activity_task_started_event_attributes.attempt
                self.retried_activities += attempt > 1
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                attempt = event.workflow_task_scheduled_event_attributes.attempt
                self.retried_workflow_tasks += attempt > 1


async def run_histories(client: Client, workflow_id: str) -> AsyncIterator[WorkflowHistory]:
    """Every run of a workflow, latest first (continue-as-new links followed back)."""
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        yield history
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            return


async def history_figures(client: Client, workflow_ids: list[str]) -> HistoryFigures:
    """Serialized size and failure events of every run of ``workflow_ids``."""
    figures = HistoryFigures()
    for workflow_id in workflow_ids:
        async for history in run_histories(client, workflow_id):
            figures.add(history)
    return figures
