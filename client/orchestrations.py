"""Typed async client for orchestrations: start one, read it, decide its gates, replan.

An orchestration (workflow ``Orchestration``) works one issue through a planned
pipeline of agents; see ``workflows/orchestration.py``. This client is what
``phasegate orchestrate`` and ``phasegate plan show`` use. Failures come back as
``domain.errors`` types speaking the CLI's terms (``approval_refused``,
``orchestration_failed``, ``session_not_found``), never as Temporal exceptions.

:meth:`OrchestrationClient.start` first has the worker check the profile (a short run
with ``check_only``, deleted once it answered): a profile the worker cannot run
(a missing API key, an unknown provider or coding agent, a provider's server that does
not answer) is refused before anything starts, with every problem.

Decisions and replan requests are signed exactly like a session's approvals
(``client.keys.sign_decision``) when a key name is given: the orchestration id as the
session, the open gate's number as the phase, bound to ``state.approval_binding``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from phasegate.client._base import BaseClient, sign_as, timed_out
from phasegate.client._executions import delete
from phasegate.client.api import SessionListing, _listing
from phasegate.domain.errors import (
    OrchestrationError,
    PhasegateError,
    SessionError,
    SessionNotFound,
)
from phasegate.domain.orchestration.agents import Issue, Profile
from phasegate.domain.orchestration.context import AgentPrompt
from phasegate.domain.orchestration.developer import id_problems
from phasegate.domain.orchestration.gates import digest
from phasegate.domain.orchestration.messages import (
    DeveloperPrompt,
    HistoryEntry,
    OrchestrationDecision,
    OrchestrationView,
    PlanView,
    ReplanRequest,
    StartOrchestration,
)
from phasegate.temporal import phasegate_error
from phasegate.workflows.orchestration import Orchestration

__all__ = ["OrchestrationClient", "new_orchestration_id"]

_STARTING = "still starting"  # the workflow's answer before its first run has set up
_CHECK = ".profile-check-"  # a check run's id: <orchestration id>.profile-check-<random>
CHECK_SECONDS = 60.0  # how long a check waits for a worker
_UPDATE_RETRIES = 8
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


def new_orchestration_id(issue: Issue) -> str:
    """``orch-<issue id>-<random>``, readable in a terminal and a child session's id."""
    slug = _UNSAFE_ID.sub("-", issue.id).strip("-.")[:40] or "issue"
    return f"orch-{slug}-{uuid.uuid4().hex[:6]}"


