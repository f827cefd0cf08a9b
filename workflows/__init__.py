"""Temporal workflow classes (deterministic, thin, one per module).

Loaded on first use (PEP 562): a client that only names ``GatedSession``'s messages
(the CLI, the MCP server) does not import the orchestration and its model SDKs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phasegate.workflows.gated_session import GatedSession
    from phasegate.workflows.orchestration import Orchestration
    from phasegate.workflows.step_graph import StepGraph

__all__ = ["GatedSession", "Orchestration", "StepGraph"]

_MODULES = {
    "GatedSession": "phasegate.workflows.gated_session",
    "Orchestration": "phasegate.workflows.orchestration",
    "StepGraph": "phasegate.workflows.step_graph",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
