"""Agents phasegate ships as production code (the worker runs them).

- :mod:`phasegate.agents.scripted`: the ``scripted`` coding agent of the worker's
  default ``PHASEGATE_DEVELOPER_COMMANDS``, ``python -m phasegate.agents.scripted``:
  walks the session in ``PHASEGATE_SESSION`` the way an honest (or, on request, a
  phantom) coding agent would, without a model. Demos, tests and benchmarks use it.
- :mod:`phasegate.agents.demo_models`: the ``demo`` model of each LLM agent (planner,
  analyst, architect, reviewer): offline canned answers, for demos and first runs
  without an API key.

Nothing here imports ``phasegate.testing``: test doubles build on production code,
never the other way round.
"""

from __future__ import annotations

__all__: list[str] = []
