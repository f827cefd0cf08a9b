"""Function handlers the step graph tests name (``graph_handlers:NAME``); a worker runs
them only because the tests allow this module (``graph_function_modules``)."""

from __future__ import annotations

from typing import Any

from phasegate.activities.step_handlers import StepContext


def count_up(ctx: StepContext) -> dict[str, Any]:
    """Iterates until the step state's ``n`` reaches the run's ``target`` parameter."""
    n = int(ctx.state.get("n", 0)) + 1
    return {"outcome": "ok" if n >= ctx.params["target"] else "iterate", "state": {"n": n}}


async def judge(ctx: StepContext) -> str:
    """Quick or full, by the run's ``depth`` parameter (an async handler)."""
    return "full" if ctx.params.get("depth", 1) > 2 else "quick"


def explode(ctx: StepContext) -> str:
    raise RuntimeError(f"handler exploded on visit {ctx.visit}")


def slow_first_time(ctx: StepContext) -> str:
    """The first call (marked in the workspace) hangs until its worker is killed; the
    retry on a new worker returns at once. Each call is counted in ``calls``."""
    import time
    from pathlib import Path

    calls = Path(ctx.workspace) / "calls"
    calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
    if len(calls.read_text()) == 1:
        time.sleep(120)
    return "ok"
