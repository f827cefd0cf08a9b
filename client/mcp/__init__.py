"""MCP server: coding agents (Claude Code, Cursor, Codex) drive gated sessions.

Eight tools, deliberately no more::

    list_workflows      workflow types that can be started
    start_session       start one on a target (dynamic workflows: spec_path)
    get_current_phase   the phase the session is on: content, tasks, gate fields
    task                the task board: list, show, next, start, done, block, split
                        (show with phase: one task's text of the current or a
                        completed phase)
    submit_checkpoint   evidence for the current phase's gate
    get_session_state   progress, attempts, problems, approvals
    get_graph_step      step graphs: the step a run is on
    report_graph_step   step graphs: end the current step with an outcome

No tool approves, controls a session or reads a future phase: approvals stay
with people (``phasegate approve``), and a read of a future phase comes back
as a tool error. Every result is concise markdown for the agent plus the
pydantic model as structured content; every failure is a tool error
(``isError``) with the reason and a hint, never a crash of the server.

Run ``phasegate mcp`` or ``python -m phasegate.client.mcp`` (stdio, the default),
with ``--http PORT`` for streamable HTTP on ``http://127.0.0.1:PORT/mcp``. Settings
come from the environment (``TEMPORAL_ADDRESS``, ``PHASEGATE_TASK_QUEUE``,
``PHASEGATE_LIBRARY``, ...); Temporal is connected on the first tool call that needs
it, so the server starts (and lists its tools) even while Temporal is down. See
docs/mcp.md.

Modules: ``tools`` (what each tool does), ``server`` (registration and the process),
``_tasks`` (the ``task`` tool's actions), ``_render`` (the markdown an agent reads),
``_http`` (the loopback-only HTTP transport).
"""

from __future__ import annotations

from phasegate.client.mcp.server import build_server, main
from phasegate.client.mcp.tools import MAX_EVIDENCE_BYTES, TOOL_NAMES, PhasegateTools

__all__ = ["MAX_EVIDENCE_BYTES", "TOOL_NAMES", "PhasegateTools", "build_server", "main"]
