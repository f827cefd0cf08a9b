"""Record Orchestration histories for tests/test_orchestration_replay.py.

Run from the repo root after a deliberate, compatible change to workflow code:

    .venv/bin/python tests/histories/record_orchestration.py

It starts its own dev server and an in-process worker (the scripted models are
``test:KEY`` models registered in this process), runs a few orchestrations and
writes each run's history (every run of a continue-as-new chain, and the
developer's child session) to ``tests/histories/orchestration_runs/`` as
``<scenario>--<workflow id>.json``:

- ``trivial_rules``: the rules planner on a typo, developer (honest scripted
  coding agent, its child session approved) then a demo reviewer;
- ``replan_run1`` / ``replan_run2``: the rules planner on a bug; the analyst finds
  it complex, so the run replans by continue-as-new to architect, developer, reviewer;
- ``gates_run1`` / ``gates_run2``: an LLM planner (scripted); the analyst's low
  confidence escalates (signed approval), the architect waits for a signed
  approval, a person's signed replan request instead continues as new, then
  approval, architect, developer (its child session's plan approved, signed by
  lead: spec_execution_v1's phase 0 gate lists only lead), reviewer;
  ``gates_child`` is that developer session (its signed approval);
- ``llm_planner_run1`` / ``llm_planner_run2``: an LLM planner (scripted); the
  analyst's first answer does not validate (sent back, answered again), architect,
  developer, and the reviewer asks for a replan; the new plan's developer and
  reviewer (who approves) finish it;
- ``failed``: the analyst never answers validly and no replan is left: the run fails.

Every plan holds a developer followed by a reviewer (the workflow refuses others);
the developer is the worker's ``scripted`` coding agent (``developer.agent``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.gates import digest
from phasegate.domain.orchestration.messages import (
    OrchestrationDecision,
    OrchestrationView,
    ReplanRequest,
    StartOrchestration,
)
from phasegate.domain.settings import Settings
from phasegate.testing import (
    Approver,
    dev_server,
    make_settings,
    register_model,
    running_worker,
    signed_approver,
    unsigned_approver,
)
from phasegate.workflows import Orchestration

OUT = Path(__file__).resolve().parent / "orchestration_runs"
# The worker's own scripted coding agent (Settings.developer_commands["scripted"]).
DEVELOPER = DeveloperProfile(mode="command", agent="scripted", timeout_minutes=2)
RUN_TIMEOUT_S = 150  # a recorded run takes seconds; a stalled one says why
DEMO = {"analyst": "demo", "architect": "demo", "reviewer": "demo"}
TYPO = Issue(id="1", title="Fix typo in README: 'recieve' to 'receive'", labels=["docs"])
BUG = Issue(
    id="7",
    title="Login fails intermittently",
    body="Users report that the login page sometimes shows an error.",
    labels=["bug"],
)
FEATURE = Issue(
    id="12", title="Add a health endpoint to the service", body="GET /health returns the version."
)


def _plan(*agents: str) -> dict[str, Any]:
    return {
        "reasoning": "Understand the request, then act on it and review it.",
        "steps": [{"agent": a, "reason": f"the {a} step"} for a in agents],
        "scope": "moderate",
    }


def _analysis(scope: str = "moderate", confidence: float = 0.9) -> dict[str, Any]:
    return {
        "findings": ["The handler lives in one module."],
        "scope": scope,
        "confidence": confidence,
    }


ARCHITECT = {
    "goal": "Add a health endpoint returning the version",
    "plan_markdown": "## Phase 1: Endpoint\n\n- [ ] 1.1 Add the health route\n",
    "confidence": 0.9,
}
REVIEW_OK = {"approved": True, "comments": [], "severity": "none", "confidence": 0.9}
INVALID = {"findings": "not a list", "scope": "enormous"}

# Scripted models, keyed as the profiles below name them ("test:<key>"). The replay
# test registers placeholders under the keys it finds in each history's input.
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "rec-analyst-complex": [_analysis("complex")],
    "rec-planner-gates": [
        _plan("analyst", "architect", "developer", "reviewer"),
        _plan("architect", "developer", "reviewer"),
    ],
    "rec-analyst-unsure": [_analysis(confidence=0.5)],
    "rec-architect": [ARCHITECT],
    "rec-reviewer": [REVIEW_OK],
    "rec-planner-llm": [
        _plan("analyst", "architect", "developer", "reviewer"),
        _plan("developer", "reviewer"),
    ],
    "rec-analyst-retry": [INVALID, _analysis()],
    "rec-reviewer-replan": [
        {**REVIEW_OK, "replan_request": "the API needs a second look"},
        REVIEW_OK,
    ],
    "rec-analyst-invalid": [INVALID],
}


def scripted(answers: list[dict[str, Any]]) -> FunctionModel:
    """A zero-latency model answering each output in turn (the last one repeats)."""
    calls: list[int] = []

    def answer(messages: list[Any], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        args = answers[min(len(calls), len(answers)) - 1]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    return FunctionModel(answer)


async def save_chain(client: Client, name: str, wid: str) -> None:
    """Write every run of ``wid``'s chain (``name_runN`` when it continued as new)."""
    histories = []
    run_id: str | None = await _first_run(client, wid)
    while run_id:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else None
        )
    for i, history in enumerate(histories, 1):
        label = f"{name}_run{i}" if len(histories) > 1 else name
        (OUT / f"{label}--{wid}.json").write_text(history.to_json())
        print(f"recorded {label}--{wid}.json ({len(history.events)} events)")


