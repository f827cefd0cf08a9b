"""Typed async client for gated sessions (what the CLI and MCP server use).

Failures come back as ``domain.errors`` types with the workflow's code, so a
caller can branch on ``err.code`` (``phase_sequence_violation``,
``session_not_active``, ``approval_refused``, ...).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import ContinueAsNewInitiator
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError

from phasegate.client import _executions as executions
from phasegate.client._base import BaseClient, sign_as, timed_out, transient
from phasegate.client._executions import Waiting
from phasegate.client._task_methods import NO_ARG, TaskMethods
from phasegate.domain.errors import (
    PayloadTooLarge,
    PhasegateError,
    SessionError,
    SessionNotActive,
)
from phasegate.domain.limits import MAX_EVIDENCE_BYTES_LIMIT
from phasegate.domain.session.messages import (
    ApprovalDecision,
    CheckpointResult,
    CheckpointSubmission,
    ControlRequest,
    ControlResult,
    CurrentView,
    PhaseQuery,
    PhaseView,
    SequenceViolation,
    SessionOptions,
    SessionSummary,
    SessionView,
    StartSession,
    TaskQuery,
    TaskView,
)
from phasegate.domain.session.state import evidence_size
from phasegate.temporal import SA_PHASE, SA_STATUS, SA_WORKFLOW, phasegate_error
from phasegate.workflows.gated_session import GatedSession

__all__ = ["PhasegateClient", "SessionListing", "Waiting"]


class SessionListing(BaseModel):
    session_id: str
    workflow_type: str
    status: str
    phase: int | None
    execution_status: str
    started_at: datetime | None
    run_id: str | None = None
    reason: str | None = None  # why it failed to start (``list --failed``, ``sessions prune``)


def _listing(wf: Any) -> SessionListing:
    """A visibility entry (``WorkflowExecution``) as a session listing."""
    sa = wf.typed_search_attributes
    return SessionListing(
        session_id=wf.id,
        workflow_type=sa.get(SA_WORKFLOW) or "",
        status=sa.get(SA_STATUS) or "",
        phase=sa.get(SA_PHASE),
        execution_status=wf.status.name.lower() if wf.status else "unknown",
        started_at=wf.start_time,
        run_id=wf.run_id,
    )


class PhasegateClient(TaskMethods, BaseClient):
    """Start, read and drive gated sessions, and their tasks (``client._task_methods``).

    Args:
        client: A connected Temporal client using the pydantic data converter.
        task_queue: Where the phasegate worker listens.
    """

    def handle(self, session_id: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(session_id)

    async def start(
        self,
        workflow_type: str,
        target: str = "",
        *,
        options: SessionOptions | None = None,
        session_id: str | None = None,
        wait: bool = True,
    ) -> str:
        """Start a session; with ``wait`` also wait until its definition has loaded.

        Returns:
            The session id (the workflow id).

        Raises:
            PhasegateError: e.g. ``workflow_not_found``, ``source_parse_failed``.
        """
        session_id = session_id or f"{workflow_type}-{uuid.uuid4().hex[:10]}"
        await self.temporal.start_workflow(
            GatedSession.run,
            StartSession(
                workflow_type=workflow_type, target=target, options=options or SessionOptions()
            ),
            id=session_id,
            task_queue=self.task_queue,
            static_summary=f"phasegate `{workflow_type}` session on `{target or '-'}`",
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(SA_WORKFLOW, workflow_type),
                    SearchAttributePair(SA_PHASE, 0),
                    SearchAttributePair(SA_STATUS, "starting"),
                ]
            ),
        )
        if wait:
            await self.wait_started(session_id)
        return session_id

    async def wait_started(self, session_id: str, timeout: float = 60.0) -> SessionView:
        """Poll until the session has loaded its definition, or raise why it could not."""
        handle = self.handle(session_id)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                return await handle.query(GatedSession.status)
            except WorkflowQueryFailedError:
                pass
            desc = await handle.describe()
            if desc.status not in (None, WorkflowExecutionStatus.RUNNING):
                try:
                    await handle.result()
                except WorkflowFailureError as exc:
                    raise phasegate_error(exc) from None
            if asyncio.get_running_loop().time() > deadline:
                raise SessionError(
                    f"session {session_id} did not start within {timeout:.0f}s",
                    hint=self.worker_hint(),
                )
            await asyncio.sleep(0.05)

    async def status(self, session_id: str) -> SessionView:
        return await self._query(session_id, GatedSession.status)

    async def phase(
        self, session_id: str, phase: int | None = None
    ) -> PhaseView | SequenceViolation:
        if phase is None:
            current = await self.current(session_id)
            if current.phase is not None:
                return current.phase
            phase = current.status.current_phase
        return await self._query(session_id, GatedSession.phase, PhaseQuery(phase=phase))

    async def current(self, session_id: str) -> CurrentView:
        """The status and the current phase's view (None once finished) in one round trip;
        two against a worker older than the ``current`` query."""
        try:
            return await self._query(session_id, GatedSession.current)
        except PhasegateError as err:
            if "Query handler for 'current' expected but not found" not in err.message:
                raise
        status = await self.status(session_id)
        view = None
        if status.status not in ("completed", "abandoned"):
            view = await self._query(
                session_id, GatedSession.phase, PhaseQuery(phase=status.current_phase)
            )
        return CurrentView(status=status, phase=view if isinstance(view, PhaseView) else None)

    async def task(
        self, session_id: str, phase: int, task: str | int
    ) -> TaskView | SequenceViolation:
        return await self._query(
            session_id, GatedSession.task, TaskQuery(phase=phase, task=str(task))
        )

    async def submit(
        self,
        session_id: str,
        phase: int,
        evidence: dict[str, Any],
        *,
        submission_id: str | None = None,
    ) -> CheckpointResult:
        """Submit checkpoint evidence; a repeated ``submission_id`` returns the first result."""
        sub = _bounded(
            CheckpointSubmission(phase=phase, evidence=evidence, submission_id=submission_id)
        )
        return await self._update(session_id, GatedSession.submit_checkpoint, sub, submission_id)

    async def submit_nowait(
        self,
        session_id: str,
        phase: int,
        evidence: dict[str, Any],
        *,
        submission_id: str | None = None,
    ) -> str:
        """Fire-and-forget submission: returns once the session has *accepted* it (its
        validator ran, so a refusal still raises here); the outcome shows in ``status``
        and a repeat of ``submission_id`` returns it. Returns the submission id.

        This replaces the retired ``checkpoint`` signal, whose payload reached history
        before anything could refuse it.
        """
        submission_id = submission_id or uuid.uuid4().hex
        sub = _bounded(
            CheckpointSubmission(phase=phase, evidence=evidence, submission_id=submission_id)
        )
        try:
            update = await self.handle(session_id).start_update(
                GatedSession.submit_checkpoint,
                sub,
                id=submission_id,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            )
            # A refusal comes back as the update's known outcome: raise it. An accepted
            # update is still running; its polling is cut short, not the update.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(update.result(), timeout=0.05)
        except (RPCError, WorkflowUpdateFailedError) as exc:
            raise phasegate_error(exc) from None
        return submission_id

    async def decide(
        self,
        session_id: str,
        *,
        decision: str,
        approver: str | None = None,
        phase: int | None = None,
        comment: str = "",
        as_key: str | None = None,
        key_dir: str | Path | None = None,
        nonce: str | None = None,
        signature: str | None = None,
    ) -> SessionView:
        """Approve or reject the phase awaiting approval (default: the current phase).

        Sessions with signed approvers accept only signed decisions: pass ``as_key``,
        the name of your key in ``key_dir`` (default ``client.keys.config_dir()``), and
        the decision is signed with it, bound to the evidence awaiting approval
        (``status.approval_binding``); the approver becomes the key's name, as for
        ``OrchestrationClient.decide``. Without a key the decision goes as ``approver``,
        with the ``nonce`` and ``signature`` given, if any (``client.keys.sign_decision``).

        Raises:
            ApprovalRefused: The session refused it (unsigned, unknown key, bad
                signature, not an approver).
            PhasegateError: Neither ``as_key`` nor ``approver`` says who decides, or the
                key cannot be loaded.
        """
        if phase is None or as_key is not None:
            status = await self.status(session_id)
            phase = status.current_phase if phase is None else phase
            if as_key is not None:
                approver, nonce, signature = sign_as(
                    as_key,
                    approver,
                    ask="who is deciding?",
                    key_dir=key_dir,
                    session_id=session_id,
                    phase=phase,
                    decision=decision,
                    comment=comment,
                    binding=status.approval_binding,
                )
        if not approver:
            raise PhasegateError("who is deciding?", hint="pass approver= or as_key=")
        msg = ApprovalDecision(
            phase=phase,
            approver=approver,
            decision=decision,
            comment=comment,
            nonce=nonce,
            signature=signature,
        )
        return await self._update(session_id, GatedSession.decide_approval, msg)

    async def control(
        self,
        session_id: str,
        req: ControlRequest,
        *,
        key: str | None = None,
        key_dir: str | Path | None = None,
    ) -> ControlResult:
        """Pause, resume, retry_phase, rollback or abandon a session (audited).

        Sessions that name approver or operator keys accept only signed controls: pass
        ``key``, the name of your key in ``key_dir`` (default: ``client.keys.config_dir()``),
        and the request is signed with it; its actor becomes the key's name. Without
        ``key`` the request goes as given (``req.nonce``/``req.signature`` may already
        be set, see ``client.keys.sign_control``).

        Raises:
            PhasegateError: The key cannot be loaded, or ``req.actor`` names someone else.
            SessionError: The session refused the control (unsigned, not authorised, or
                not applicable now).
        """
        if key is not None:
            from phasegate.client import keys

            if req.actor and req.actor != key:
                raise PhasegateError(
                    f"actor {req.actor!r} is not the signing key's name {key!r}",
                    where="actor",
                    hint="a signed control acts as its key: leave actor empty or name the key",
                )
            nonce, signature = keys.sign_control(
                key,
                session_id=session_id,
                action=req.action,
                reason=req.reason,
                to_phase=req.to_phase,
                directory=Path(key_dir) if key_dir is not None else None,
            )
            req = req.model_copy(update={"actor": key, "nonce": nonce, "signature": signature})
        return await self._update(session_id, GatedSession.control, req)

    async def _update(
        self, session_id: str, update: Any, arg: Any, update_id: str | None = None
    ) -> Any:
        """Run an update, retrying the transient refusal a run gives while it hands over
        to its continue-as-new successor (the update was never accepted, so a retry is safe).
        """
        # One update id for every attempt: if an attempt was in fact accepted, Temporal
        # answers the retry with that update's outcome instead of running it twice.
        update_id = update_id or str(uuid.uuid4())
        for attempt in range(_TRANSIENT_RETRIES + 1):
            try:
                args = [] if arg is NO_ARG else [arg]
                return await self.handle(session_id).execute_update(update, args=args, id=update_id)
            except RPCError as exc:
                if attempt < _TRANSIENT_RETRIES and transient(exc):
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                raise phasegate_error(exc) from None
            except WorkflowUpdateFailedError as exc:
                err = phasegate_error(exc)
                # A run that continued-as-new answers once the server vouches for its
                # carried state (milliseconds); a fresh session once its definition loads.
                if attempt < _TRANSIENT_RETRIES and _still_loading(err):
                    await asyncio.sleep(0.1 * (attempt + 1))
                    continue
                raise err from None
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                raise self._no_answer(f"session {session_id}") from None
        raise AssertionError("unreachable")

    async def result(self, session_id: str) -> SessionSummary:
        try:
            handle = self.temporal.get_workflow_handle_for(GatedSession.run, session_id)
            return await handle.result()
        except (WorkflowFailureError, RPCError) as exc:
            raise phasegate_error(exc) from None

    async def run_chain(self, session_id: str, limit: int = 25) -> list[str]:
        """The session's runs as the **server** records them, first to latest (at most
        ``limit``, the latest kept): each run's start event names the run it continues.
        Unlike ``status().run_chain`` it does not rest on anything the runs carried."""
        try:
            run_id = (await self.handle(session_id).describe()).run_id
            chain = [run_id]
            while len(chain) < limit:
                handle = self.temporal.get_workflow_handle(session_id, run_id=run_id)
                started = None
                async for event in handle.fetch_history_events(page_size=1):
                    started = event.workflow_execution_started_event_attributes
                    break
                continued = (
                    started is not None
                    and started.initiator
                    == ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW
                )
                if not continued or not started or not started.continued_execution_run_id:
                    break
                run_id = started.continued_execution_run_id
                chain.append(run_id)
        except RPCError as exc:
            raise phasegate_error(exc) from None
        return chain[::-1]

    async def other_runs(self, session_id: str, chain: list[str]) -> list[SessionListing]:
        """Executions under ``session_id`` that are not in its run ``chain``: an id that was
        terminated and started again (another session under the same name)."""
        out: list[SessionListing] = []
        query = f"WorkflowId = '{_quote(session_id)}'"
        async for wf in self.temporal.list_workflows(query, limit=20):
            if wf.run_id not in chain:
                out.append(_listing(wf))
        return out

    async def list(
        self,
        *,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 50,
    ) -> list[SessionListing]:
        """Sessions from Temporal visibility, newest first."""
        clauses = ["WorkflowType = 'GatedSession'"]
        if status:
            clauses.append(f"PhasegateStatus = '{_quote(status)}'")
        if workflow_type:
            clauses.append(f"PhasegateWorkflow = '{_quote(workflow_type)}'")
        return await self._listings(" AND ".join(clauses), limit)

    async def failed_starts(
        self,
        *,
        workflow_type: str | None = None,
        older_than: timedelta | None = None,
        limit: int = 50,
    ) -> builtins.list[SessionListing]:
        """Sessions that closed before loading their definition (a bad spec or target),
        newest first, each with the ``reason`` it failed."""
        query = executions.failed_starts_query(older_than)
        if workflow_type:
            query += f" AND PhasegateWorkflow = '{_quote(workflow_type)}'"
        rows = await self._listings(query, limit)
        reasons = await executions.gather_limited(
            [executions.failed_start_reason(self.temporal, r.session_id, r.run_id) for r in rows]
        )
        return [r.model_copy(update={"reason": why}) for r, why in zip(rows, reasons, strict=True)]

    async def delete(self, listing: SessionListing) -> None:
        """Delete one closed execution (e.g. a failed start) and its history. Temporal
        refuses to delete nothing else: a running session is deleted too, so callers
        pass only closed executions (``failed_starts``)."""
        try:
            await executions.delete(self.temporal, listing.session_id, listing.run_id or "")
        except RPCError as exc:
            raise phasegate_error(exc) from None

    async def waiting(self, session_id: str) -> Waiting:
        """What a message to the session waits on: a worker to take its task, a verify
        check queued or running (see ``client._executions.waiting``)."""
        try:
            return await executions.waiting(self.temporal, session_id)
        except RPCError as exc:
            raise phasegate_error(exc) from None

    async def _listings(self, query: str, limit: int) -> builtins.list[SessionListing]:
        out: builtins.list[SessionListing] = []
        async for wf in self.temporal.list_workflows(query, limit=limit):
            out.append(_listing(wf))
        return out

    async def _query(self, session_id: str, query: Any, *args: Any) -> Any:
        """Run a query; one that times out (a busy or absent worker) is tried again a few
        times, then reported in the user's terms."""
        loading = 0
        attempt = 0
        while attempt <= _QUERY_RETRIES:
            try:
                return await self.handle(session_id).query(query, *args)
            except (WorkflowQueryFailedError, RPCError) as exc:
                if not timed_out(exc):
                    err = phasegate_error(exc)
                    # A run that continued-as-new answers once the server vouches for its
                    # carried state (milliseconds); wait that out before saying "loading".
                    if _still_loading(err) and loading < _LOADING_RETRIES:
                        loading += 1
                        await asyncio.sleep(0.1 * loading)
                        continue
                    if _still_loading(err):  # or never will: its start failed
                        err = await self._failed_start(session_id) or SessionNotActive(
                            f"session {session_id} is still loading its definition",
                            hint=f"retry in a moment; `phasegate watch {session_id}` shows "
                            "when it is ready",
                        )
                    raise err from None
                if attempt == _QUERY_RETRIES:
                    failed = await self._failed_start(session_id)
                    raise failed or self._no_answer(
                        f"session {session_id}", _QUERY_RETRIES + 1
                    ) from None
                await asyncio.sleep(0.5 * (attempt + 1))
                attempt += 1
        raise AssertionError("unreachable")

    async def _failed_start(self, session_id: str) -> SessionError | None:
        """The error of a session that closed before loading, else None."""
        try:
            return await executions.failed_start(self.temporal, session_id)
        except RPCError:
            return None


_TRANSIENT_RETRIES = 8
_QUERY_RETRIES = 3
_LOADING_RETRIES = 5  # 1.5 s in all


def _still_loading(err: PhasegateError) -> bool:
    """The answer of a session that has not loaded its definition (yet, or ever)."""
    return "loading its definition" in err.message  # a query failure carries only its text


def _bounded(sub: CheckpointSubmission) -> CheckpointSubmission:
    """Refuse evidence no session accepts before sending it: a multi-megabyte update is
    refused by the session too, but only after it stalls the session's workflow task."""
    size = evidence_size(sub.evidence)
    if size > MAX_EVIDENCE_BYTES_LIMIT:
        raise PayloadTooLarge(
            f"evidence is {size} bytes; no session accepts more than {MAX_EVIDENCE_BYTES_LIMIT}",
            where="evidence",
            hint="submit paths or summaries instead of whole files",
        )
    return sub


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")
