"""The baseline for latency ratios: the cheapest possible Temporal update."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
def echo(payload: dict) -> dict:
    """The cheapest activity: what rendering a phase at the advance costs at the least."""
    return payload


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

    @workflow.update
    def bump_sized(self, payload: dict) -> str:
        """A raw update carrying an advance's bytes: its evidence in (``payload``), an
        answer of ``payload["answer_bytes"]`` bytes out."""
        self._count += 1
        return "x" * int(payload.get("answer_bytes", 0))

    @workflow.update
    async def bump_local(self, payload: dict) -> int:
        """A raw update that also awaits one trivial local activity (``echo``)."""
        await workflow.execute_local_activity(
            echo, payload, start_to_close_timeout=timedelta(seconds=10)
        )
        self._count += 1
        return self._count

    @workflow.signal
    def finish(self) -> None:
        self._done = True
