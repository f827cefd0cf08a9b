"""phasegate: durable, phase-gated workflows for AI coding agents, on Temporal.

Installed, everything lives under this one import root:

- ``phasegate.domain``: pure logic and pydantic models (gates, sessions, specs);
- ``phasegate.activities``: all I/O (library, tasks.md, templates, verify, rag);
- ``phasegate.workflows``: the Temporal workflow classes;
- ``phasegate.client``: typed client API, the ``phasegate`` CLI, the MCP server;
- ``phasegate.temporal``: the one module that knows how phasegate meets Temporal;
- ``phasegate.worker``: the worker that registers every workflow and activity;
- ``phasegate.testing``: a scripted agent, known-good evidence and test servers;
- ``phasegate/library``: the shipped workflow library (package data).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SHIPPED_LIBRARY", "__version__"]

__version__ = "0.2.0"

# No resolve(): the workflow sandbox re-imports this module and restricts it.
SHIPPED_LIBRARY = str(Path(__file__).parent / "library")
"""The workflow library shipped inside the package (always searched last)."""