class OrchestrationClient(BaseClient):
    """Start, read and decide orchestrations.

    Args:
        client: A connected Temporal client using the pydantic data converter.
        task_queue: Where the phasegate worker listens.
    """

    def handle(self, orchestration_id: str) -> WorkflowHandle[Orchestration, OrchestrationView]:
        return self.temporal.get_workflow_handle_for(Orchestration.run, orchestration_id)

    async def start(
        self,
        issue: Issue,
        profile: Profile,
        *,
        orchestration_id: str | None = None,
        check: bool = True,
    ) -> str:
        """Start an orchestration of ``issue`` with ``profile``; returns its id.

        First the worker checks the profile (:meth:`check`; ``check=False`` skips
        that): a profile it cannot run starts nothing. The run checks again as it
        starts and fails at once if it cannot run after all (:meth:`state` and
        :meth:`result` then raise that failure).

        Raises:
            OrchestrationError: The worker refused the profile, with every problem.
            SessionError: No worker answered the check within ``CHECK_SECONDS``.
            PhasegateError: The id is taken, or Temporal cannot be reached.
        """
        oid = orchestration_id or new_orchestration_id(issue)
        if check:
            await self.check(issue, profile, orchestration_id=oid)
        try:
            await self.temporal.start_workflow(
                Orchestration.run,
                StartOrchestration(issue=issue, profile=profile),
                id=oid,
                task_queue=self.task_queue,
                static_summary=f"phasegate orchestration of issue `{issue.id}`: {issue.title}",
            )
        except WorkflowAlreadyStartedError:
            raise PhasegateError(
                f"orchestration {oid} already exists",
                where="--id",
                hint="pick another --id, or omit it for a fresh one",
            ) from None
        except RPCError as exc:
            raise phasegate_error(exc) from None
        return oid

    async def check(
        self,
        issue: Issue,
        profile: Profile,
        *,
        orchestration_id: str,
        timeout: float = CHECK_SECONDS,
    ) -> None:
        """Have the worker check ``profile`` as it would at the start of a run: models
        and API keys, each configured provider's server, the coding agent, the working
        directory, approvers. The check is a short run (``check_only``) under
        ``<id>.profile-check-<random>``, deleted once it answered.

        Raises:
            OrchestrationError: The profile cannot run on that worker: every problem.
            SessionError: No worker answered within ``timeout`` seconds.
        """
        problems = id_problems(orchestration_id)
        if not problems:
            problems = await self._worker_problems(issue, profile, orchestration_id, timeout)
        if problems:
            raise OrchestrationError(
                "the profile cannot run: " + "; ".join(problems),
                where="profile",
                hint="fix the profile (phasegate orchestrate ISSUE.md --profile P) or the "
                "worker's settings it names, then start again",
            )

    async def _worker_problems(
        self, issue: Issue, profile: Profile, oid: str, timeout: float
    ) -> list[str]:
        check_id = f"{oid[:100]}{_CHECK}{uuid.uuid4().hex[:8]}"
        try:
            handle = await self.temporal.start_workflow(
                Orchestration.run,
                StartOrchestration(issue=issue, profile=profile, check_only=True),
                id=check_id,
                task_queue=self.task_queue,
                execution_timeout=timedelta(seconds=timeout + 30),
                static_summary=f"phasegate: the worker's check of a profile for {oid}",
            )
        except RPCError as exc:
            raise phasegate_error(exc) from None
        try:
            view = await asyncio.wait_for(handle.result(), timeout)
        except TimeoutError:
            with contextlib.suppress(RPCError):
                await handle.terminate("no worker answered the profile check")
            raise SessionError(
                f"no phasegate worker on task queue {self.task_queue!r} checked the profile "
                f"within {timeout:.0f} s, so nothing was started",
                hint="start a worker (`phasegate dev`, or `phasegate worker` with your "
                "server), then start the orchestration again",
            ) from None
        except (WorkflowFailureError, RPCError) as exc:
            raise self._error(check_id, exc) from None
        finally:
            with contextlib.suppress(RPCError):  # a server may refuse deletes: it expires
                await delete(self.temporal, check_id, handle.result_run_id or "")
        return [view.failure] if view.failure else []  # the run's own "a; b; c"

    # ------------------------------------------------------------------ reads
    async def list_orchestrations(self, limit: int = 50) -> list[SessionListing]:
        """Orchestrations on this task queue, newest first: id, phasegate status, the
        plan step it is on, and Temporal's execution status (never a profile check)."""
        query = f"WorkflowType = 'Orchestration' AND TaskQueue = '{self.task_queue}'"
        out: list[SessionListing] = []
        try:
            async for wf in self.temporal.list_workflows(query, limit=limit + 10):
                if _CHECK not in wf.id:
                    out.append(_listing(wf))
        except RPCError as exc:
            raise phasegate_error(exc) from None
        return out[:limit]

    async def state(self, orchestration_id: str, *, timeout: float = 30.0) -> OrchestrationView:
        """Status, plan, outputs, usage and what the run waits for (query ``state``).

        Waits (up to ``timeout`` seconds) while a run is starting, e.g. just after a
        start or a replan.

        Raises:
            OrchestrationError: It failed before its first step (e.g. the worker refused
                the profile), with the reason.
            SessionNotFound: No orchestration has that id.
        """
        view = await self._query(orchestration_id, Orchestration.state, timeout)
        if (
            view.status == "planning"
            and not view.plan.steps
            and await self.closed(orchestration_id)
        ):
            await self.result(orchestration_id)  # it failed before its first plan: raise why
        return view

    async def plan(self, orchestration_id: str, *, timeout: float = 30.0) -> PlanView:
        """The plan with the current step marked (query ``plan``)."""
        return await self._query(orchestration_id, Orchestration.plan, timeout)

    async def developer_prompt(
        self, orchestration_id: str, *, timeout: float = 30.0
    ) -> DeveloperPrompt:
        """The open developer session, its spec and the prompt its coding agent is given
        (query ``developer_prompt``; empty fields when no developer session is open)."""
        return await self._query(orchestration_id, Orchestration.developer_prompt, timeout)

    async def agent_prompts(
        self, orchestration_id: str, *, timeout: float = 30.0
    ) -> dict[str, AgentPrompt]:
        """What each LLM agent of the current run was told, by step key (``planner`` for
        the plan), as its model request recorded it (query ``agent_prompts``)."""
        return await self._query(orchestration_id, Orchestration.agent_prompts, timeout)

    async def history(self, orchestration_id: str, *, timeout: float = 30.0) -> list[HistoryEntry]:
        """The append-only history: plans, decisions, steps, replans (query ``history``)."""
        return await self._query(orchestration_id, Orchestration.history, timeout)

    async def result(self, orchestration_id: str) -> OrchestrationView:
        """Wait for the orchestration to finish; its final state.

        Raises:
            OrchestrationError: It failed (code ``orchestration_failed``), with the reason.
        """
        try:
            return await self.handle(orchestration_id).result()
        except (WorkflowFailureError, RPCError) as exc:
            raise self._error(orchestration_id, exc) from None

    async def closed(self, orchestration_id: str) -> bool:
        """Whether the orchestration's latest run has closed (completed, failed, ...)."""
        try:
            desc = await self.temporal.get_workflow_handle(orchestration_id).describe()
        except RPCError as exc:
            raise self._error(orchestration_id, exc) from None
        return desc.status not in (None, WorkflowExecutionStatus.RUNNING)

    # -------------------------------------------------------------- decisions
    async def decide(
        self,
        orchestration_id: str,
        decision: Literal["approve", "reject"],
        *,
        as_key: str | None,
        comment: str = "",
        key_dir: str | Path | None = None,
        approver: str | None = None,
        gate: int | None = None,
    ) -> OrchestrationView:
        """Approve or reject the open gate (a step waiting to run, or an escalated output).

        A rejection fails the orchestration with the comment as its reason.

        Args:
            orchestration_id: The orchestration.
            decision: ``approve`` or ``reject``.
            as_key: Sign with this key (its name is the approver); None sends an
                unsigned decision as ``approver`` (accepted only where the worker
                allows unsigned approvals).
            comment: Why; the signature binds it.
            key_dir: Configuration directory holding ``keys/`` (default
                ``client.keys.config_dir()``).
            approver: The name of an unsigned decision (default ``as_key``).
            gate: The gate you mean (refused if another one is open).

        Raises:
            ApprovalRefused: The orchestration refused it (unsigned, unknown key, bad
                signature, not an approver), with the fix.
            PhasegateError: Nothing is waiting for a decision.
        """
        oid = orchestration_id
        view = await self.state(oid)
        awaiting = view.awaiting
        if awaiting is None:
            raise PhasegateError(
                f"orchestration {oid} is {view.status}: nothing is waiting for a decision",
                hint=f"`phasegate plan show {oid}` shows where it is; a developer's session "
                "waiting for approval is approved with `phasegate approve SESSION`",
            )
        if gate is not None and gate != awaiting.gate:
            raise PhasegateError(
                f"gate {gate} is not the open one: gate {awaiting.gate} ({awaiting.kind} of "
                f"{awaiting.agent}) is waiting",
                where="--gate",
                hint=f"read it with `phasegate plan show {oid}`, then decide gate {awaiting.gate}",
            )
        name, nonce, signature = sign_as(
            as_key,
            approver,
            ask="who is deciding?",
            key_dir=key_dir,
            session_id=oid,
            phase=awaiting.gate,
            decision=decision,
            comment=comment,
            binding=view.approval_binding,
        )
        msg = OrchestrationDecision(
            gate=awaiting.gate,
            approver=name,
            decision=decision,
            comment=comment,
            nonce=nonce,
            signature=signature,
        )
        return await self._update(oid, Orchestration.decide_approval, msg)

    async def request_replan(
        self,
        orchestration_id: str,
        reason: str,
        *,
        as_key: str | None,
        key_dir: str | Path | None = None,
        requested_by: str | None = None,
    ) -> OrchestrationView:
        """Ask the planner for a new plan, after the current step (a continue-as-new).

        Signed with ``as_key`` like a decision (the ``replan_gate`` ``state`` shows, the
        reason as the comment); without a key it goes unsigned as ``requested_by``.

        Raises:
            ApprovalRefused: Refused (unsigned, unknown key, not an approver).
            SessionError: The orchestration has finished, or a replan is already pending.
        """
        view = await self.state(orchestration_id)
        binding = None
        if as_key is not None:  # the first run's id costs a describe: only when signing
            binding = {
                "evidence_sha256": digest({"replan": view.run_chain_length - 1}),
                "first_run_id": (view.approval_binding or {}).get("first_run_id")
                or await self._first_run_id(orchestration_id),
            }
        name, nonce, signature = sign_as(
            as_key,
            requested_by,
            ask="who asks for the replan?",
            key_dir=key_dir,
            session_id=orchestration_id,
            phase=view.replan_gate,
            decision="approve",
            comment=reason,
            binding=binding,
        )
        msg = ReplanRequest(reason=reason, requested_by=name, nonce=nonce, signature=signature)
        return await self._update(orchestration_id, Orchestration.request_replan, msg)

    # ---------------------------------------------------------------- helpers
    async def _first_run_id(self, oid: str) -> str:
        """The run id of the orchestration's first run (what a replan's signature binds)."""
        try:
            desc = await self.temporal.get_workflow_handle(oid).describe()
        except RPCError as exc:
            raise self._error(oid, exc) from None
        run_id = desc.raw_description.workflow_execution_info.first_run_id
        return run_id or desc.run_id

    async def _query(self, oid: str, query: Any, timeout: float) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                return await self.temporal.get_workflow_handle(oid).query(query)
            except (WorkflowQueryFailedError, RPCError) as exc:
                if timed_out(exc):
                    raise self._no_answer(f"orchestration {oid}") from None
                err = self._error(oid, exc)
                if _STARTING not in err.message:
                    raise err from None
            if await self.closed(oid):  # it failed before setting up: say why
                await self.result(oid)
            if loop.time() > deadline:
                raise SessionError(
                    f"orchestration {oid} did not start within {timeout:.0f} s",
                    hint="is a phasegate worker running? (`phasegate worker` or `phasegate dev`)",
                )
            await asyncio.sleep(0.1)

    async def _update(self, oid: str, update: Any, arg: Any) -> OrchestrationView:
        """Run an update; retry the refusal a run gives while it hands over to a replan."""
        view: OrchestrationView = await self._retrying_update(
            oid, update, arg, what=f"orchestration {oid}", starting=_STARTING
        )
        return view

    def _error(self, oid: str, exc: BaseException) -> PhasegateError:
        """A Temporal failure in the CLI's terms."""
        err = phasegate_error(exc)
        text = str(exc).lower()
        if isinstance(err, SessionNotFound) or (
            isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND
        ):
            return SessionNotFound(
                f"no orchestration {oid}",
                hint="use the id `phasegate orchestrate` printed; in the Web UI, "
                "PhasegateWorkflow = 'orchestration' lists them",
            )
        if "expected but not found" in text or "unknown querytype" in text:
            return PhasegateError(
                f"{oid} is not an orchestration",
                hint=f"for a session use `phasegate status {oid}`",
            )
        return err
