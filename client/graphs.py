"""Typed async client for step graph runs (workflow ``StepGraph``): start one, read the
step it is on, report it, answer its questions, wait for its result.

What ``phasegate graph run | show | report | answer`` use. Failures come back as
``domain.errors`` types in the CLI's terms (``step_sequence_violation``,
``approval_refused``, ``graph_failed``, ``session_not_found``), never as Temporal
exceptions. Answers are signed like approvals (``client.keys.sign_decision``) when a key
is named: the run id as the session, the question round as the phase, the answers as
canonical JSON as the comment, bound to the run's ``answer_binding``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import (
    WorkflowFailureError,
    WorkflowQueryFailedError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from phasegate.client._base import BaseClient, sign_as, timed_out
from phasegate.domain.errors import PhasegateError, SessionError, SessionNotFound
from phasegate.domain.graph.messages import (
    GraphAnswer,
    GraphSummary,
    GraphView,
    ReportResult,
    StartGraph,
    StepReport,
    StepView,
    answers_comment,
)
from phasegate.domain.graph.model import Graph
from phasegate.temporal import phasegate_error
from phasegate.workflows.step_graph import StepGraph

__all__ = ["GraphClient", "new_run_id"]

_STARTING = "is starting"
_NO_POLLER = "no poller seen"
_RETRIES = 8


def new_run_id(graph: Graph) -> str:
    return f"graph-{graph.name}-{uuid.uuid4().hex[:6]}"


class GraphClient(BaseClient):
    """Start, read, report and answer step graph runs."""

    async def start(
        self,
        graph: Graph,
        *,
        params: dict[str, Any] | None = None,
        target: str = "",
        run_id: str | None = None,
        approvers: list[str] | None = None,
    ) -> str:
        """Start a run of ``graph`` (pinned by its SHA-256); returns the run id."""
        rid = run_id or new_run_id(graph)
        start = StartGraph(
            graph=graph,
            sha256=graph.sha256(),
            params=params or {},
            target=target,
            approvers=approvers,
        )
        try:
            await self.temporal.start_workflow(
                StepGraph.run,
                start,
                id=rid,
                task_queue=self.task_queue,
                static_summary=f"phasegate step graph `{graph.name}`",
            )
        except WorkflowAlreadyStartedError:
            raise PhasegateError(
                f"graph run {rid} already exists", where="--id", hint="pick another --id"
            ) from None
        except RPCError as exc:
            raise phasegate_error(exc) from None
        return rid

    async def status(self, run_id: str, *, timeout: float = 30.0) -> GraphView:
        """Where the run is, the path it took, what it waits for (query ``status``)."""
        view: GraphView = await self._query(run_id, StepGraph.status, timeout)
        return view

    async def step(self, run_id: str, *, timeout: float = 30.0) -> StepView | None:
        """The step the run is on, its actions rendered (None when it is on none:
        finished). Waits the moment a step's actions take to render after it is entered."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            view: StepView | None = await self._query(run_id, StepGraph.step, timeout)
            if view is None or view.rendered or loop.time() > deadline:
                return view
            await asyncio.sleep(0.05)

    async def report(self, run_id: str, report: StepReport) -> ReportResult:
        """Report the step the run is on (an outside agent's ``report_step``)."""
        if report.report_id is None:  # one id for every retry: never applied twice
            report = report.model_copy(update={"report_id": uuid.uuid4().hex})
        result: ReportResult = await self._update(run_id, StepGraph.report_step, report)
        return result

    async def answer(
        self,
        run_id: str,
        answers: dict[str, str],
        *,
        as_key: str | None,
        approver: str | None = None,
        key_dir: str | Path | None = None,
    ) -> GraphView:
        """Answer the open questions; signed with ``as_key`` (its name is the approver),
        or unsigned as ``approver`` where the deployment allows unsigned answers."""
        view = await self.status(run_id)
        if view.status != "awaiting_input" or view.current_step is None:
            raise PhasegateError(
                f"graph run {run_id} is {view.status}: no questions are open",
                hint=f"`phasegate graph show {run_id}` shows where it is",
            )
        name, nonce, signature = sign_as(
            as_key,
            approver,
            ask="who is answering?",
            key_dir=key_dir,
            session_id=run_id,
            phase=view.question_round,
            decision="approve",
            comment=answers_comment(answers),
            binding=view.answer_binding,
        )
        msg = GraphAnswer(
            step_id=view.current_step,
            round=view.question_round,
            answers=answers,
            approver=name,
            nonce=nonce,
            signature=signature,
        )
        result: GraphView = await self._update(run_id, StepGraph.answer, msg)
        return result

    async def result(self, run_id: str) -> GraphSummary:
        """Wait for the run to end; its summary.

        Raises:
            GraphFailed: It ended failed (code ``graph_failed``), with the reason.
        """
        try:
            summary: GraphSummary = await self.temporal.get_workflow_handle_for(
                StepGraph.run, run_id
            ).result()
            return summary
        except (WorkflowFailureError, RPCError) as exc:
            raise self._error(run_id, exc) from None

    # ---------------------------------------------------------------- helpers

    async def _query(self, rid: str, query: Any, timeout: float) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                return await self.temporal.get_workflow_handle(rid).query(query)
            except (WorkflowQueryFailedError, RPCError) as exc:
                if timed_out(exc):
                    raise self._no_answer(f"graph run {rid}") from None
                err = self._error(rid, exc)
                # "no poller seen": the worker the run was on died; the server hands its
                # next task to a live worker (if one runs) within seconds.
                if _STARTING not in err.message and _NO_POLLER not in err.message:
                    raise err from None
            desc = await self.temporal.get_workflow_handle(rid).describe()
            if desc.close_time is not None:  # it failed before it had a state: say why
                await self.result(rid)
            if loop.time() > deadline:
                raise SessionError(
                    f"graph run {rid} did not start within {timeout:.0f} s",
                    hint="is a phasegate worker running? (`phasegate worker` or `phasegate dev`)",
                )
            await asyncio.sleep(0.1)

    async def _update(self, rid: str, update: Any, arg: Any) -> Any:
        return await self._retrying_update(
            rid, update, arg, what=f"graph run {rid}", starting=_STARTING
        )

    def _error(self, rid: str, exc: BaseException) -> PhasegateError:
        err = phasegate_error(exc)
        if isinstance(err, SessionNotFound) or (
            isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND
        ):
            return SessionNotFound(
                f"no graph run {rid}", hint="use the id `phasegate graph run` printed"
            )
        text = str(exc).lower()
        if "expected but not found" in text or "unknown querytype" in text:
            return PhasegateError(f"{rid} is not a graph run")
        return err
