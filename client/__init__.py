"""Everything that talks to Temporal from outside a worker.

- :class:`PhasegateClient` (``client.api``): typed async API to start, read and
  drive gated sessions; what the CLI and the MCP server use.
- :class:`OrchestrationClient` (``client.orchestrations``): start and follow
  orchestrations (an issue worked by planned agents), decide their gates.
- :class:`DevServer` (``client.devserver``): the embedded Temporal dev server.
- ``client.cli``: the ``phasegate`` command line, one module per command group.
- ``client.mcp``: the MCP server coding agents drive sessions with.

Names are imported on first use, so importing ``client`` (or ``client.cli``
for ``phasegate --help``) does not load the Temporal SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phasegate.client.api import PhasegateClient
    from phasegate.client.devserver import DevServer
    from phasegate.client.orchestrations import OrchestrationClient

__all__ = ["DevServer", "OrchestrationClient", "PhasegateClient"]

_HOMES = {
    "PhasegateClient": "phasegate.client.api",
    "DevServer": "phasegate.client.devserver",
    "OrchestrationClient": "phasegate.client.orchestrations",
}


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
