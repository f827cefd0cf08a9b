"""The scripted coding agent under its former name, for compatibility.

It moved to :mod:`phasegate.agents.scripted` (production code: the worker's
``scripted`` coding agent). ``python -m phasegate.testing.coding_agent`` and imports
of :data:`WORK_FOLDER` / :func:`main` from here keep working.
"""

from __future__ import annotations

from phasegate.agents.scripted import WORK_FOLDER, main, run

__all__ = ["WORK_FOLDER", "main"]

if __name__ == "__main__":
    run()
