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
