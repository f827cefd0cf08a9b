"""Record Orchestration histories for tests/test_orchestration_replay.py.

Run from the repo root after a deliberate, compatible change to workflow code:

    .venv/bin/python tests/histories/record_orchestration.py                # every scenario
    .venv/bin/python tests/histories/record_orchestration.py mcp_developer  # only those named

Keep the histories older code recorded (re-record only the scenarios you add): they
are what guards the ``workflow.patched`` branches. Naming scenarios replaces only
their files; naming none re-records (and replaces) every file.

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
- ``failed``: the analyst never answers validly and no replan is left: the run fails;
- ``prompt_in_request``: an LLM planner (scripted) plans analyst, architect,
  developer, reviewer; each agent's prompt is rendered in its model request and the
  plans are checked by a local activity (patch ``orchestration-one-activity-step``);
  the analyst's first answer does not validate (sent back without the recorded
  prompt, answered again); one run, approved;
- ``mcp_developer``: the rules planner on a typo, a developer in ``mode: mcp`` (its
  prompt rendered before the session starts, patch
  ``orchestration-mcp-developer-prompt``) whose session the recorder drives as an
  outside agent would (phase, then submit with passing evidence; a person approves
  phase 0), then a demo reviewer; ``mcp_developer_child`` is that session;
- ``planner_unreachable``: an LLM planner on an OpenAI-compatible server (a configured
  provider) that answers the start-up check and then goes away: its one model request
  is refused and the run fails at once, code model_unreachable (patch
  ``orchestration-planner-configuration-fails``), with no replan. The planner's model
  is the one the worker builds for ``ollama:llama3``, registered as a ``test:`` key so
  that the replay test (no model providers) can build it in workflow code.

Every plan holds a developer followed by a reviewer (the workflow refuses others);
the developer is the worker's ``scripted`` coding agent (``developer.agent``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import socket
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from phasegate.activities.model_providers import ModelProviders
from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.gates import digest
from phasegate.domain.orchestration.messages import (
    OrchestrationDecision,
    OrchestrationView,
    ReplanRequest,
    StartOrchestration,
)
from phasegate.domain.session.messages import SessionView
from phasegate.domain.settings import ProviderConfig, Settings
from phasegate.testing import (
    Approver,
    ScriptedAgent,
    dev_server,
    known_good,
    make_settings,
    register_model,
    running_worker,
    signed_approver,
    unsigned_approver,
    workspace_for,
)
from phasegate.workflows import Orchestration

OUT = Path(__file__).resolve().parent / "orchestration_runs"
# The worker's own scripted coding agent (Settings.developer_commands["scripted"]).
DEVELOPER = DeveloperProfile(mode="command", agent="scripted", timeout_minutes=2)
DEV_WORKFLOW = "spec_execution_v1"  # what every developer session runs
OLLAMA = "ollama:llama3"  # a model of an OpenAI-compatible server (model_providers)
UNREACHABLE_PLANNER = "rec-planner-ollama"
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
    "rec-planner-once": [_plan("analyst", "architect", "developer", "reviewer")],
    "rec-analyst-retry-once": [INVALID, _analysis()],
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


@contextlib.asynccontextmanager
async def unsigned_worker(client: Client, root: Path) -> AsyncIterator[Settings]:
    """A worker on queue ``record`` whose sessions take approvals by name."""
    settings = make_settings(root / "home", allow_unsigned_approvals=True, task_queue="record")
    with concurrent.futures.ThreadPoolExecutor() as pool:
        async with running_worker(client, settings, executor=pool):
            yield settings


async def record_trivial_rules(client: Client, root: Path) -> None:
    async with unsigned_worker(client, root) as settings:
        profile = Profile(working_dir=_workdir(root, "typo"), models=DEMO, developer=DEVELOPER)
        view = await run(client, settings, "orch-trivial", TYPO, profile)
        assert view is not None and view.status == "completed", view
        await save_chain(client, "trivial_rules", "orch-trivial")
        await save_chain(client, "trivial_rules_child", view.child_sessions[0])


async def record_replan(client: Client, root: Path) -> None:
    async with unsigned_worker(client, root) as settings:
        models = {**DEMO, "analyst": "test:rec-analyst-complex"}
        profile = Profile(working_dir=_workdir(root, "bug"), models=models, developer=DEVELOPER)
        view = await run(client, settings, "orch-replan", BUG, profile)
        assert view is not None and view.status == "completed", view
        assert view.plan.replanned_count == 1, view.plan
        await save_chain(client, "replan", "orch-replan")


async def record_llm_planner(client: Client, root: Path) -> None:
    async with unsigned_worker(client, root) as settings:
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


async def record_prompt_in_request(client: Client, root: Path) -> None:
    async with unsigned_worker(client, root) as settings:
        models = {
            "planner": "test:rec-planner-once",
            "analyst": "test:rec-analyst-retry-once",
            "architect": "test:rec-architect",
            "reviewer": "test:rec-reviewer",
        }
        profile = Profile(working_dir=_workdir(root, "prompt"), models=models, developer=DEVELOPER)
        view = await run(client, settings, "orch-prompt-in-request", FEATURE, profile)
        assert view is not None and view.status == "completed", view
        assert view.plan.replanned_count == 0 and view.usage.requests == 5, view
        await save_chain(client, "prompt_in_request", "orch-prompt-in-request")


async def record_failed(client: Client, root: Path) -> None:
    async with unsigned_worker(client, root) as settings:
        models = {**DEMO, "analyst": "test:rec-analyst-invalid"}
        profile = Profile(working_dir=_workdir(root, "fail"), models=models, max_replans=0)
        assert await run(client, settings, "orch-failed", BUG, profile) is None
        await save_chain(client, "failed", "orch-failed")


async def _person_decides(pg: PhasegateClient, session_id: str, phase: int) -> SessionView:
    """The outside agent's "approver": it waits while the person (``approving_children``)
    approves the phase, as a coding agent told to wait for approval does."""
    while (status := await pg.status(session_id)).status in (
        "awaiting_approval",
        "approval_overdue",
    ):
        await asyncio.sleep(0.1)
    return status


async def record_mcp_developer(client: Client, root: Path) -> None:
    async with unsigned_worker(client, root) as settings:
        pg = PhasegateClient(client, settings.task_queue)
        # The files the known-good evidence of spec_execution_v1's phases names.
        work = workspace_for("spec_execution_v1", root / "mcp")
        (work / "README.md").write_text("We recieve mail.\n")
        mcp = DeveloperProfile(mode="mcp", timeout_minutes=2)
        profile = Profile(working_dir=str(work), models=DEMO, developer=mcp)
        walked: list[SessionView] = []

        async def drive(handle: WorkflowHandle) -> None:
            """The outside agent: reads the current phase and submits passing evidence
            until its session completes (the person approves phase 0)."""
            child = await open_session(handle, pg)
            agent = ScriptedAgent(pg, known_good(DEV_WORKFLOW), approve=_person_decides)
            walked.append(await agent.walk(child))

        view = await run(client, settings, "orch-mcp-developer", TYPO, profile, drive)
        assert view is not None and view.status == "completed", view
        assert walked and walked[0].status == "completed", walked
        assert [s.agent for s in view.plan.steps] == ["developer", "reviewer"], view.plan
        assert view.developer_sessions[0].mode == "mcp", view.developer_sessions
        await save_chain(client, "mcp_developer", "orch-mcp-developer")
        await save_chain(client, "mcp_developer_child", view.child_sessions[0])


async def open_session(handle: WorkflowHandle, pg: PhasegateClient) -> str:
    """The developer's session, once it answers (it loads its definition first)."""
    for _ in range(300):
        view = await handle.query(Orchestration.state)
        if view.child_sessions:
            with contextlib.suppress(PhasegateError):
                await pg.status(view.child_sessions[0])
                return view.child_sessions[0]
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{handle.id}: no developer session answered")


