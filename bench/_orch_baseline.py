"""The baseline of bench/orchestration_overhead.py: trivial activities, one after another."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def noop(payload: dict) -> dict:
    """The cheapest async activity (the model request activity is async too)."""
    return payload


@workflow.defn
class RawActivitiesWorkflow:
    """Runs ``n`` trivial activities one after another: n raw activity round trips."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(
                noop, {"i": i}, start_to_close_timeout=timedelta(seconds=10)
            )
        return n
