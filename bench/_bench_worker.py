"""Worker process for the latency benchmarks: phasegate's worker plus the baseline.

Runs apart from the measuring client, as in production (client and worker are
separate processes), so the two do not share one interpreter lock.

    python bench/_bench_worker.py ADDRESS TASK_QUEUE LIBRARY HOME
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import sys

import _common
from baseline import RawUpdateWorkflow
from temporalio.worker import Worker

from phasegate.domain.settings import Settings
from phasegate.temporal import connect
from phasegate.worker import build_worker


async def main(address: str, task_queue: str, library: str, home: str) -> None:
    settings = Settings(
        temporal_address=address, task_queue=task_queue, home=home, library_paths=[library]
    )
    client = await connect(settings)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        raw = Worker(client, task_queue=f"{task_queue}-raw", workflows=[RawUpdateWorkflow])
        async with build_worker(client, settings, executor=pool), raw:
            print("ready", flush=True)
            await stop.wait()


if __name__ == "__main__":
    _common.run(main(*sys.argv[1:5]))
