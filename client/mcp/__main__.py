"""``python -m phasegate.client.mcp [--http PORT]``: the MCP server (as ``phasegate mcp``)."""

import sys

from phasegate.client.mcp import main

sys.exit(main())