async def _first_run(client: Client, wid: str) -> str:
    """The run id of the chain's first run."""
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{wid}'")]
    return min(runs, key=lambda w: w.start_time).run_id


async def wait_for(handle: WorkflowHandle, kind: str) -> OrchestrationView:
    """Poll ``state`` until a gate of ``kind`` is open."""
    for _ in range(600):
        view = await handle.query(Orchestration.state)
        if view.awaiting is not None and view.awaiting.kind == kind:
            return view
        if view.status in ("completed", "failed"):
            raise RuntimeError(f"{handle.id} ended before a {kind} gate: {view.failure}")
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{handle.id}: no {kind} gate")


@contextlib.asynccontextmanager
async def approving_children(
    pg: PhasegateClient, handle: WorkflowHandle, approve: Approver
) -> AsyncIterator[list[str]]:
    """Act as the person who approves the developer session's plan (phase 0); yields
    the refusals met (a recording that stalls says why)."""
    refused: list[str] = []

    async def loop() -> None:
        while True:
            try:
                for child in (await handle.query(Orchestration.state)).child_sessions:
                    status = await pg.status(child)
                    if status.status == "awaiting_approval":
                        await approve(pg, child, status.current_phase)
            except Exception as err:  # noqa: BLE001 - starting or refused: retry, keep why
                refused[:] = [f"{type(err).__name__}: {err}"]
            await asyncio.sleep(0.1)

    task = asyncio.create_task(loop())
    try:
        yield refused
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def run(
    client: Client,
    settings: Settings,
    wid: str,
    issue: Issue,
    profile: Profile,
    drive: Callable[[WorkflowHandle], Awaitable[None]] | None = None,
    approve: Approver | None = None,
) -> OrchestrationView | None:
    handle = await client.start_workflow(
        Orchestration.run,
        StartOrchestration(issue=issue, profile=profile),
        id=wid,
        task_queue=settings.task_queue,
    )
    pg = PhasegateClient(client, settings.task_queue)
    async with approving_children(pg, handle, approve or unsigned_approver("lead")) as refused:
        try:
            async with asyncio.timeout(RUN_TIMEOUT_S):
                if drive is not None:
                    await drive(handle)
                return await handle.result()
        except WorkflowFailureError:
            return None
        except TimeoutError:
            view = await client.get_workflow_handle(wid).query(Orchestration.state)
            raise RuntimeError(
                f"{wid} still {view.status} after {RUN_TIMEOUT_S} s (awaiting {view.awaiting}); "
                f"last refusal approving its developer session: {refused or 'none'}"
            ) from None


def keys_of(view: OrchestrationView) -> list[str]:
    """The output keys of a finished run, in order (``developer_0``…)."""
    return [o.key for o in view.outputs]


def _workdir(root: Path, name: str) -> str:
    work = root / name
    work.mkdir(parents=True)
    (work / "README.md").write_text("We recieve mail.\n")
    return str(work)