@contextlib.contextmanager
def answers_once() -> Iterator[str]:
    """An OpenAI-compatible base URL whose server accepts one connection (the run's
    start-up check), then goes away: every later connection is refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(60)

    def once() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            conn.close()
        listener.close()

    thread = threading.Thread(target=once, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        with contextlib.suppress(OSError):
            listener.close()
        thread.join(5)


async def record_planner_unreachable(client: Client, root: Path) -> None:
    """The planner's model is the one the worker builds for ``ollama:llama3`` on a
    server that went away, registered as ``test:rec-planner-ollama``: a replayer has no
    model providers, so a history naming ``ollama:`` for an agent that ran could not be
    built in its workflow code. The reviewer (never reached) names ``ollama:llama3``, so
    the worker's start-up check connects to that server, which answers it once."""
    with answers_once() as url:
        ollama = {"ollama": ProviderConfig(base_url=url)}
        register_model(UNREACHABLE_PLANNER, ModelProviders(ollama).build(OLLAMA, "planner"))
        settings = make_settings(
            root / "home-unreachable", task_queue="record-unreachable", model_providers=ollama
        )
        with concurrent.futures.ThreadPoolExecutor() as pool:
            async with running_worker(client, settings, executor=pool):
                models = {**DEMO, "planner": f"test:{UNREACHABLE_PLANNER}", "reviewer": OLLAMA}
                profile = Profile(
                    working_dir=_workdir(root, "unreachable"), models=models, developer=DEVELOPER
                )
                wid = "orch-planner-unreachable"
                assert await run(client, settings, wid, BUG, profile) is None
                history = await client.get_workflow_handle(wid).query(Orchestration.history)
    kinds = [entry.kind for entry in history]
    assert kinds == ["started", "plan_refused", "failed"], kinds  # at once: no replan
    assert f"at {url} refused the connection" in history[-1].detail, history[-1]
    assert "cannot run on this worker" in history[-1].detail, history[-1]
    await save_chain(client, "planner_unreachable", wid)


async def record_gates(client: Client, root: Path) -> None:
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


SCENARIOS: dict[str, Callable[[Client, Path], Awaitable[None]]] = {
    "trivial_rules": record_trivial_rules,
    "replan": record_replan,
    "llm_planner": record_llm_planner,
    "failed": record_failed,
    "gates": record_gates,
    "mcp_developer": record_mcp_developer,
    "planner_unreachable": record_planner_unreachable,
    "prompt_in_request": record_prompt_in_request,
}


def _files_of(name: str) -> list[Path]:
    """The files scenario ``name`` writes (``name``, ``name_runN``, ``name_child``)."""
    return [*OUT.glob(f"{name}--*.json"), *OUT.glob(f"{name}_*--*.json")]


async def main(only: list[str]) -> None:
    if unknown := [name for name in only if name not in SCENARIOS]:
        raise SystemExit(f"unknown scenario(s) {unknown}; scenarios: {', '.join(SCENARIOS)}")
    names = only or list(SCENARIOS)
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.json") if not only else [f for n in names for f in _files_of(n)]:
        old.unlink()
    for key, answers in SCRIPTS.items():
        register_model(key, scripted(answers))
    root = Path(tempfile.mkdtemp(prefix="phasegate-record-orch-"))
    async with dev_server() as env:
        for name in names:
            await SCENARIOS[name](env.client, root)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
