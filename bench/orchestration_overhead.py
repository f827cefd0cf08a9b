"""Orchestration overhead: the engine's own cost per agent step vs the model call itself,
and the history one step adds.

Every LLM agent (planner, analyst, architect, reviewer) runs on a scripted
``FunctionModel`` that answers at once (zero latency, registered with
``phasegate.testing.register_model`` in the worker process), so what is left is
phasegate + pydantic-ai + Temporal. The planner plans ``[analyst, architect,
developer, reviewer]`` (an orchestration ends with reviewed work); the developer
runs the worker's scripted coding agent (``developer.agent = "scripted"``) and the
bench approves its gated session as a person would. Same dev server, same worker
process, same run, runs interleaved with the baseline: a workflow executing trivial
async activities one after another. Times come from the server's history (event
times, the workflow's clock), sizes from the fetched history. The step figures are
the LLM steps only (analyst, architect, reviewer); the developer step (a CLI
process and a child session) is reported apart:

- step wall: ``step_started`` -> ``step_done`` (the model request activity, which
  renders the prompt it sends, the architect's plan check, a local activity, and the
  workflow tasks between them; runs of older code also had a prompt rendering
  activity). With a model that answers at once, all of it is the engine's time: the
  bench sets it against a 1 s model call (the target: at most 5%, 50 ms);
- model request: the ``agent__*__model_request`` activity, scheduled -> completed;
- raw activity round trip: one trivial activity and the workflow task that
  schedules the next one (scheduled -> next scheduled);
- workflow task: started -> completed, the worker running workflow code (in the
  LLM steps' slices, and in the baseline);
- history per step: the events of each step's slice of the run's history, from the
  step's first scheduled activity up to the next step's (the workflow task that
  closes a step and starts the next counts for the step it closes; the run's final
  event, which carries the whole result, counts for no step);
- the prompt in history: how many times each LLM step's slice holds the agent's
  rendered instructions (their first line) and its user message (the issue heading):
  once each, in the model request's result, where the prompt is recorded.

    .venv/bin/python bench/orchestration_overhead.py [--runs 12] [--developer-runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _bench_worker
import _common
from _common import bench_environment, ms, pct, stop_bench_worker
from _orch_baseline import RawActivitiesWorkflow, noop
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from phasegate import SHIPPED_LIBRARY
from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.messages import StartOrchestration
from phasegate.domain.settings import Settings
from phasegate.workflows import Orchestration

RAW_ACTIVITIES = 20
LLM_STEPS = ("analyst", "architect", "reviewer")
ISSUE = Issue(
    id="BENCH-1",
    title="Add a health endpoint to the service",
    body="Expose GET /health returning the build version.",
    labels=["feature"],
)
TYPO = Issue(id="BENCH-2", title="Fix typo in README: 'recieve' to 'receive'", labels=["docs"])
# The worker's own scripted coding agent (Settings.developer_commands["scripted"]).
DEVELOPER = DeveloperProfile(mode="command", agent="scripted", timeout_minutes=2)
ANSWERS: dict[str, dict[str, Any]] = {
    "analyst": {
        "findings": ["The service has no health route; the router is in one module."],
        "scope": "moderate",
        "recommended_agents": ["architect", "developer", "reviewer"],
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
        "reasoning": "Investigate the request, design the change, build it, then review it.",
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

    register_model("planner", scripted(_plan("analyst", "architect", "developer", "reviewer")))
    for agent, answer in ANSWERS.items():
        register_model(agent, scripted(answer))
    settings = Settings(
        temporal_address=address,
        task_queue=task_queue,
        home=home,
        library_paths=[SHIPPED_LIBRARY],
        allow_unsigned_approvals=True,  # the bench approves the developer's session
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


def activity_times(events: Sequence[Any], prefix: str = "") -> list[float]:
    """Scheduled -> completed seconds of each activity whose type starts with ``prefix``."""
    scheduled: dict[int, tuple[str, float]] = {}
    out: list[float] = []
    for ev in events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[ev.event_id] = (name, _seconds(ev))
        elif ev.HasField("activity_task_completed_event_attributes"):
            name, began = scheduled[ev.activity_task_completed_event_attributes.scheduled_event_id]
            if name.startswith(prefix):
                out.append(_seconds(ev) - began)
    return out


def workflow_task_times(events: Sequence[Any]) -> list[float]:
    """Started -> completed seconds of each workflow task: the worker running workflow code."""
    started = {ev.event_id: _seconds(ev) for ev in events}
    return [
        _seconds(ev) - started[ev.workflow_task_completed_event_attributes.started_event_id]
        for ev in events
        if ev.HasField("workflow_task_completed_event_attributes")
    ]


def schedule_gaps(history: WorkflowHistory) -> list[float]:
    """Seconds between consecutive activity schedules: one full activity round trip each."""
    times = [
        _seconds(ev)
        for ev in history.events
        if ev.HasField("activity_task_scheduled_event_attributes")
    ]
    return [b - a for a, b in itertools.pairwise(times)]


def _step_of(event: Any) -> str | None:
    """The step an activity ``event`` schedules belongs to: an LLM step's model request
    (or, in runs of older code, its prompt rendering, whose input names the agent), or
    the developer's spec writing."""
    if not event.HasField("activity_task_scheduled_event_attributes"):
        return None
    attrs = event.activity_task_scheduled_event_attributes
    name = attrs.activity_type.name
    if name == "write_dev_spec":
        return "developer"
    if name == "render_agent_prompt":
        agent = json.loads(attrs.input.payloads[0].data)["agent"]
        return agent if agent in LLM_STEPS else None
    agent = name.removeprefix("agent__phasegate_").removesuffix("__model_request")
    return agent if agent in LLM_STEPS else None


