"""Faults: sessions walked while a worker is killed mid-update, a worker is killed
mid-verify and the dev server is killed and restarted on its SQLite file lose no
evidence, advance no phase twice, and all complete.

The harness is bench/fault_suite.py (its own dev server on a file and worker
processes, so the kills touch nothing of the shared test server); this is its
small version. Slow by nature: a check killed with its worker is run again only
after the verify activity's 10 s heartbeat timeout.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from fault_suite import run_suite


async def test_kills_lose_no_evidence_and_advance_nothing_twice(tmp_path):
    report = await run_suite(tmp_path, sessions=4, phases=6, think=0.1, deadline=120)
    detail = "\n".join(report.problems)
    # Each kill landed where it was meant to.
    kills = {k.scenario: k for k in report.kills}
    assert list(kills) == [
        "A worker, mid-update",
        "B worker, mid-verify",
        "C dev server, mid-walk",
    ], detail
    assert kills["A worker, mid-update"].updates_in_flight >= 1
    assert kills["A worker, mid-update"].verifies_running == 0
    assert kills["B worker, mid-verify"].verifies_running >= 1
    assert kills["C dev server, mid-walk"].sessions_walking >= 1
    assert report.retried_activities >= 1, "the killed verify was never run again"
    # The invariants.
    assert report.completed == 4, detail
    assert report.lost_evidence == 0, detail
    assert report.double_advances == 0, detail
    assert report.repeats >= 4 * 5 and report.repeats_differed == 0, detail
    assert report.failed_workflow_tasks == 0, detail
