"""StepGraph on a real dev server: an outside agent walks a branching graph, function
handlers loop to a cap, a step asks a person and only a signed answer is taken, and
every forged, stale or foreign message is refused without touching the run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from phasegate.client import keys
from phasegate.client.graphs import GraphClient
from phasegate.domain.errors import (
    ApprovalRefused,
    GraphFailed,
    GraphInvalid,
    SessionError,
    StepSequenceViolation,
)
from phasegate.domain.graph.messages import Question, StepReport
from phasegate.domain.graph.model import Graph

CRITIQUE: dict[str, Any] = {
    "name": "critique",
    "entry": "draft",
    "params": {"depth": {"type": "int", "default": 1, "min": 1, "max": 5}},
    "state": {"n": {"type": "int"}, "notes": {"type": "str"}},
    "steps": [
        {
            "id": "draft",
            "title": "Draft the answer",
            "actions": "Depth {{ params.depth }}; visit {{ visit }}.",
            "outcomes": ["quick", "full"],
            "next": {"quick": "answer", "full": "research"},
        },
        {
            "id": "research",
            "title": "Research",
            "actions": "{% if answers %}Answered: {{ answers.scope }}{% endif %}",
            "next": {"ok": "answer", "_default": "answer"},
            "ask": True,
        },
        {"id": "answer", "title": "Answer", "next": {"ok": None, "fail": "draft"}},
    ],
}

HANDLED: dict[str, Any] = {
    "name": "handled",
    "entry": "judge",
    "params": {"depth": {"type": "int", "default": 1}, "target": {"type": "int", "default": 3}},
    "state": {"n": {"type": "int", "default": 0}},
    "steps": [
        {
            "id": "judge",
            "title": "Judge",
            "handler": "graph_handlers:judge",
            "outcomes": ["quick", "full"],
            "next": {"quick": "count", "full": None},
        },
        {
            "id": "count",
            "title": "Count",
            "handler": "graph_handlers:count_up",
            "next": {"ok": None, "iterate": "count"},
            "max_iterations": 5,
        },
    ],
}


@pytest.fixture
async def graphs(env, settings_for, run_worker):
    settings = settings_for(graph_function_modules=["graph_handlers"])
    async with run_worker(settings):
        yield GraphClient(env.client, settings.task_queue)


async def test_an_outside_agent_walks_the_branch_it_reports(graphs: GraphClient) -> None:
    rid = await graphs.start(Graph.model_validate(CRITIQUE), params={"depth": 3})
    step = await graphs.step(rid)
    assert step is not None and step.step_id == "draft" and step.actions == "Depth 3; visit 1."
    assert step.outcomes == ["quick", "full"] and "research" not in step.model_dump_json()
    with pytest.raises(StepSequenceViolation, match="on step 'draft'"):
        await graphs.report(rid, StepReport(step_id="answer", outcome="ok"))
    with pytest.raises(SessionError, match="no outcome 'ok'"):
        await graphs.report(rid, StepReport(step_id="draft", outcome="ok"))
    with pytest.raises(SessionError, match="no state field 'mood'"):
        await graphs.report(rid, StepReport(step_id="draft", outcome="quick", state={"mood": 1}))
    done = await graphs.report(rid, StepReport(step_id="draft", outcome="quick", report_id="r1"))
    assert done.next_step == "answer"
    again = await graphs.report(rid, StepReport(step_id="draft", outcome="quick", report_id="r1"))
    assert again == done  # a retried report changes nothing
    with pytest.raises(StepSequenceViolation, match="stale"):
        await graphs.report(rid, StepReport(step_id="answer", outcome="ok", visit=2))
    await graphs.report(rid, StepReport(step_id="answer", outcome="ok"))
    summary = await graphs.result(rid)
    assert summary.status == "completed" and summary.outcome == "ok"
    assert [(p.step, p.outcome) for p in summary.path] == [("draft", "quick"), ("answer", "ok")]


async def test_function_handlers_branch_and_loop_until_done(graphs: GraphClient) -> None:
    rid = await graphs.start(Graph.model_validate(HANDLED), params={"target": 3})
    summary = await graphs.result(rid)
    assert summary.status == "completed" and summary.state == {"n": 3}
    assert [p.outcome for p in summary.path] == ["quick", "iterate", "iterate", "ok"]
    deep = await graphs.start(Graph.model_validate(HANDLED), params={"depth": 3})
    assert [p.outcome for p in (await graphs.result(deep)).path] == ["full"]


async def test_a_loop_past_its_cap_fails_the_run_saying_why(graphs: GraphClient) -> None:
    rid = await graphs.start(Graph.model_validate(HANDLED), params={"target": 99})
    with pytest.raises(GraphFailed, match="iterated more than its cap of 5"):
        await graphs.result(rid)
    view = await graphs.status(rid)
    assert view.status == "failed" and view.path_total == 7


async def test_a_worker_runs_only_the_handlers_it_allows(graphs: GraphClient) -> None:
    spec = {**HANDLED, "steps": [{"id": "x", "title": "X", "handler": "os:system"}], "entry": "x"}
    rid = await graphs.start(Graph.model_validate(spec))
    with pytest.raises(GraphInvalid, match="does not run 'os:system'"):
        await graphs.result(rid)


async def test_a_handler_that_raises_takes_the_fail_edge(graphs: GraphClient) -> None:
    spec = {
        "name": "boom",
        "entry": "x",
        "steps": [
            {"id": "x", "title": "X", "handler": "graph_handlers:explode", "next": {"fail": "y"}},
            {"id": "y", "title": "Y"},
        ],
    }
    rid = await graphs.start(Graph.model_validate(spec))
    step = await _wait_for_step(graphs, rid, "y")
    assert step.step_id == "y"
    view = await graphs.status(rid)
    assert "handler exploded on visit 1" in view.path[0].summary


async def test_a_person_answers_the_questions_only_with_a_valid_signature(
    env, settings_for, run_worker, tmp_path: Path
) -> None:
    lead = keys.new_key("lead", directory=tmp_path)
    keys_file = tmp_path / "approvers.json"
    keys_file.write_text(json.dumps([lead.model_dump()]))
    settings = settings_for(approver_keys_file=str(keys_file), allow_unsigned_approvals=False)
    async with run_worker(settings):
        graphs = GraphClient(env.client, settings.task_queue)
        rid = await graphs.start(Graph.model_validate(CRITIQUE), params={"depth": 3})
        await graphs.report(rid, StepReport(step_id="draft", outcome="full"))
        questions = [Question(id="scope", text="How deep?", options=["quick", "thorough"])]
        await graphs.report(
            rid, StepReport(step_id="research", outcome="needs_input", questions=questions)
        )
        view = await graphs.status(rid)
        assert view.status == "awaiting_input" and view.questions == questions
        # The agent answers for the person: unsigned, then off the menu; both refused.
        with pytest.raises(ApprovalRefused, match="signed"):
            await graphs.answer(rid, {"scope": "quick"}, as_key=None, approver="lead")
        with pytest.raises(SessionError, match="not an option"):
            await graphs.answer(rid, {"scope": "maybe"}, as_key="lead", key_dir=tmp_path)
        with pytest.raises(Exception, match="waits for a person"):
            await graphs.report(rid, StepReport(step_id="research", outcome="ok"))
        await graphs.answer(rid, {"scope": "thorough"}, as_key="lead", key_dir=tmp_path)
        step = await _wait_for_step(graphs, rid, "research", visit=2)
        assert step.answers == {"scope": "thorough"} and step.actions == "Answered: thorough"
        await graphs.report(rid, StepReport(step_id="research", outcome="ok"))
        await graphs.report(rid, StepReport(step_id="answer", outcome="ok"))
        assert (await graphs.result(rid)).status == "completed"


async def _wait_for_step(graphs: GraphClient, rid: str, step_id: str, visit: int = 1) -> Any:
    for _ in range(100):
        step = await graphs.step(rid)
        if step is not None and step.step_id == step_id and step.visit == visit:
            return step
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {step_id} visit {visit}")


async def test_a_long_loop_continues_as_new_keeping_its_state(graphs: GraphClient) -> None:
    spec = {**HANDLED, "continue_as_new_after": 3}
    spec["steps"] = [dict(s) for s in HANDLED["steps"]]
    spec["steps"][1]["max_iterations"] = 20
    rid = await graphs.start(Graph.model_validate(spec), params={"target": 8})
    summary = await graphs.result(rid)
    assert summary.status == "completed" and summary.state == {"n": 8}
    assert [p.outcome for p in summary.path] == ["quick", *["iterate"] * 7, "ok"]
    view = await graphs.status(rid)
    assert view.runs == 3 and view.path_total == 9  # 9 steps, 3 per run; the last one ends
    # The chain is the server's: each run after the first started as its predecessor's
    # continue-as-new (what the kit proved before believing the carried state).
    chain = []
    run_id: str | None = (await graphs.temporal.get_workflow_handle(rid).describe()).run_id
    while run_id:
        chain.append(run_id)
        history = await graphs.temporal.get_workflow_handle(rid, run_id=run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
    assert len(chain) == 3


GRAPH_HISTORIES = Path(__file__).parent / "histories" / "graph_runs"


@pytest.mark.parametrize("path", sorted(GRAPH_HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_recorded_graph_histories_replay(path: Path) -> None:
    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer

    from phasegate.temporal import DATA_CONVERTER
    from phasegate.workflows import GatedSession, StepGraph

    workflow_id = path.stem.split("--")[1]  # <scenario>--<workflow id>[--runN].json
    history = WorkflowHistory.from_json(workflow_id, path.read_text())
    replayer = Replayer(workflows=[StepGraph, GatedSession], data_converter=DATA_CONVERTER)
    await replayer.replay_workflow(history)


def test_graph_histories_are_recorded() -> None:
    assert len(list(GRAPH_HISTORIES.glob("*.json"))) >= 3, "run tests/histories/record_graph.py"


async def test_a_graph_that_is_not_the_one_its_digest_pins_is_refused(graphs: GraphClient) -> None:
    from phasegate.domain.graph.messages import StartGraph
    from phasegate.workflows import StepGraph

    graph = Graph.model_validate(CRITIQUE)
    tampered = graph.model_copy(update={"entry": "answer"})  # the agent's edit after pinning
    handle = await graphs.temporal.start_workflow(
        StepGraph.run,
        StartGraph(graph=tampered, sha256=graph.sha256()),
        id=f"graph-tampered-{uuid.uuid4().hex[:6]}",
        task_queue=graphs.task_queue,
    )
    with pytest.raises(GraphInvalid, match="does not match its sha256"):
        await graphs.result(handle.id)


CHILD = """\
name: child
entry: work
steps:
  - id: work
    title: Work
    handler: graph_handlers:judge
    outcomes: [quick, full]
    next: {quick: null, full: null}