async def record_unsigned(client: Client, root: Path) -> None:
    settings = make_settings(root / "home", allow_unsigned_approvals=True, task_queue="record")
    with concurrent.futures.ThreadPoolExecutor() as pool:
        async with running_worker(client, settings, executor=pool):
            profile = Profile(working_dir=_workdir(root, "typo"), models=DEMO, developer=DEVELOPER)
            view = await run(client, settings, "orch-trivial", TYPO, profile)
            assert view is not None and view.status == "completed", view
            await save_chain(client, "trivial_rules", "orch-trivial")
            await save_chain(client, "trivial_rules_child", view.child_sessions[0])

            models = {**DEMO, "analyst": "test:rec-analyst-complex"}
            profile = Profile(working_dir=_workdir(root, "bug"), models=models, developer=DEVELOPER)
            view = await run(client, settings, "orch-replan", BUG, profile)
            assert view is not None and view.status == "completed", view
            assert view.plan.replanned_count == 1, view.plan
            await save_chain(client, "replan", "orch-replan")

            models = {
                "planner": "test:rec-planner-llm",
                "analyst": "test:rec-analyst-retry",
                "architect": "test:rec-architect",
                "reviewer": "test:rec-reviewer-replan",
            }
            profile = Profile(working_dir=_workdir(root, "llm"), models=models, developer=DEVELOPER)
            view = await run(client, settings, "orch-llm-planner", FEATURE, profile)
            assert view is not None and view.status == "completed", view
            assert view.plan.replanned_count == 1 and view.usage.requests >= 6, view
            done = keys_of(view)
            assert {"developer_0", "developer_1", "reviewer_1"} <= set(done), done
            assert len(view.child_sessions) == 2, view.child_sessions
            await save_chain(client, "llm_planner", "orch-llm-planner")

            models = {**DEMO, "analyst": "test:rec-analyst-invalid"}
            profile = Profile(working_dir=_workdir(root, "fail"), models=models, max_replans=0)
            assert await run(client, settings, "orch-failed", BUG, profile) is None
            await save_chain(client, "failed", "orch-failed")


async def record_signed(client: Client, root: Path) -> None:
    keydir = root / "keys"
    # alice decides the orchestration's gates; the developer session's phase 0 gate
    # (spec_execution_v1) lists only ``lead``, who signs that approval.
    people = [keys.new_key(name, directory=keydir) for name in ("alice", "lead")]
    settings = make_settings(
        root / "home-signed",
        task_queue="record-signed",
        approver_keys_file=json.dumps([key.model_dump(mode="json") for key in people]),
    )

    async def decide(handle: WorkflowHandle, kind: str) -> None:
        view = await wait_for(handle, kind)
        assert view.awaiting is not None
        nonce, sig = keys.sign_decision(
            "alice",
            session_id=handle.id,
            phase=view.awaiting.gate,
            decision="approve",
            comment="ok",
            directory=keydir,
            binding=view.approval_binding,
        )
        await handle.execute_update(
            Orchestration.decide_approval,
            OrchestrationDecision(
                gate=view.awaiting.gate,
                approver="alice",
                decision="approve",
                comment="ok",
                nonce=nonce,
                signature=sig,
            ),
        )

    async def drive(handle: WorkflowHandle) -> None:
        await decide(handle, "escalation")  # the analyst was only 0.5 confident
        view = await wait_for(handle, "approval")  # the architect waits; a person replans
        assert view.approval_binding is not None
        reason = "design the endpoint with the API team first"
        nonce, sig = keys.sign_decision(
            "alice",
            session_id=handle.id,
            phase=view.replan_gate,
            decision="approve",
            comment=reason,
            directory=keydir,
            binding={
                "evidence_sha256": digest({"replan": view.plan.replanned_count}),
                "first_run_id": view.approval_binding["first_run_id"],
            },
        )
        await handle.execute_update(
            Orchestration.request_replan,
            ReplanRequest(reason=reason, requested_by="alice", nonce=nonce, signature=sig),
        )
        await decide(client.get_workflow_handle(handle.id), "approval")  # the new run's gate

    with concurrent.futures.ThreadPoolExecutor() as pool:
        async with running_worker(client, settings, executor=pool):
            models = {
                "planner": "test:rec-planner-gates",
                "analyst": "test:rec-analyst-unsure",
                "architect": "test:rec-architect",
                "reviewer": "test:rec-reviewer",
            }
            profile = Profile(
                working_dir=_workdir(root, "gates"),
                models=models,
                approval_required=["architect"],
                developer=DEVELOPER,
            )
            approve = signed_approver("lead", key_dir=keydir)
            view = await run(client, settings, "orch-gates", FEATURE, profile, drive, approve)
            assert view is not None and view.status == "completed", view
            assert view.plan.replanned_count == 1, view.plan
            assert {"architect_0", "developer_0", "reviewer_0"} <= set(keys_of(view)), view
            await save_chain(client, "gates", "orch-gates")
            await save_chain(client, "gates_child", view.child_sessions[0])


async def main() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.json"):
        old.unlink()
    for key, answers in SCRIPTS.items():
        register_model(key, scripted(answers))
    root = Path(tempfile.mkdtemp(prefix="phasegate-record-orch-"))
    async with dev_server() as env:
        await record_unsigned(env.client, root)
        await record_signed(env.client, root)


if __name__ == "__main__":
    asyncio.run(main())