def step_slices(history: WorkflowHistory) -> dict[str, list[Any]]:
    """Each plan step's events: from its first scheduled activity up to the next step's,
    the last step up to the run's final event (which carries the result, not a step)."""
    events = list(history.events)
    starts: list[tuple[int, str]] = []
    for i, ev in enumerate(events):
        step = _step_of(ev)
        if step and (not starts or starts[-1][1] != step):  # a step's later activities
            starts.append((i, step))
    steps = [step for _, step in starts]
    if len(set(steps)) != len(steps):  # a rework pass would merge two steps' slices
        raise AssertionError(f"a step ran twice ({steps}): the bench expects one pass")
    end = next(
        i
        for i, ev in enumerate(events)
        if ev.HasField("workflow_execution_completed_event_attributes")
    )
    bounds = [i for i, _ in starts[1:]] + [end]
    return {step: events[i:j] for (i, step), j in zip(starts, bounds, strict=True)}


# What only a rendered prompt holds: the first line of an agent's instructions (its
# library prompt) and the heading of the issue section of its user message.
_INSTRUCTIONS = "You are the **{agent}**"
_USER_MESSAGE = f"## Issue {ISSUE.id}: "


def prompt_copies(events: Sequence[Any], agent: str) -> tuple[int, int]:
    """How many times ``agent``'s rendered instructions and user message occur in
    ``events`` (their serialized bytes): 1 and 1 when history stores the prompt once."""
    data = b"".join(ev.SerializeToString() for ev in events)
    return data.count(_INSTRUCTIONS.format(agent=agent).encode()), data.count(
        _USER_MESSAGE.encode()
    )


def slice_size(events: Sequence[Any]) -> tuple[int, int, int]:
    """(events, bytes, activities) of a slice; bytes as Temporal counts them (protobuf
    size), local activities (markers) counted as activities."""
    activities = sum(
        ev.HasField("activity_task_scheduled_event_attributes")
        or ev.HasField("marker_recorded_event_attributes")
        and ev.marker_recorded_event_attributes.marker_name == "core_local_activity"
        for ev in events
    )
    return len(events), sum(ev.ByteSize() for ev in events), activities


async def step_walls(handle: Any) -> dict[str, float]:
    """step_started -> step_done seconds per output key, from the orchestration's history."""
    started: dict[str, float] = {}
    walls: dict[str, float] = {}
    for entry in await handle.query(Orchestration.history):
        if entry.kind == "step_started":
            started[entry.key] = entry.at.timestamp()
        elif entry.kind == "step_done":
            walls[entry.key] = entry.at.timestamp() - started[entry.key]
    return walls


# -------------------------------------------------------------------- the runs
async def approve_developer(pg: PhasegateClient, handle: WorkflowHandle) -> None:
    """Act as the person who approves the developer session's phases (phase 0: its plan).

    Sleeps in a long poll on the orchestration's history until the session starts, so
    it neither queries nor wakes the worker during the LLM steps, and stops once the
    session completes, before the reviewer's step."""
    child = ""
    async for ev in handle.fetch_history_events(wait_new_event=True):
        if ev.HasField("start_child_workflow_execution_initiated_event_attributes"):
            child = ev.start_child_workflow_execution_initiated_event_attributes.workflow_id
            break
    while child:
        with contextlib.suppress(Exception):  # not started yet: ask again
            status = await pg.status(child)
            if status.status in ("completed", "abandoned"):
                return
            if status.status in ("awaiting_approval", "approval_overdue"):
                await pg.decide(child, approver="lead", decision="approve", comment="ok")
        await asyncio.sleep(0.1)


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
    approver = asyncio.create_task(approve_developer(PhasegateClient(client, task_queue), handle))
    try:
        view = await handle.result()
    finally:
        approver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await approver
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


