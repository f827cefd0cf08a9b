"""Orchestration overhead: the engine's own cost per agent step vs the model call itself,
and the history one step adds.

Every LLM agent (planner, analyst, architect, reviewer) runs on a scripted
``FunctionModel`` that answers at once (zero latency, registered with
``phasegate.testing.register_model`` in the worker process), so what is left is
phasegate + pydantic-ai + Temporal. The planner plans ``[analyst, architect,
reviewer]`` (no developer: its step is a coding-agent CLI, timed apart with
``--developer-runs``). Same dev server, same worker process, same run, runs
interleaved with the baseline: a workflow executing trivial async activities one
after another. Times come from the server's history (event times, the
workflow's clock), sizes from the fetched history:

- step wall: ``step_started`` → ``step_done`` (prompt rendering activity, model
  request activity, the architect's plan check, the workflow tasks between them);
- model request: the ``agent__*__model_request`` activity, scheduled → completed;
- raw activity round trip: one trivial activity and the workflow task that
  schedules the next one (scheduled → next scheduled);
- history per step: events and bytes of a 3-step plan minus a 1-step plan, / 2.

    .venv/bin/python bench/orchestration_overhead.py [--runs 12] [--developer-runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _bench_worker
import _common
from _common import bench_environment, ms, pct, stop_bench_worker
from _orch_baseline import RawActivitiesWorkflow, noop
from temporalio.client import Client, WorkflowHistory

from phasegate import SHIPPED_LIBRARY
from phasegate.client.api import PhasegateClient
from phasegate.domain.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration_messages import StartOrchestration
from phasegate.domain.settings import Settings
from phasegate.workflows import Orchestration

RAW_ACTIVITIES = 20
ISSUE = Issue(
    id="BENCH-1",
    title="Add a health endpoint to the service",
    body="Expose GET /health returning the build version.",
    labels=["feature"],
)
TYPO = Issue(id="BENCH-2", title="Fix typo in README: 'recieve' to 'receive'", labels=["docs"])
HONEST_AGENT = [sys.executable, "-m", "phasegate.testing.coding_agent", "{prompt}"]
ANSWERS: dict[str, dict[str, Any]] = {
    "analyst": {
        "findings": ["The service has no health route; the router is in one module."],
        "scope": "moderate",
        "recommended_agents": ["architect", "reviewer"],
        "confidence": 0.9,
    },
    "architect": {
        "goal": "Add a health endpoint returning the build version",
        "plan_markdown": "## Phase 1: Endpoint\n\n- [ ] 1.1 Add the health route\n"
        "- [ ] 1.2 Return the build version\n",
        "confidence": 0.9,
    },
    "reviewer": {"approved": True, "comments": [], "severity": "none", "confidence": 0.9},
}


def _plan(*agents: str) -> dict[str, Any]:
    return {
        "reasoning": "Investigate the request, design the change, then review it.",
        "steps": [{"agent": a, "reason": f"the {a} step"} for a in agents],
        "scope": "moderate",
    }


# ---------------------------------------------------------- the worker process
async def serve(address: str, task_queue: str, home: str) -> None:
    """Phasegate's worker with scripted zero-latency models, plus the baseline worker."""
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from phasegate.testing import register_model

    def scripted(answer: dict[str, Any]) -> FunctionModel:
        def reply(messages: list[Any], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, answer)])

        return FunctionModel(reply)

    register_model("planner3", scripted(_plan("analyst", "architect", "reviewer")))
    register_model("planner1", scripted(_plan("reviewer")))
    for agent, answer in ANSWERS.items():
        register_model(agent, scripted(answer))
    settings = Settings(
        temporal_address=address,
        task_queue=task_queue,
        home=home,
        library_paths=[SHIPPED_LIBRARY],
        allow_unsigned_approvals=True,
    )
    await _bench_worker.serve(settings, RawActivitiesWorkflow, noop)


