"""``orchestrate watch`` when the run finishes between two of its reads: the state it
read says "running", but by the time it asks whether the run closed, the run has
completed. The final result wins (issue 19: it printed ✓ completed, then "has closed
without finishing", exit 1). The orchestration client is replaced by one that answers
in that order; everything else is the CLI's own code."""

from __future__ import annotations

import argparse
import asyncio
import io
from datetime import UTC, datetime
from typing import Any

from phasegate.client.cli._common import Ctx
from phasegate.client.cli.orchestrate import _Follower
from phasegate.domain.orchestration.agents import Issue
from phasegate.domain.orchestration.messages import (
    HistoryEntry,
    OrchestrationView,
    PlanView,
)
from phasegate.domain.settings import Settings

RUNNING = OrchestrationView(
    orchestration_id="orch-1", status="running", issue=Issue(id="1", title="t"), plan=PlanView()
)
DONE = RUNNING.model_copy(update={"status": "completed"})


class FinishesBetweenReads:
    """State read while running; history, closed and result after completion."""

    async def state(self, oid: str, *, timeout: float = 30.0) -> OrchestrationView:
        return RUNNING

    async def history(self, oid: str) -> list[HistoryEntry]:
        return [HistoryEntry(seq=0, at=datetime.now(UTC), kind="completed", detail="done")]

    async def closed(self, oid: str) -> bool:
        return True

    async def result(self, oid: str) -> OrchestrationView:
        return DONE


def test_a_run_that_finishes_between_reads_ends_with_its_result() -> None:
    args = argparse.Namespace(json=False, no_wait=False)
    out = io.StringIO()
    follower: Any = _Follower(
        Ctx(args, Settings()), None, FinishesBetweenReads(), "orch-1", out  # type: ignore[arg-type]
    )
    code = asyncio.run(follower.run())
    assert code == 0, out.getvalue()
    assert "completed" in out.getvalue() and "without finishing" not in out.getvalue()