def _profile(work: Path) -> Profile:
    work.mkdir()  # a fresh project per run: the coding agent writes into it
    return Profile(
        working_dir=str(work),
        models={agent: f"test:{agent}" for agent in ("planner", *LLM_STEPS)},
        developer=DEVELOPER,
    )


async def developer_runs(client: Client, task_queue: str, work: Path, runs: int) -> list[str]:
    """The smallest plan, [developer, reviewer]: rules planner, the worker's scripted
    coding agent, demo reviewer."""
    lines = []
    for i in range(runs):
        repo = work / f"typo-{i}"
        repo.mkdir()
        (repo / "README.md").write_text("We recieve mail.\n")
        profile = Profile(
            working_dir=str(repo), models={a: "demo" for a in LLM_STEPS}, developer=DEVELOPER
        )
        _, view, hist, walls = await run_orchestration(client, task_queue, profile, TYPO)
        assert [s.agent for s in view.plan.steps] == ["developer", "reviewer"], view.plan
        events, size, _ = slice_size(hist.events)
        child = client.get_workflow_handle(view.child_sessions[0])
        c_events, c_size, _ = slice_size((await child.fetch_history()).events)
        lines.append(
            f"  developer alone (typo issue, rules plan [developer, reviewer]): step "
            f"{walls['developer_0'] * 1000:.0f} ms; orchestration history {events} events / "
            f"{size} B, child session {c_events} events / {c_size} B"
        )
    return lines


