"""The MCP server's former module path, kept so that client configurations written as
``python -m phasegate.client.mcp_server`` keep working. The server is
:mod:`phasegate.client.mcp` (``phasegate mcp``, ``python -m phasegate.client.mcp``)."""

from __future__ import annotations

import sys

from phasegate.client.mcp import MAX_EVIDENCE_BYTES, TOOL_NAMES, build_server, main

__all__ = ["MAX_EVIDENCE_BYTES", "TOOL_NAMES", "build_server", "main"]

if __name__ == "__main__":
    sys.exit(main())
