"""The MCP server's eight tools: what each does, its inputs (validated by the SDK before
it runs) and its result (markdown for the agent, the pydantic model as structured
content; every failure a tool error, never a crash of the server)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field, StringConstraints

from phasegate.client._graph_text import graph_text
from phasegate.client.mcp._render import (
    render_checkpoint,
    render_current,
    render_state,
    render_workflows,
)
from phasegate.client.mcp._tasks import TaskAction, TaskCall, run_task
from phasegate.domain.errors import PayloadTooLarge, PhasegateError
from phasegate.domain.graph.messages import GraphView, Question, StepReport, StepView
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

__all__ = ["MAX_EVIDENCE_BYTES", "TOOL_NAMES", "PhasegateTools"]

logger = logging.getLogger("phasegate.mcp")

TOOL_NAMES = (
    "list_workflows",
    "start_session",
    "get_current_phase",
    "task",
    "submit_checkpoint",
    "get_session_state",
    "get_graph_step",
    "report_graph_step",
)
MAX_EVIDENCE_BYTES = DEFAULT_MAX_EVIDENCE_BYTES
"""Evidence larger than this (compact JSON, as the workflow measures it) is refused unsent."""

_START_TIMEOUT = 30.0

# -- input types: validated by the SDK before a tool runs (a failure is a tool error) --

SessionId = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=200),
    Field(description="Session id from start_session."),
]
PhaseNumber = Annotated[int, Field(ge=0, description="Phase number, from 0.")]
RunId = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=200),
    Field(description="Graph run id (from `phasegate graph run`)."),
]


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
    """The text, and structured content a model can read as it is: clients such as
    Claude Code hand the model ``structuredContent`` instead of the text, so it carries
    the same markdown (``text``: the phase, the next step, the hints) and only the
    fields a program needs besides; no second copy of phase content, tasks or logs."""
    payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
    return CallToolResult(
        content=[TextContent(text=text)], structured_content={"text": text, **_slim(payload)}
    )


# What the text already says at length: a phase view's content, tasks, earlier
# evidence and retrieved context; a session's logs. Left out of the structured copy.
_PHASE_IN_TEXT = frozenset({"content", "tasks", "artifacts", "context", "current_content"})
_LOGS = frozenset({"attempt_log", "audit", "superseded"})


def _slim(value: Any) -> Any:
    """``value`` without what the text carries: a gate keeps its ``json_schema`` (to
    build evidence from) without the descriptions its text table shows."""
    if isinstance(value, list):
        return [_slim(v) for v in value]
    if not isinstance(value, dict):
        return value
    drop = _LOGS | (_PHASE_IN_TEXT if "gate" in value else frozenset())
    out = {k: _slim(v) for k, v in value.items() if k not in drop}
    if isinstance(out.get("fields"), dict) and "json_schema" in out:  # a gate view
        del out["fields"]  # the text's table, and json_schema's properties and required
        schema = out["json_schema"]
        if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
            props = {  # descriptions are the text's table column
                name: {k: v for k, v in prop.items() if k != "description"}
                if isinstance(prop, dict)
                else prop
                for name, prop in schema["properties"].items()
            }
            out["json_schema"] = {**schema, "properties": props}
    return out


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


class GraphStep(BaseModel):
    run_id: str
    run: GraphView
    step: StepView | None = Field(None, description="None once the run has ended.")


class PhasegateTools:
    """The eight tools, over one lazily connected :class:`~client.api.PhasegateClient`.

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
            return _ok(render_workflows(rows), WorkflowList(workflows=infos))

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
            current = await pg.current(session_id)  # one answer: the phase cannot move between
            state, view = current.status, current.phase
            data = CurrentPhase(
                session_id=session_id,
                status=state.status,
                current_phase=state.current_phase,
                total_phases=state.total_phases,
                awaiting_approval_from=state.awaiting_approval_from,
                phase=view,
            )
            return _ok(render_current(session_id, state, view), data)

        return await self._guard(work())

    async def task(
        self,
        action: Annotated[
            TaskAction,
            Field(
                description="list; show (with phase: the phase's task text); next (claim the "
                "next ready task); start; done; block; split (add a subtask to task_id)."
            ),
        ],
        session_id: Annotated[
            str, Field(max_length=200, description="Default: the project's active session.")
        ] = "",
        agent: Annotated[str, Field(max_length=128, description="Your name (not list/show).")] = "",
        task_id: Annotated[str | int, Field(description="e.g. IMPL-1.2, T003.")] = "",
        phase: Annotated[int | None, Field(ge=-1, description="list: -1 = all.")] = None,
        summary: Annotated[str, Field(max_length=2000, description="done")] = "",
        evidence: Annotated[dict[str, Any] | None, Field(description="done")] = None,
        reason: Annotated[str, Field(max_length=2000, description="block")] = "",
        title: Annotated[str, Field(max_length=300, description="split")] = "",
        acceptance: Annotated[tuple[str, ...], Field(max_length=20)] = (),
        depends_on: Annotated[tuple[str, ...], Field(max_length=32)] = (),
    ) -> CallToolResult:
        """Task state: list, show, claim (next/start), done, block, split."""

        async def work() -> CallToolResult:
            pg = await self.client()
            done = await run_task(
                pg,
                TaskCall(
                    action=action,
                    session_id=session_id.strip() or None,
                    agent=agent.strip() or None,
                    task_id=str(task_id).strip() or None,
                    phase=phase,
                    summary=summary or None,
                    evidence=evidence,
                    reason=reason or None,
                    title=title or None,
                    acceptance=list(acceptance),
                    depends_on=list(depends_on),
                ),
            )
            if isinstance(done, SequenceViolation):
                return _violation(done)
            return _ok(*done)

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
            return _ok(render_checkpoint(phase, result, approvers), data)

        return await self._guard(work())

    async def get_session_state(self, session_id: SessionId) -> CallToolResult:
        """Session progress as recorded in Temporal."""

        async def work() -> CallToolResult:
            pg = await self.client()
            view = await pg.status(session_id)
            return _ok(render_state(session_id, view), view)

        return await self._guard(work())

    # -- step graphs --

    async def _graphs(self) -> Any:
        from phasegate.client.graphs import GraphClient

        pg = await self.client()
        return GraphClient(pg.temporal, self.settings.task_queue)

    async def get_graph_step(self, run_id: RunId) -> CallToolResult:
        """The step a graph run is on (never another) and where the run is."""

        async def work() -> CallToolResult:
            graphs = await self._graphs()
            view = await graphs.status(run_id)
            step = await graphs.step(run_id)
            text = graph_text(view, step)
            if step is not None and view.status == "running":
                text += (
                    f'\nNext: do the step, then report_graph_step(run_id="{run_id}", '
                    f'step_id="{step.step_id}", outcome=<one of its outcomes>).'
                )
            return _ok(text, GraphStep(run_id=run_id, run=view, step=step))

        return await self._guard(work())

    async def report_graph_step(
        self,
        run_id: RunId,
        step_id: Annotated[str, StringConstraints(min_length=1, max_length=64)],
        outcome: Annotated[
            str,
            StringConstraints(min_length=1, max_length=40),
            Field(description="One of the step's outcomes, or needs_input to ask a person."),
        ],
        state: Annotated[
            dict[str, Any] | None, Field(description="Step state fields to set.")
        ] = None,
        evidence: Annotated[
            dict[str, Any] | None, Field(description="Evidence for the step's gate, if it has one.")
        ] = None,
        questions: Annotated[
            list[Question] | None,
            Field(max_length=3, description="With needs_input: 1-3 questions for a person."),
        ] = None,
        summary: Annotated[str, StringConstraints(max_length=2000)] = "",
    ) -> CallToolResult:
        """End the current step with an outcome (refused if it is not the current step)."""

        async def work() -> CallToolResult:
            graphs = await self._graphs()
            report = StepReport(
                step_id=step_id,
                outcome=outcome,
                state=state or {},
                evidence=evidence,
                questions=questions or [],
                summary=summary,
            )
            result = await graphs.report(run_id, report)
            if not result.accepted:
                lines = [f"Step {step_id}: the gate refused the evidence. Fix and report again:"]
                lines += [f"- {p.field}: {p.message}" for p in result.problems]
                return _ok("\n".join(lines), result)
            nxt = {
                "completed": "The run completed.",
                "failed": "The run failed: get_graph_step says why.",
                "awaiting_input": "A person must answer the questions; no tool can. Check "
                "get_graph_step later.",
            }.get(result.status, f'Next: get_graph_step(run_id="{run_id}").')
            return _ok(f"Step {step_id} ended {result.outcome}. {nxt}", result)

        return await self._guard(work())