def start_worker(address: str, task_queue: str, home: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", address, task_queue, home],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


# ------------------------------------------------------------ history analysis
def _seconds(event: Any) -> float:
    return event.event_time.seconds + event.event_time.nanos / 1e9


def activity_times(history: WorkflowHistory, prefix: str = "") -> list[float]:
    """Scheduled → completed seconds of each activity whose type starts with ``prefix``."""
    scheduled: dict[int, tuple[str, float]] = {}
    out: list[float] = []
    for ev in history.events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[ev.event_id] = (name, _seconds(ev))
        elif ev.HasField("activity_task_completed_event_attributes"):
            name, began = scheduled[ev.activity_task_completed_event_attributes.scheduled_event_id]
            if name.startswith(prefix):
                out.append(_seconds(ev) - began)
    return out


def schedule_gaps(history: WorkflowHistory) -> list[float]:
    """Seconds between consecutive activity schedules: one full activity round trip each."""
    times = [
        _seconds(ev)
        for ev in history.events
        if ev.HasField("activity_task_scheduled_event_attributes")
    ]
    return [b - a for a, b in itertools.pairwise(times)]


def prompt_bytes(history: WorkflowHistory) -> int:
    """Bytes of the events carrying prompts: rendered prompts and model request inputs."""
    names: dict[int, str] = {}
    total = 0
    for ev in history.events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            names[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
            if names[ev.event_id].startswith("agent__"):
                total += ev.ByteSize()
        elif ev.HasField("activity_task_completed_event_attributes"):
            scheduled = ev.activity_task_completed_event_attributes.scheduled_event_id
            if names[scheduled] == "render_agent_prompt":
                total += ev.ByteSize()
    return total


def history_size(history: WorkflowHistory) -> tuple[int, int, int]:
    """(events, bytes, activities): bytes as Temporal counts them (protobuf size)."""
    activities = sum(
        1 for ev in history.events if ev.HasField("activity_task_scheduled_event_attributes")
    )
    return len(history.events), sum(ev.ByteSize() for ev in history.events), activities


async def step_walls(handle: Any) -> dict[str, float]:
    """step_started → step_done seconds per output key, from the orchestration's history."""
    started: dict[str, float] = {}
    walls: dict[str, float] = {}
    for entry in await handle.query(Orchestration.history):
        if entry.kind == "step_started":
            started[entry.key] = entry.at.timestamp()
        elif entry.kind == "step_done":
            walls[entry.key] = entry.at.timestamp() - started[entry.key]
    return walls


# -------------------------------------------------------------------- the runs
async def run_orchestration(
    client: Client, task_queue: str, profile: Profile, issue: Issue = ISSUE
) -> tuple[float, Any, WorkflowHistory, dict[str, float]]:
    began = time.perf_counter()
    handle = await client.start_workflow(
        Orchestration.run,
        StartOrchestration(issue=issue, profile=profile),
        id=f"bench-orch-{uuid.uuid4().hex[:10]}",
        task_queue=task_queue,
    )
    view = await handle.result()
    wall = time.perf_counter() - began
    assert view.status == "completed", view.failure
    return wall, view, await handle.fetch_history(), await step_walls(handle)


async def run_raw(client: Client, task_queue: str) -> WorkflowHistory:
    handle = await client.start_workflow(
        RawActivitiesWorkflow.run,
        RAW_ACTIVITIES,
        id=f"bench-raw-{uuid.uuid4().hex[:10]}",
        task_queue=f"{task_queue}-raw",
    )
    await handle.result()
    return await handle.fetch_history()


def _profile(work: Path, planner: str) -> Profile:
    return Profile(
        working_dir=str(work),
        models={
            "planner": f"test:{planner}",
            "analyst": "test:analyst",
            "architect": "test:architect",
            "reviewer": "test:reviewer",
        },
    )


async def approve_children(pg: PhasegateClient, handle: Any) -> None:
    """Act as the person who approves the developer session's plan (phase 0)."""
    while True:
        with contextlib.suppress(Exception):
            for child in (await handle.query(Orchestration.state)).child_sessions:
                if (await pg.status(child)).status == "awaiting_approval":
                    await pg.decide(child, approver="lead", decision="approve", comment="ok")
        await asyncio.sleep(0.1)


async def developer_runs(client: Client, task_queue: str, work: Path, runs: int) -> list[str]:
    """The developer step alone: rules planner, honest coding-agent CLI, demo reviewer."""
    pg = PhasegateClient(client, task_queue)
    lines = []
    for i in range(runs):
        repo = work / f"typo-{i}"
        repo.mkdir()
        (repo / "README.md").write_text("We recieve mail.\n")
        profile = Profile(
            working_dir=str(repo),
            models={"analyst": "demo", "architect": "demo", "reviewer": "demo"},
            developer=DeveloperProfile(mode="command", command=HONEST_AGENT, timeout_minutes=2),
        )
        handle = await client.start_workflow(
            Orchestration.run,
            StartOrchestration(issue=TYPO, profile=profile),
            id=f"bench-dev-{uuid.uuid4().hex[:10]}",
            task_queue=task_queue,
        )
        approver = asyncio.create_task(approve_children(pg, handle))
        try:
            view = await handle.result()
        finally:
            approver.cancel()
        assert view.status == "completed", view.failure
        walls = await step_walls(handle)
        events, size, _ = history_size(await handle.fetch_history())
        child = pg.temporal.get_workflow_handle(view.child_sessions[0])
        c_events, c_size, _ = history_size(await child.fetch_history())
        lines.append(
            f"  developer step {walls['developer_0'] * 1000:.0f} ms (coding-agent CLI process "
            f"+ child gated session); orchestration history {events} events / {size} B, "
            f"child session {c_events} events / {c_size} B"
        )
    return lines


async def main(runs: int, dev_runs: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-bench-orch-"))
    work = tmp / "repo"
    work.mkdir()
    task_queue = "bench-orch"
    async with await bench_environment() as env:
        client = env.client
        worker = start_worker(
            client.service_client.config.target_host, task_queue, str(tmp / "home")
        )
        try:
            raw_gap: list[float] = []
            raw_act: list[float] = []
            model: list[float] = []
            steps: list[float] = []
            planner: list[float] = []
            walls: list[float] = []
            sizes3: list[tuple[int, int, int]] = []
            sizes1: list[tuple[int, int, int]] = []
            prompts = 0
            for i in range(runs + 1):  # the first pair warms up
                raw = await run_raw(client, task_queue)
                wall, view, hist, step = await run_orchestration(
                    client, task_queue, _profile(work, "planner3")
                )
                _, _, hist1, _ = await run_orchestration(
                    client, task_queue, _profile(work, "planner1")
                )
                if i == 0:
                    continue
                raw_gap += schedule_gaps(raw)
                raw_act += activity_times(raw)
                calls = activity_times(hist, "agent__")
                assert len(calls) == 4 == view.usage.requests, (calls, view.usage)
                model += calls[1:]  # the planner's request is timed apart
                planner.append(calls[0])
                steps += list(step.values())
                walls.append(wall)
                sizes3.append(history_size(hist))
                prompts = prompt_bytes(hist)
                sizes1.append(history_size(hist1))
            dev_lines = await developer_runs(client, task_queue, tmp, dev_runs)
        finally:
            stop_bench_worker(worker)
    ev3, b3, a3 = (sorted(x[k] for x in sizes3)[len(sizes3) // 2] for k in (0, 1, 2))
    ev1, b1, a1 = (sorted(x[k] for x in sizes1)[len(sizes1) // 2] for k in (0, 1, 2))
    f = {
        "raw_round_trip_p50": pct(raw_gap, 50),
        "raw_activity_p50": pct(raw_act, 50),
        "model_request_p50": pct(model, 50),
        "model_request_p95": pct(model, 95),
        "step_p50": pct(steps, 50),
        "step_p95": pct(steps, 95),
        "run_p50": pct(walls, 50),
        "events_per_step": (ev3 - ev1) / 2,
        "bytes_per_step": (b3 - b1) / 2,
        "activities_per_step": (a3 - a1) / 2,
        "events_run": ev3,
        "bytes_run": b3,
    }
    f["step_vs_model"] = f["step_p50"] / f["model_request_p50"]
    f["step_vs_raw"] = f["step_p50"] / f["raw_round_trip_p50"]
    f["model_vs_raw"] = f["model_request_p50"] / f["raw_activity_p50"]
    f["step_vs_floor"] = f["step_vs_raw"] / f["activities_per_step"]
    f["prompt_share"] = prompts / b3
    print(
        f"orchestration overhead over {runs} runs of a 3-step plan (analyst, architect, "
        f"reviewer; planner, agents on zero-latency scripted models), interleaved with "
        f"{runs} x {RAW_ACTIVITIES} raw activities (after 1 warm-up pair)"
    )
    print(
        f"  raw activity round trip   p50 {ms(f['raw_round_trip_p50'])}   "
        f"(scheduled -> completed {ms(f['raw_activity_p50'])})"
    )
    print(
        f"  model request activity    p50 {ms(f['model_request_p50'])}   "
        f"p95 {ms(f['model_request_p95'])}   (scheduled -> completed; "
        f"{f['model_vs_raw']:.2f}x a raw activity)"
    )
    print(
        f"  orchestration step        p50 {ms(f['step_p50'])}   p95 {ms(f['step_p95'])}   "
        f"({f['activities_per_step']:.1f} activities: prompt render, model request, the "
        "architect's plan check; and the workflow tasks between them)"
    )
    print(
        f"  ratio step / model request p50 = {f['step_vs_model']:.2f}x;  "
        f"step / raw activity round trip = {f['step_vs_raw']:.2f}x "
        f"({f['step_vs_floor']:.2f}x the floor of {f['activities_per_step']:.1f} round trips);  "
        f"engine cost per step = {ms(f['step_p50'] - f['model_request_p50'])}"
    )
    print(
        f"  whole run (start -> result, setup + plan + 3 steps) p50 {ms(f['run_p50'])}; "
        f"planner request p50 {ms(pct(planner, 50))}"
    )
    print(
        f"  history: {ev3} events / {b3} B per 3-step run, {ev1} / {b1} B per 1-step run: "
        f"{f['events_per_step']:.1f} events and {f['bytes_per_step']:.0f} B per step; "
        f"{f['prompt_share']:.0%} of a run's bytes are prompts (the rendered prompt, then the "
        "model request carrying it with the output schema)"
    )
    for line in dev_lines:
        print(line)
    return f


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _common.run(serve(*sys.argv[2:5]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument(
        "--developer-runs",
        type=int,
        default=1,
        help="also time the developer step (honest scripted coding-agent CLI); 0 skips it",
    )
    args = parser.parse_args()
    _common.run(main(args.runs, args.developer_runs))
