"""The baseline for latency ratios: the cheapest possible Temporal update."""

from __future__ import annotations

from temporalio import workflow


@workflow.defn
class RawUpdateWorkflow:
    """A workflow whose update only bumps a counter: one raw update round trip."""

    def __init__(self) -> None:
        self._count = 0
        self._done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self._done)
        return self._count

    @workflow.update
    def bump(self, payload: dict) -> int:
        self._count += 1
        return self._count

    @workflow.signal
    def finish(self) -> None:
        self._done = True