"""


async def test_a_step_runs_a_child_graph_and_takes_its_final_outcome(
    env, settings_for, run_worker, tmp_path: Path
) -> None:
    library = tmp_path / "lib"
    (library / "graphs").mkdir(parents=True)
    (library / "graphs" / "child.yaml").write_text(CHILD)
    parent = {
        "name": "parent",
        "entry": "delegate",
        "params": {"depth": {"type": "int", "default": 1}},
        "steps": [
            {
                "id": "delegate",
                "title": "Delegate",
                "handler": {"graph": "child"},
                "outcomes": ["quick", "full", "fail"],
                "next": {"quick": None, "full": None, "fail": None},
            }
        ],
    }
    settings = settings_for(library, graph_function_modules=["graph_handlers"])
    async with run_worker(settings):
        graphs = GraphClient(env.client, settings.task_queue)
        rid = await graphs.start(Graph.model_validate(parent))
        summary = await graphs.result(rid)
        assert summary.status == "completed" and summary.outcome == "quick"
        view = await graphs.status(rid)
        child_id = view.children["delegate#1"]  # recorded by the parent, unguessable
        assert child_id.startswith(f"{rid}--delegate-1-") and len(child_id) > len(rid) + 20
        child = await graphs.result(child_id)  # the child's own run, on record
        assert [(p.step, p.outcome) for p in child.path] == [("work", "quick")]
        missing = {**parent, "steps": [{**parent["steps"][0], "handler": {"graph": "nope"}}]}
        rid = await graphs.start(Graph.model_validate(missing))
        with pytest.raises(GraphInvalid, match="step 'delegate'"):
            await graphs.result(rid)


def _worker_process(env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """``python -m phasegate.worker`` as a process of its own (to be killed)."""
    return subprocess.Popen(
        [sys.executable, "-m", "phasegate.worker"], env=env, cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip


async def test_a_worker_killed_mid_step_loses_nothing_and_ends_the_step_once(
    env, settings_for, tmp_path: Path
) -> None:
    from phasegate.testing import running_worker

    settings = settings_for(graph_function_modules=["graph_handlers"])
    spec = {
        "name": "slow",
        "entry": "work",
        "steps": [
            {"id": "work", "title": "Work", "handler": "graph_handlers:slow_first_time",
             "next": {"ok": "after"}},
            {"id": "after", "title": "After"},
        ],
    }  # fmt: skip
    worker_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "PHASEGATE_TASK_QUEUE": settings.task_queue,
        "PHASEGATE_HOME": settings.home,
        "PHASEGATE_GRAPH_FUNCTION_MODULES": "graph_handlers",
        "PYTHONPATH": str(Path(__file__).parent),
    }
    first = _worker_process(worker_env, tmp_path)
    graphs = GraphClient(env.client, settings.task_queue)
    try:
        assert first.stdout is not None and "phasegate worker" in first.stdout.readline()
        rid = await graphs.start(Graph.model_validate(spec), target=str(tmp_path))
        # The handler has started on the first worker (a loaded machine can take a while
        # to start a worker process and hand it the step's activity).
        for _ in range(600):
            if (tmp_path / "calls").exists():
                break
            await asyncio.sleep(0.05)
        assert (tmp_path / "calls").exists(), "the first worker never ran the handler"
    finally:
        first.kill()  # SIGKILL, mid-step: no chance to clean up
        first.wait()
    async with running_worker(env.client, settings):
        step = await _wait_for_step(graphs, rid, "after")
        view = await graphs.status(rid)
    assert step.step_id == "after"
    assert [(p.step, p.outcome) for p in view.path] == [("work", "ok")]  # ended once
    assert (tmp_path / "calls").read_text() == "xx"  # run again, after the heartbeat lapsed


def test_an_agent_step_gets_graph_instructions_not_the_orchestration_prompt() -> None:
    from phasegate import SHIPPED_LIBRARY
    from phasegate.activities.step_handlers import StepHandlerActivities
    from phasegate.domain.graph.activities import GraphPrepare

    spec = {
        "name": "judged",
        "entry": "judge",
        "steps": [{"id": "judge", "title": "Judge", "handler": {"agent": "reviewer"}}],
    }
    graph = Graph.model_validate(spec)
    handlers = StepHandlerActivities(
        default_models={"reviewer": "test:any"}, library_paths=[SHIPPED_LIBRARY]
    )
    setup = handlers.prepare(GraphPrepare(graph=graph, sha256=graph.sha256()))
    prompt = setup.agent_prompts["reviewer"]
    assert setup.problems == [] and setup.models == {"judge": "test:any"}
    assert "step graph" in prompt and "Reviews the developer's change" in prompt
    assert "{{" not in prompt and "---" not in prompt and "issue.id" not in prompt
    none = StepHandlerActivities(library_paths=[SHIPPED_LIBRARY])
    refused = none.prepare(GraphPrepare(graph=graph, sha256=graph.sha256()))
    assert "no model for the reviewer agent" in refused.problems[0]


async def test_a_step_dispatches_a_gated_session_and_takes_its_end(
    env, settings_for, run_worker, tmp_path: Path
) -> None:
    from temporalio.service import RPCError

    from phasegate.client.api import PhasegateClient
    from phasegate.domain.errors import PhasegateError
    from phasegate.testing import ScriptedAgent, unsigned_approver

    spec = {
        "name": "dispatch",
        "entry": "build",
        "steps": [
            {
                "id": "build",
                "title": "Build it through a gated session",
                "handler": {"session": "mini_v1"},
                "next": {"ok": "ship", "fail": None},
            },
            {"id": "ship", "title": "Ship"},
        ],
    }
    settings = settings_for(Path(__file__).parent / "fixtures" / "library")
    async with run_worker(settings):
        graphs = GraphClient(env.client, settings.task_queue)
        rid = await graphs.start(Graph.model_validate(spec), target=str(tmp_path))
        pg = PhasegateClient(env.client, settings.task_queue)
        for _ in range(200):  # the graph starts its child once it entered the step
            try:
                child = (await graphs.status(rid)).children["build#1"]
                await pg.wait_started(child, timeout=30)
                break
            except KeyError:  # not started yet
                await asyncio.sleep(0.05)
            except (PhasegateError, RPCError):  # not there yet
                await asyncio.sleep(0.05)
        # The child is an ordinary gated session: its gates and approval decide.
        view = await ScriptedAgent(pg, approve=unsigned_approver("alice")).walk(child)
        assert view.status == "completed"
        step = await _wait_for_step(graphs, rid, "ship")
        status = await graphs.status(rid)
    assert step.step_id == "ship" and [(p.step, p.outcome) for p in status.path] == [
        ("build", "ok")
    ]
    assert "session completed" in status.path[0].summary


async def test_a_graph_started_past_graph_check_is_validated_by_the_worker(
    graphs: GraphClient,
) -> None:
    broken = Graph.model_validate(
        {
            "name": "broken",
            "entry": "a",
            "steps": [
                {"id": "a", "title": "A", "next": {"ok": "nowhere"}},
                {"id": "b", "title": "B"},
            ],
        }
    )
    rid = await graphs.start(broken)  # a raw SDK start: no `phasegate graph check` ran
    with pytest.raises(GraphInvalid) as err:
        await graphs.result(rid)
    assert "unknown_target" in str(err.value) and "unreachable_step" in str(err.value)


async def test_a_step_gate_checks_the_workspace_before_the_step_ends(
    graphs: GraphClient, tmp_path: Path
) -> None:
    spec = {
        "name": "written",
        "entry": "write",
        "steps": [
            {
                "id": "write",
                "title": "Write the notes",
                "gate": {
                    "fields": {"notes_path": {"type": "string", "required": True}},
                    "verify": [
                        {"name": "notes", "kind": "file_exists", "path": "{{ evidence.notes_path | path }}"}
                    ],
                },
            }
        ],
    }  # fmt: skip
    rid = await graphs.start(Graph.model_validate(spec), target=str(tmp_path))
    claim = StepReport(step_id="write", outcome="ok", evidence={"notes_path": "NOTES.md"})
    refused = await graphs.report(rid, claim)  # the agent claims a file it never wrote
    assert not refused.accepted and refused.problems[0].field == "verify:notes"
    (tmp_path / "NOTES.md").write_text("done\n")
    assert (await graphs.report(rid, claim.model_copy(update={"report_id": None}))).accepted
    assert (await graphs.result(rid)).status == "completed"
