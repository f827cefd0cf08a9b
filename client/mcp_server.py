"""MCP server: coding agents (Claude Code, Cursor, Codex) drive gated sessions.

Six tools, deliberately no more::

    list_workflows      workflow types that can be started
    start_session       start one on a target (dynamic workflows: spec_path)
    get_current_phase   the phase the session is on: content, tasks, gate fields
    get_task            one task of the current or a completed phase
    submit_checkpoint   evidence for the current phase's gate
    get_session_state   progress, attempts, problems, approvals

No tool approves, controls a session or reads a future phase: approvals stay
with people (``phasegate approve``), and a read of a future phase comes back
as a tool error. Every result is concise markdown for the agent plus the
pydantic model as structured content; every failure is a tool error
(``isError``) with the reason and a hint, never a crash of the server.

Run ``python -m client.mcp_server`` (stdio, the default) or
``python -m client.mcp_server --http PORT`` (streamable HTTP on
``http://127.0.0.1:PORT/mcp``). Settings come from the environment
(``TEMPORAL_ADDRESS``, ``PHASEGATE_TASK_QUEUE``, ``PHASEGATE_LIBRARY``, ...);
Temporal is connected on the first tool call that needs it, so the server
starts (and lists its tools) even while Temporal is down. See docs/mcp.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, StringConstraints

from phasegate.client import _mcp_render as render
from phasegate.domain.errors import PayloadTooLarge, PhasegateError, PhaseSequenceViolation
from phasegate.domain.session.messages import (
    DEFAULT_MAX_EVIDENCE_BYTES,
    PhaseView,
    SequenceViolation,
    SessionOptions,
    SessionView,
)
from phasegate.domain.settings import Settings

if TYPE_CHECKING:
    from phasegate.client.api import PhasegateClient

__all__ = ["MAX_EVIDENCE_BYTES", "TOOL_NAMES", "build_server", "main"]

logger = logging.getLogger("phasegate.mcp")

TOOL_NAMES = (
    "list_workflows",
    "start_session",
    "get_current_phase",
    "get_task",
    "submit_checkpoint",
    "get_session_state",
)
MAX_EVIDENCE_BYTES = DEFAULT_MAX_EVIDENCE_BYTES
"""Evidence larger than this (compact JSON, as the workflow measures it) is refused unsent."""

_START_TIMEOUT = 30.0
_INSTRUCTIONS = (
    "phasegate runs phase-gated workflows. Work one phase at a time: get_current_phase, do "
    "the work, then submit_checkpoint with evidence for every gate field. A failed checkpoint "
    "lists each problem: fix them and submit again. Some phases need a person's approval; "
    "no tool can approve, so wait and check get_session_state."
)

# -- input types: validated by the SDK before a tool runs (a failure is a tool error) --

SessionId = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=200),
    Field(description="Session id from start_session."),
]
PhaseNumber = Annotated[int, Field(ge=0, description="Phase number, from 0.")]

_READ = ToolAnnotations(read_only_hint=True)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)


# -- structured content of the tools whose result is not one contract model --


class WorkflowInfo(BaseModel):
    workflow_type: str
    name: str
    description: str
    phases: int | Literal["dynamic"]


class WorkflowList(BaseModel):
    workflows: list[WorkflowInfo]


class StartedSession(BaseModel):
    session_id: str
    session: SessionView


class CurrentPhase(BaseModel):
    session_id: str
    status: str
    current_phase: int
    total_phases: int
    awaiting_approval_from: list[str] = Field(default_factory=list)
    phase: PhaseView | None = Field(None, description="None once the session has finished.")


# -- results --


def _ok(text: str, data: BaseModel | dict[str, Any]) -> CallToolResult:
    payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
    return CallToolResult(content=[TextContent(text=text)], structured_content=payload)


def _error(err: PhasegateError) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(text=f"Error ({err.code}): {err}")],
        structured_content=err.details(),
        is_error=True,
    )


def _violation(v: SequenceViolation) -> CallToolResult:
    """A read of a future phase: refused, with no content of any phase."""
    text = f"Error ({v.error}): {v.message} (hint: get_current_phase shows phase {v.current_phase})"
    data = v.model_dump(mode="json", exclude={"current_content"})
    return CallToolResult(content=[TextContent(text=text)], structured_content=data, is_error=True)


def _local_path(value: str, *, must_exist: bool) -> str:
    """Resolve a path the agent gave relative to this server's directory (where the agent runs)."""
    path = Path(value).expanduser()
    if must_exist and not path.exists():
        return value  # not a local path (e.g. a URL): pass it on unchanged
    return str(path.resolve())