def _median(rows: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(sorted(col)[len(col) // 2] for col in zip(*rows, strict=True))


MODEL_CALL = 1.0  # seconds: the real model call the engine's cost is set against
TARGET = 0.05  # of it: 50 ms


async def main(runs: int, dev_runs: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-bench-orch-"))
    task_queue = "bench-orch"
    async with await bench_environment() as env:
        client = env.client
        worker = start_worker(
            client.service_client.config.target_host, task_queue, str(tmp / "home")
        )
        try:
            raw_gap: list[float] = []
            raw_act: list[float] = []
            raw_wft: list[float] = []
            step_wft: list[float] = []
            renders: list[float] = []
            model: list[float] = []
            steps: list[float] = []
            by_agent: dict[str, list[float]] = {}
            developer: list[float] = []
            planner: list[float] = []
            walls: list[float] = []
            slices: dict[str, list[tuple[int, ...]]] = {}
            copies: list[tuple[int, int]] = []
            runs_size: list[tuple[int, ...]] = []
            for i in range(runs + 1):  # the first pair warms up
                raw = await run_raw(client, task_queue)
                wall, view, hist, step = await run_orchestration(
                    client, task_queue, _profile(tmp / f"repo-{i}")
                )
                if i == 0:
                    continue
                raw_gap += schedule_gaps(raw)
                raw_act += activity_times(raw.events)
                raw_wft += workflow_task_times(raw.events)
                calls = activity_times(hist.events, "agent__")
                assert len(calls) == 4 == view.usage.requests, (calls, view.usage)
                model += calls[1:]  # analyst, architect, reviewer; the planner's apart
                planner.append(calls[0])
                steps += [t for key, t in step.items() if not key.startswith("developer")]
                for key, t in step.items():
                    by_agent.setdefault(key.rsplit("_", 1)[0], []).append(t)
                developer += [t for key, t in step.items() if key.startswith("developer")]
                walls.append(wall)
                for key, events in step_slices(hist).items():
                    slices.setdefault(key, []).append(slice_size(events))
                    if key != "developer":
                        renders += activity_times(events, "render_agent_prompt")
                        step_wft += workflow_task_times(events)
                        copies.append(prompt_copies(events, key))
                runs_size.append(slice_size(hist.events))
            dev_lines = await developer_runs(client, task_queue, tmp, dev_runs)
        finally:
            stop_bench_worker(worker)
    assert sorted(slices) == sorted([*LLM_STEPS, "developer"]), sorted(slices)
    per_agent = {key: _median(rows) for key, rows in slices.items()}
    llm = [per_agent[a] for a in LLM_STEPS]
    ev_run, b_run, _ = _median(runs_size)
    f = {
        "raw_round_trip_p50": pct(raw_gap, 50),
        "raw_activity_p50": pct(raw_act, 50),
        "model_request_p50": pct(model, 50),
        "model_request_p95": pct(model, 95),
        "step_p50": pct(steps, 50),
        "step_p95": pct(steps, 95),
        "developer_p50": pct(developer, 50),
        "run_p50": pct(walls, 50),
        "events_per_step": sum(x[0] for x in llm) / len(llm),
        "bytes_per_step": sum(x[1] for x in llm) / len(llm),
        "activities_per_step": sum(x[2] for x in llm) / len(llm),
        "instructions_copies": max(c[0] for c in copies),
        "user_message_copies": max(c[1] for c in copies),
        "events_run": ev_run,
        "bytes_run": b_run,
    }
    f["step_vs_call"] = f["step_p50"] / MODEL_CALL
    f["step_p95_vs_call"] = f["step_p95"] / MODEL_CALL
    f["step_vs_model"] = f["step_p50"] / f["model_request_p50"]
    f["step_vs_raw"] = f["step_p50"] / f["raw_round_trip_p50"]
    f["model_vs_raw"] = f["model_request_p50"] / f["raw_activity_p50"]
    f["step_vs_floor"] = f["step_vs_raw"] / f["activities_per_step"]
    print(
        f"orchestration overhead over {runs} runs of the plan [analyst, architect, developer, "
        f"reviewer] (planner and LLM agents on zero-latency scripted models, the worker's "
        f"scripted coding agent), interleaved with {runs} x {RAW_ACTIVITIES} raw activities "
        f"(after 1 warm-up pair); step figures: the {len(steps)} LLM steps only"
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
        f"  LLM step                  p50 {ms(f['step_p50'])}   p95 {ms(f['step_p95'])}   "
        f"({f['activities_per_step']:.2f} activities: the model request (the prompt rendered "
        "in it), the architect's plan check; and the workflow tasks between them)"
    )
    print(
        "  LLM step p50 by agent: "
        + ", ".join(f"{a} {ms(pct(by_agent[a], 50))}" for a in LLM_STEPS)
        + " (the analyst's workflow task also decodes the planner's answer)"
    )
    verdict = "met" if f["step_vs_call"] <= TARGET else "NOT met"
    print(
        f"  engine time per LLM step (the model answers at once, so all of the step is engine)"
        f" / a {MODEL_CALL:.0f} s model call: p50 {f['step_vs_call']:.1%}, p95 "
        f"{f['step_p95_vs_call']:.1%}  (target <= {TARGET:.0%}: {verdict})"
    )
    print(
        f"  ratio step / model request p50 = {f['step_vs_model']:.2f}x;  "
        f"step / raw activity round trip = {f['step_vs_raw']:.2f}x "
        f"({f['step_vs_floor']:.2f}x the floor of {f['activities_per_step']:.2f} round trips);  "
        f"step less the model request activity = {ms(f['step_p50'] - f['model_request_p50'])}"
    )
    print(
        f"  history per LLM step (its slice of the run's history, median of runs): "
        f"{f['events_per_step']:.1f} events, {f['bytes_per_step']:.0f} B; "
        + ", ".join(f"{a} {per_agent[a][0]} / {per_agent[a][1]} B" for a in LLM_STEPS)
        + f"; the prompt in each step's history: instructions {f['instructions_copies']}x, "
        f"user message {f['user_message_copies']}x (most of any step)"
    )
    render = f"prompt render activity {ms(pct(renders, 50))}" if renders else "no render activity"
    print(
        f"  where a step's time goes (p50): workflow task {ms(pct(step_wft, 50))} each "
        f"(the baseline's {ms(pct(raw_wft, 50))}), {len(step_wft) / len(steps):.2f} per step; "
        f"{render}; model request {ms(f['model_request_p50'])}"
    )
    dev = per_agent["developer"]
    print(
        f"  developer step            p50 {ms(f['developer_p50'])}   (coding-agent CLI process "
        f"+ child gated session + approval; {dev[0]} events / {dev[1]} B of the run's history)"
    )
    print(
        f"  whole run (start -> result: setup, plan, 3 LLM steps, the developer) p50 "
        f"{ms(f['run_p50'])}; {ev_run} events / {b_run} B; planner request p50 "
        f"{ms(pct(planner, 50))}"
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
        help="also time the developer alone, plan [developer, reviewer]; 0 skips it",
    )
    args = parser.parse_args()
    _common.run(main(args.runs, args.developer_runs))
