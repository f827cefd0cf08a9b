"""Shared by the orchestration tests: start one, act as the person who approves the
developer's gated sessions, and script models per agent."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.client import Client, WorkflowHandle

from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import Issue, Profile
from phasegate.domain.orchestration.messages import OrchestrationView, StartOrchestration
from phasegate.testing import Approver, register_model, unregister_model, unsigned_approver
from phasegate.workflows import Orchestration

HONEST_AGENT = [sys.executable, "-m", "phasegate.testing.coding_agent", "{prompt}"]
# Claims every task done and lists files it never wrote (evidence that passes the schema).
PHANTOM_AGENT = [
    sys.executable,
    "-m",
    "phasegate.testing.coding_agent",
    "--phantom-files",
    "{prompt}",
]


def scripted(*answers: dict[str, Any] | Callable[[list[Any], AgentInfo], dict[str, Any]]):
    """A FunctionModel answering with each output in turn (the last one repeats)."""
    calls: list[int] = []

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        item = answers[min(len(calls), len(answers)) - 1]
        args = item(messages, info) if callable(item) else item
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    model = FunctionModel(answer)
    model.calls = calls  # type: ignore[attr-defined]
    return model


@contextlib.contextmanager
def models(**per_agent: FunctionModel):
    """Register scripted models; yields {agent: "test:KEY"} for a profile."""
    keys = {agent: f"{agent}-{uuid.uuid4().hex[:8]}" for agent in per_agent}
    ids = {agent: register_model(keys[agent], m) for agent, m in per_agent.items()}
    try:
        yield ids
    finally:
        for key in keys.values():
            unregister_model(key)


async def start(
    client: Client, task_queue: str, issue: Issue, profile: Profile, *, oid: str | None = None
) -> WorkflowHandle[Orchestration, OrchestrationView]:
    return await client.start_workflow(
        Orchestration.run,
        StartOrchestration(issue=issue, profile=profile),
        id=oid or f"orch-{uuid.uuid4().hex[:10]}",
        task_queue=task_queue,
    )


@contextlib.asynccontextmanager
async def approving_children(
    pg: PhasegateClient, handle: WorkflowHandle, approve: Approver | None = None
) -> AsyncIterator[list[str]]:
    """Act as the person: approve every phase of the developer's sessions that waits
    (``approve``: e.g. ``signed_approver("lead", key_dir=...)``; default unsigned)."""
    approved: list[str] = []
    approve = approve or unsigned_approver("lead")

    async def loop() -> None:
        while True:
            with contextlib.suppress(Exception):
                view = await handle.query(Orchestration.state)
                for child in view.child_sessions:
                    status = await pg.status(child)
                    if status.status == "awaiting_approval":
                        await approve(pg, child, status.current_phase)
                        approved.append(f"{child}:{status.current_phase}")
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop())
    try:
        yield approved
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
