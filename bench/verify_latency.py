"""Added latency of a workspace check: a passing checkpoint whose gate runs one trivial
verify command (``true``, on the verify task queue), and one whose gate reads one file
(``file_exists``, a local activity of the session worker), vs the same checkpoint without
a check.

Same dev server, same worker process (apart from this client), same run, interleaved
pairs. Prints p50/p95 of each and the ratio.

    .venv/bin/python bench/verify_latency.py [--phases 120]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import _common
from _common import bench_environment, ms, pct, start_bench_worker, stop_bench_worker
from advance_latency import write_library

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import CheckpointSubmission
from phasegate.workflows.gated_session import GatedSession

VERIFY = "verify:\n  - {name: trivial, kind: command, argv: ['true'], timeout_seconds: 30}\n"
READ = "verify:\n  - {name: readme, kind: file_exists, path: README.md}\n"


async def main(phases: int, warmup: int, think: float) -> float:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-bench-"))
    write_library(tmp / "lib", phases, workflow_type="plain_v1")
    write_library(tmp / "lib", phases, workflow_type="verified_v1", verify=VERIFY)
    write_library(tmp / "lib", phases, workflow_type="read_v1", verify=READ)
    (tmp / "README.md").write_text("the file the read check looks for\n")
    async with await bench_environment() as env:
        client = env.client
        worker = start_bench_worker(
            client.service_client.config.target_host, "bench", str(tmp / "lib"), str(tmp / "home")
        )
        try:
            pg = PhasegateClient(client, "bench")
            plain = pg.handle(await pg.start("plain_v1", str(tmp)))
            checked = pg.handle(await pg.start("verified_v1", str(tmp)))
            read = pg.handle(await pg.start("read_v1", str(tmp)))
            evidence = {"done": True, "files_changed": ["a.py"], "summary": "did the work well"}
            plain_t: list[float] = []
            checked_t: list[float] = []
            read_t: list[float] = []
            for i in range(phases - 1):
                sub = CheckpointSubmission(phase=i, evidence=evidence)
                t0 = time.perf_counter()
                a = await plain.execute_update(GatedSession.submit_checkpoint, sub)
                t1 = time.perf_counter()
                b = await checked.execute_update(GatedSession.submit_checkpoint, sub)
                t2 = time.perf_counter()
                c = await read.execute_update(GatedSession.submit_checkpoint, sub)
                t3 = time.perf_counter()
                assert a.passed and b.passed and b.verify and b.verify[0].passed
                assert c.passed and c.verify and c.verify[0].passed
                if i >= warmup:
                    plain_t.append(t1 - t0)
                    checked_t.append(t2 - t1)
                    read_t.append(t3 - t2)
                await asyncio.sleep(think)
        finally:
            stop_bench_worker(worker)
    ratio = pct(checked_t, 50) / pct(plain_t, 50)
    print(f"checkpoint latency over {len(plain_t)} interleaved pairs (after {warmup} warm-up)")
    print(f"  without verify        p50 {ms(pct(plain_t, 50))}   p95 {ms(pct(plain_t, 95))}")
    print(
        f"  one trivial command   p50 {ms(pct(checked_t, 50))}   p95 {ms(pct(checked_t, 95))}"
        "   (activity: spawn `true`, collect, record)"
    )
    print(
        f"  ratio with/without p50 = {ratio:.2f}x  (added {ms(pct(checked_t, 50) - pct(plain_t, 50))})"
    )
    print(
        f"  one file read         p50 {ms(pct(read_t, 50))}   p95 {ms(pct(read_t, 95))}"
        "   (local activity on the session worker)"
    )
    print(
        f"  ratio with/without p50 = {pct(read_t, 50) / pct(plain_t, 50):.2f}x  "
        f"(added {ms(pct(read_t, 50) - pct(plain_t, 50))})"
    )
    return ratio


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", type=int, default=120)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--think-ms", type=float, default=50.0)
    args = parser.parse_args()
    _common.run(main(args.phases, args.warmup, args.think_ms / 1000))
