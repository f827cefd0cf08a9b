"""Worker process for the latency benchmarks: phasegate's worker plus the baseline.

Runs apart from the measuring client, as in production (client and worker are
separate processes), so the two do not share one interpreter lock.

    python bench/_bench_worker.py ADDRESS TASK_QUEUE LIBRARY HOME [SETTINGS_JSON]
    python bench/_bench_worker.py --raw-only ADDRESS TASK_QUEUE   # the baseline alone

With ``--raw-only`` it serves only ``RawUpdateWorkflow`` on ``TASK_QUEUE-raw``, for
benches that run phasegate's own ``python -m phasegate.worker`` processes beside it.
Benches with another baseline serve it with :func:`serve` from their own worker
process (``bench/orchestration_overhead.py --serve``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import _common
from baseline import RawUpdateWorkflow, echo
from temporalio.worker import PollerBehaviorAutoscaling, Worker

from phasegate.domain.settings import Settings
from phasegate.temporal import connect, metrics_runtime
from phasegate.worker import (
    MAIN_ACTIVITY_THREADS,
    WORKFLOW_TASKS_AT_ONCE,
    build_worker,
    workflow_runner,
)

RAW_AS_PHASEGATE = "BENCH_RAW_POLLED_AS_PHASEGATE"
"""Set (by ``start_bench_worker(..., raw_as_phasegate=True)``): the baseline's worker polls
and caps its workflow tasks as phasegate's main worker does. For benches whose baseline
runs apart from phasegate's load (a burst of new workflows, then one of sessions): with
both busy at once, the process would hold twice the workflow tasks phasegate's worker
holds, and activations would starve past the deadlock detector."""


def _polled_as_phasegate() -> dict[str, Any]:
    """Worker options as worker.build_worker gives phasegate's main worker."""
    return {
        "workflow_task_poller_behavior": PollerBehaviorAutoscaling(),
        "activity_task_poller_behavior": PollerBehaviorAutoscaling(),
        "max_concurrent_workflow_tasks": WORKFLOW_TASKS_AT_ONCE,
    }


async def serve(
    settings: Settings, workflow: type, activity: Callable[..., Any], *, phasegate: bool = True
) -> None:
    """Serve phasegate's worker (unless ``phasegate`` is false) and a baseline worker
    (``workflow`` and ``activity`` on ``<task queue>-raw``) until SIGTERM; print
    ``ready`` once both poll."""
    # metrics_port: the Temporal runtime's Prometheus metrics (sticky cache hits, replays).
    runtime = None
    if settings.metrics_port is not None:
        runtime = metrics_runtime(settings.metrics_port, host="127.0.0.1")
    client = await connect(settings, runtime=runtime)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    # As many threads as `phasegate worker` gives its main worker.
    with concurrent.futures.ThreadPoolExecutor(max_workers=MAIN_ACTIVITY_THREADS) as pool:
        raw = Worker(
            client,
            task_queue=f"{settings.task_queue}-raw",
            workflows=[workflow],
            activities=[activity],
            activity_executor=pool,
            # The baseline runs its workflow code as phasegate does (Settings.workflow_sandbox).
            workflow_runner=workflow_runner(settings),
            **(_polled_as_phasegate() if os.environ.get(RAW_AS_PHASEGATE) else {}),
        )
        async with contextlib.AsyncExitStack() as stack:
            if phasegate:
                await stack.enter_async_context(build_worker(client, settings, executor=pool))
            await stack.enter_async_context(raw)
            print("ready", flush=True)
            await stop.wait()


async def main(
    address: str, task_queue: str, library: str | None, home: str | None, extra: str = "{}"
) -> None:
    """``extra``: further settings as JSON (e.g. ``{"allow_unsigned_approvals": true}``)."""
    settings = Settings(temporal_address=address, task_queue=task_queue, **json.loads(extra))
    if library is not None and home is not None:
        settings = settings.model_copy(update={"home": home, "library_paths": [library]})
    await serve(settings, RawUpdateWorkflow, echo, phasegate=library is not None)


if __name__ == "__main__":
    if sys.argv[1] == "--raw-only":
        _common.run(main(sys.argv[2], sys.argv[3], None, None))
    else:
        _common.run(main(*sys.argv[1:6]))
