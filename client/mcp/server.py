"""The MCP server: the eight tools registered with their descriptions, and the process
that serves them over stdio or streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import signal
import sys
import threading

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from phasegate.client.mcp.tools import TOOL_NAMES, PhasegateTools
from phasegate.domain.settings import Settings

__all__ = ["build_server", "main"]

_INSTRUCTIONS = (
    "phasegate runs phase-gated workflows. Work one phase at a time: get_current_phase, do "
    "the work (where a phase has tasks: task next, work it, task done), then submit_checkpoint "
    "with evidence for every gate field. A failed checkpoint "
    "lists each problem: fix them and submit again. Some phases need a person's approval; "
    "no tool can approve, so wait and check get_session_state."
)

_READ = ToolAnnotations(read_only_hint=True)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)

_DESCRIPTIONS = {
    "list_workflows": "List workflow types you can start: type, name, description, phase count "
    "('dynamic' ones need spec_path).",
    "start_session": "Start a gated session of a workflow type on a target. Returns session_id.",
    "get_current_phase": "The phase the session is on: instructions, tasks, the evidence fields "
    "its gate requires, and the session status. Start here.",
    "task": "Tasks of the current phase: list, show, claim the next ready one (next), start, "
    "done (acceptance criteria checked), block, split. show with phase: a phase's task text.",
    "submit_checkpoint": "Submit evidence for the current phase's gate. Fails: lists every "
    "problem to fix, then resubmit. Passes: returns the next phase, or says a person must "
    "approve first.",
    "get_session_state": "Session progress: status, completed phases, attempts, last problems, "
    "approvals and who must approve.",
    "get_graph_step": "Step graphs: the step a run is on (actions, allowed outcomes, state) "
    "and the path so far.",
    "report_graph_step": "Step graphs: end the current step with an outcome (or needs_input "
    "with questions for a person).",
}


def build_server(settings: Settings | None = None) -> MCPServer:
    """The phasegate MCP server with its eight tools.

    Args:
        settings: Defaults to the environment (``phasegate.temporal.load_settings``).
    """
    if settings is None:
        from phasegate.temporal import load_settings

        settings = load_settings()
    tools = PhasegateTools(settings)
    server: MCPServer = MCPServer(
        "phasegate", instructions=_INSTRUCTIONS, version=_version(), log_level="WARNING"
    )
    for name in TOOL_NAMES:
        writes = ("start_session", "task", "submit_checkpoint", "report_graph_step")
        annotations = _WRITE if name in writes else _READ
        server.add_tool(
            getattr(tools, name),
            name=name,
            description=_DESCRIPTIONS[name],
            annotations=annotations,
        )
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("phasegate")
    except PackageNotFoundError:
        return "0"


def main(argv: list[str] | None = None) -> int:
    """Serve MCP over stdio (default) or streamable HTTP on 127.0.0.1 until the client leaves.

    Called without ``argv`` (``python -m phasegate.client.mcp``) it is the whole process and
    leaves with ``os._exit``: once the Temporal client exists, the SDK's Rust threads can
    abort interpreter shutdown (temporalio/sdk-python#300, "PyGILState_Release ... must be
    current"), which an MCP client would report as a crash.

    Args:
        argv: Command-line arguments without the program name (``--http PORT``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(
        prog="phasegate mcp",
        description="MCP server for phasegate sessions (stdio unless --http is given).",
    )
    parser.add_argument(
        "--http",
        type=int,
        metavar="PORT",
        help="serve streamable HTTP on http://127.0.0.1:PORT/mcp instead of stdio",
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 2
    if args.http is not None and not 0 < args.http < 65536:
        print(f"phasegate mcp: --http needs a port in 1-65535, got {args.http}", file=sys.stderr)
        return 2
    from phasegate.temporal import load_settings, server_origin

    settings = load_settings()
    origin = server_origin(settings)
    if origin is not None:  # the client's log shows which server the tools will use
        print(f"phasegate mcp: {origin.header()}", file=sys.stderr, flush=True)
    code = _serve(build_server(settings), args.http)
    if argv is None:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _serve(server: MCPServer, port: int | None) -> int:
    try:
        if port is None:
            _leave_on_signal()
            anyio.run(server.run_stdio_async)  # returns when the client closes stdin
        else:
            from phasegate.client.mcp._http import serve_http

            print(f"phasegate MCP server on http://127.0.0.1:{port}/mcp", file=sys.stderr)
            anyio.run(functools.partial(serve_http, server, port))
    except KeyboardInterrupt:
        return 0
    except SystemExit as exc:  # uvicorn exits when it cannot bind the port
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def _leave_on_signal() -> None:
    """Stdio: the first Ctrl-C (SIGINT, exit 130) or SIGTERM (exit 0) ends the process.

    The transport reads stdin in a thread that no cancellation interrupts, so a
    cancelled server would wait for the client's next line (and need a second Ctrl-C).
    Nothing is left to save: every tool call is a Temporal request, durable or not sent.

    A Python handler runs only in the main thread, and the kernel may deliver a
    process's signal to any thread that does not block it: one delivered to the stdin
    thread left the main thread asleep in its event loop. So both signals are blocked
    here, before any thread exists (threads inherit the mask), and one thread waits for
    them with ``sigwait``, whatever the main thread is doing.
    """
    wanted = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    threading.Thread(target=_wait_and_leave, args=(wanted,), name="leave", daemon=True).start()


def _wait_and_leave(wanted: set[signal.Signals]) -> None:
    signum = signal.sigwait(wanted)
    # Flushing could wait on a pipe the client no longer reads: give it a second.
    flusher = threading.Thread(target=_flush, daemon=True)
    flusher.start()
    flusher.join(timeout=1.0)
    os._exit(130 if signum == signal.SIGINT else 0)


def _flush() -> None:
    logging.shutdown()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