class PhasegateTools:
    """The six tools, over one lazily connected :class:`~client.api.PhasegateClient`.

    Args:
        settings: Where Temporal, the task queue and the workflow library are.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: PhasegateClient | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> PhasegateClient:
        """Connect on first use, so the server runs (and lists tools) while Temporal is down.

        Raises:
            PhasegateError: ``cannot reach Temporal at HOST`` with a hint to start it.
        """
        async with self._lock:
            if self._client is None:
                from phasegate.client.api import PhasegateClient
                from phasegate.temporal import connect

                temporal = await connect(self.settings)  # TemporalUnreachable says what to do
                self._client = PhasegateClient(temporal, self.settings.task_queue)
            return self._client

    async def _guard(self, work: Awaitable[CallToolResult]) -> CallToolResult:
        """Turn every failure into a tool error the agent can read; the server keeps serving."""
        try:
            return await work
        except PhasegateError as err:
            return _error(err)
        except Exception as exc:  # the agent gets the reason, the log the traceback
            logger.exception("tool call failed")
            return _error(PhasegateError(f"unexpected {type(exc).__name__}: {exc}"))

    # -- tools --

    async def list_workflows(self) -> CallToolResult:
        """Workflow types in the configured libraries (no Temporal needed)."""

        async def work() -> CallToolResult:
            from phasegate.activities.library import list_workflows

            found = await asyncio.to_thread(list_workflows, self.settings.library_paths)
            infos = [
                WorkflowInfo(
                    workflow_type=w.metadata.workflow_type,
                    name=w.metadata.name,
                    description=w.metadata.description,
                    phases="dynamic"
                    if w.metadata.dynamic_phases
                    else len(w.metadata.static_phases),
                )
                for w in found
            ]
            rows = [(i.workflow_type, i.name, i.description, i.phases) for i in infos]
            return _ok(render.render_workflows(rows), WorkflowList(workflows=infos))

        return await self._guard(work())

    async def start_session(
        self,
        workflow_type: Annotated[
            str,
            StringConstraints(min_length=1, max_length=200),
            Field(description="From list_workflows."),
        ],
        target: Annotated[
            str,
            StringConstraints(max_length=4096),
            Field(description="What the session works on, usually a repo or directory path."),
        ],
        spec_path: Annotated[
            str | None,
            Field(max_length=4096, description="Dynamic workflows: tasks.md or its folder."),
        ] = None,
    ) -> CallToolResult:
        """Start a session and wait until its definition has loaded."""

        async def work() -> CallToolResult:
            options = SessionOptions()
            if spec_path:
                options.spec_path = _local_path(spec_path, must_exist=False)
            where = _local_path(target, must_exist=True) if target else ""
            pg = await self.client()
            sid = await pg.start(workflow_type, where, options=options, wait=False)
            view = await pg.wait_started(sid, timeout=_START_TIMEOUT)
            text = (
                f"Started session `{sid}`: {view.name or view.workflow_type}, "
                f"{view.total_phases} phases, now on phase {view.current_phase} "
                f'({view.current_phase_name}).\nNext: get_current_phase(session_id="{sid}").'
            )
            return _ok(text, StartedSession(session_id=sid, session=view))

        return await self._guard(work())

    async def get_current_phase(self, session_id: SessionId) -> CallToolResult:
        """The current phase (content, tasks, gate fields) and the session status."""

        async def work() -> CallToolResult:
            pg = await self.client()
            state = await pg.status(session_id)
            view: PhaseView | None = None
            if state.status not in ("completed", "abandoned"):
                got = await pg.phase(session_id, state.current_phase)
                if isinstance(got, SequenceViolation):  # the phase moved on meanwhile
                    raise PhaseSequenceViolation(got.message, hint="call get_current_phase again")
                view = got
            data = CurrentPhase(
                session_id=session_id,
                status=state.status,
                current_phase=state.current_phase,
                total_phases=state.total_phases,
                awaiting_approval_from=state.awaiting_approval_from,
                phase=view,
            )
            return _ok(render.render_current(session_id, state, view), data)

        return await self._guard(work())

    async def get_task(
        self,
        session_id: SessionId,
        phase: PhaseNumber,
        task: Annotated[
            Annotated[str, StringConstraints(min_length=1, max_length=100)] | int,
            Field(description="Task id as written ('1.2', 'T003') or 1-based number."),
        ],
    ) -> CallToolResult:
        """One task of the current or a completed phase; a future phase is refused."""

        async def work() -> CallToolResult:
            pg = await self.client()
            got = await pg.task(session_id, phase, str(task).strip())
            if isinstance(got, SequenceViolation):
                return _violation(got)
            return _ok(render.render_task(got), got)

        return await self._guard(work())

    async def submit_checkpoint(
        self,
        session_id: SessionId,
        phase: PhaseNumber,
        evidence: Annotated[
            dict[str, Any],
            Field(
                description="Evidence object that validates against gate.json_schema of "
                'get_current_phase (types, limits, pattern, enum), e.g. {"tests_run": 12}.'
            ),
        ],
        submission_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="Idempotency key: a repeat returns the first result.",
            ),
        ] = None,
    ) -> CallToolResult:
        """Submit checkpoint evidence; refuse oversized evidence before sending it."""

        async def work() -> CallToolResult:
            from phasegate.domain.session.state import evidence_size

            size = evidence_size(evidence)
            if size > MAX_EVIDENCE_BYTES:
                raise PayloadTooLarge(
                    f"evidence is {size} bytes; the limit is {MAX_EVIDENCE_BYTES} bytes "
                    f"({MAX_EVIDENCE_BYTES // 1024} KiB), so it was not sent",
                    where="evidence",
                    hint="submit paths, counts or summaries instead of whole files",
                )
            pg = await self.client()
            result = await pg.submit(session_id, phase, evidence, submission_id=submission_id)
            data = result.model_dump(mode="json")
            approvers: list[str] = []
            if result.passed and result.awaiting_approval:
                approvers = (await pg.status(session_id)).awaiting_approval_from
                data["awaiting_approval_from"] = approvers
            return _ok(render.render_checkpoint(phase, result, approvers), data)

        return await self._guard(work())

    async def get_session_state(self, session_id: SessionId) -> CallToolResult:
        """Session progress as recorded in Temporal."""

        async def work() -> CallToolResult:
            pg = await self.client()
            view = await pg.status(session_id)
            return _ok(render.render_state(session_id, view), view)

        return await self._guard(work())


_DESCRIPTIONS = {
    "list_workflows": "List workflow types you can start: type, name, description, phase count "
    "('dynamic' ones need spec_path).",
    "start_session": "Start a gated session of a workflow type on a target. Returns session_id.",
    "get_current_phase": "The phase the session is on: instructions, tasks, the evidence fields "
    "its gate requires, and the session status. Start here.",
    "get_task": "One task of the current or a completed phase. Future phases are refused.",
    "submit_checkpoint": "Submit evidence for the current phase's gate. Fails: lists every "
    "problem to fix, then resubmit. Passes: returns the next phase, or says a person must "
    "approve first.",
    "get_session_state": "Session progress: status, completed phases, attempts, last problems, "
    "approvals and who must approve.",
}


def build_server(settings: Settings | None = None) -> MCPServer:
    """The phasegate MCP server with its six tools.

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
        annotations = _WRITE if name in ("start_session", "submit_checkpoint") else _READ
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

    Called without ``argv`` (``python -m client.mcp_server``) it is the whole process and
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
    code = _serve(build_server(), args.http)
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
            from phasegate.client._mcp_http import serve_http

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
    """

    def leave(signum: int, _frame: object) -> None:
        logging.shutdown()
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(130 if signum == signal.SIGINT else 0)

    signal.signal(signal.SIGINT, leave)
    signal.signal(signal.SIGTERM, leave)


if __name__ == "__main__":
    sys.exit(main())
