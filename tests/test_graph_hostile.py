"""A hostile review of ``StepGraph`` at threat level 2 (docs/step-graphs.md, "What an
agent can and cannot do to a run"): the agent holds a raw Temporal client and the
CLI/MCP tools, never a person's private key. Each attack that is refused is a passing
test (the guarantee, documented); each hole found is a test of its fix, or an
``xfail(strict=True)`` saying what is left."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.worker import Worker

from phasegate.activities.step_handlers import render_actions
from phasegate.client import keys
from phasegate.client.graphs import GraphClient
from phasegate.domain.errors import (
    ApprovalRefused,
    GraphInvalid,
    PhasegateError,
    SessionError,
    StepSequenceViolation,
)
from phasegate.domain.graph.activities import RenderStepRequest
from phasegate.domain.graph.messages import GraphAnswer, Question, StartGraph, StepReport
from phasegate.domain.graph.model import Graph

LOOP: dict[str, Any] = {
    "name": "loop",
    "entry": "work",
    "state": {"n": {"type": "int", "default": 0}},
    "steps": [
        {
            "id": "work",
            "title": "Work",
            "actions": "Work, visit {{ visit }}.",
            "next": {"ok": "confirm", "iterate": "work"},
            "max_iterations": 50,
        },
        {
            "id": "confirm",
            "title": "Confirm (a secret step)",
            "actions": "SECRET-NEXT-STEP",
            "ask": True,
            "next": {"ok": None},
        },
    ],
}


@pytest.fixture
async def graphs(env, settings_for, run_worker):
    settings = settings_for(graph_function_modules=["graph_handlers"])
    async with run_worker(settings):
        yield GraphClient(env.client, settings.task_queue)


async def _step(graphs: GraphClient, rid: str, step_id: str, visit: int = 1) -> Any:
    for _ in range(200):
        step = await graphs.step(rid, timeout=10)
        if step is not None and step.step_id == step_id and step.visit == visit:
            return step
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {step_id} visit {visit}")


# ---- refused: moving a run other than through the step it is on ----------------------


async def test_foreign_stale_and_off_menu_reports_never_reach_the_run(graphs: GraphClient) -> None:
    rid = await graphs.start(Graph.model_validate(LOOP))
    step = await _step(graphs, rid, "work")
    assert "SECRET-NEXT-STEP" not in step.model_dump_json()  # never a step it is not on
    view = await graphs.status(rid)
    assert "SECRET" not in view.model_dump_json()
    attacks: list[tuple[StepReport, type[Exception], str]] = [
        (StepReport(step_id="confirm", outcome="ok"), StepSequenceViolation, "on step 'work'"),
        (StepReport(step_id="work", outcome="ok", visit=2), StepSequenceViolation, "stale"),
        (StepReport(step_id="work", outcome="_default"), SessionError, "no outcome '_default'"),
        (StepReport(step_id="work", outcome="done"), SessionError, "no outcome 'done'"),
        (
            StepReport(
                step_id="work",
                outcome="needs_input",
                questions=[Question(id="q", text="?", options=["a", "b"])],
            ),
            SessionError,
            "may not ask",
        ),
        (
            StepReport(
                step_id="work",
                outcome="ok",
                questions=[Question(id="q", text="?", options=["a", "b"])],
            ),
            SessionError,
            "needs_input outcome only",
        ),
        (StepReport(step_id="work", outcome="ok", state={"n": "x"}), SessionError, "state|int"),
        (StepReport(step_id="work", outcome="ok", state={"secret": 1}), SessionError, "no state"),
    ]
    for report, error, match in attacks:
        with pytest.raises(error, match=match):
            await graphs.report(rid, report)
    after = await graphs.status(rid)
    assert after.path_total == 0 and after.current_step == "work" and after.visit == 1


async def test_a_repeated_report_id_with_other_content_gets_the_first_result(
    graphs: GraphClient,
) -> None:
    rid = await graphs.start(Graph.model_validate(LOOP))
    first = await graphs.report(rid, StepReport(step_id="work", outcome="iterate", report_id="r"))
    assert first.next_step == "work"
    # Same id, other step/outcome/state: the first result, and nothing moves.
    again = await graphs.report(
        rid, StepReport(step_id="work", outcome="ok", state={"n": 9}, report_id="r")
    )
    assert again == first
    view = await graphs.status(rid)
    assert view.path_total == 1 and view.current_step == "work" and view.state == {"n": 0}


async def test_racing_reports_end_the_step_once(graphs: GraphClient) -> None:
    rid = await graphs.start(Graph.model_validate(LOOP))
    await _step(graphs, rid, "work")
    results = await asyncio.gather(
        *(graphs.report(rid, StepReport(step_id="work", outcome="ok", visit=1)) for _ in range(6)),
        return_exceptions=True,
    )
    accepted = [r for r in results if not isinstance(r, BaseException)]
    assert len(accepted) == 1, results
    assert all(isinstance(r, StepSequenceViolation) for r in results if r not in accepted)
    view = await graphs.status(rid)
    assert view.path_total == 1 and view.current_step == "confirm"


# ---- refused: answering for the person ----------------------------------------------


async def test_the_agent_cannot_answer_or_replay_a_signed_answer(
    env, settings_for, run_worker, tmp_path: Path
) -> None:
    from phasegate.client._base import sign_as

    lead = keys.new_key("lead", directory=tmp_path)
    keys_file = tmp_path / "approvers.json"
    keys_file.write_text(json.dumps([lead.model_dump()]))
    settings = settings_for(approver_keys_file=str(keys_file), allow_unsigned_approvals=False)
    async with run_worker(settings):
        graphs = GraphClient(env.client, settings.task_queue)
        rid = await graphs.start(Graph.model_validate(LOOP))
        await graphs.report(rid, StepReport(step_id="work", outcome="ok"))
        qs = [Question(id="go", text="Ship it?", options=["yes", "no"])]
        ask = StepReport(step_id="confirm", outcome="needs_input", questions=qs)
        await graphs.report(rid, ask)
        view = await graphs.status(rid)
        # Unsigned, or signed by a name without the key, or off the menu: refused.
        with pytest.raises(ApprovalRefused):
            await graphs.answer(rid, {"go": "yes"}, as_key=None, approver="lead")
        with pytest.raises(SessionError, match="not an option"):
            await graphs.answer(rid, {"go": "maybe"}, as_key="lead", key_dir=tmp_path)
        # The person signs round 1; the agent keeps the signed message.
        name, nonce, sig = sign_as(
            "lead", None, ask="", key_dir=tmp_path, session_id=rid,
            phase=view.question_round, decision="approve", comment='{"go":"no"}',
            binding=view.answer_binding,
        )  # fmt: skip
        signed = GraphAnswer(
            step_id="confirm", round=1, answers={"go": "no"}, approver=name, nonce=nonce,
            signature=sig,
        )  # fmt: skip
        # ...and flips the answer under the same signature: refused.
        flipped = signed.model_copy(update={"answers": {"go": "yes"}})
        with pytest.raises(ApprovalRefused):
            await graphs._update(rid, "answer", flipped)
        await graphs._update(rid, "answer", signed)
        await _step(graphs, rid, "confirm", visit=2)
        # Round 2 with the same questions: the round-1 signature replayed is refused,
        # renumbered or not.
        await graphs.report(rid, ask)
        with pytest.raises(StepSequenceViolation, match="round 2"):
            await graphs._update(rid, "answer", signed)
        with pytest.raises(ApprovalRefused):
            await graphs._update(rid, "answer", signed.model_copy(update={"round": 2}))
        assert (await graphs.status(rid)).status == "awaiting_input"


# ---- refused: forged starts, code on the worker ----------------------------------------


async def test_forged_starts_are_refused(graphs: GraphClient) -> None:
    from phasegate.workflows import StepGraph

    graph = Graph.model_validate(LOOP)
    forged = {"graph": LOOP, "sha256": graph.sha256(), "status": "completed", "current": None}
    handle = await graphs.temporal.start_workflow(
        StepGraph.run,
        StartGraph(graph=graph, sha256=graph.sha256(), carried=forged),
        id=f"graph-forged-{uuid.uuid4().hex[:6]}",
        task_queue=graphs.task_queue,
    )
    with pytest.raises(PhasegateError, match="carried state"):
        await graphs.result(handle.id)
    rce = {
        **LOOP,
        "steps": [{**LOOP["steps"][0], "handler": "os:system"}, LOOP["steps"][1]],
    }
    rid = await graphs.start(Graph.model_validate(rce))
    with pytest.raises(GraphInvalid, match="does not run 'os:system'"):
        await graphs.result(rid)


@workflow.defn(sandboxed=False)
class _Intruder:
    """The agent's own workflow on its own queue, scheduling phasegate's handler
    activity on phasegate's queue with a target of its choice."""

    @workflow.run
    async def run(self, queue: str, target: str) -> str:
        try:
            await workflow.execute_activity(
                "run_step_function",
                {"target": target, "context": {"graph": "x", "step_id": "s", "visit": 1}},
                task_queue=queue,
                start_to_close_timeout=timedelta(seconds=20),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except Exception as exc:  # noqa: BLE001
            return f"refused: {getattr(exc, 'cause', None) or exc}"
        return "ran"


async def test_a_handler_activity_scheduled_from_a_foreign_workflow_runs_no_unlisted_code(
    env, graphs: GraphClient
) -> None:
    queue = f"intruder-{uuid.uuid4().hex[:6]}"
    async with Worker(env.client, task_queue=queue, workflows=[_Intruder]):
        for target in ("os:system", "phasegate.agents.graph_handlers_evil:x"):
            out = await env.client.execute_workflow(
                _Intruder.run,
                args=[graphs.task_queue, target],
                id=f"intruder-{uuid.uuid4().hex[:6]}",
                task_queue=queue,
            )
            assert out.startswith("refused") and "refuses to run run_step_function" in out, out


# ---- holes, fixed ----------------------------------------------------------------------


UNTYPED: dict[str, Any] = {
    "name": "untyped",
    "entry": "a",
    "steps": [
        {"id": "a", "title": "A", "next": {"ok": "b", "iterate": "a"}, "max_iterations": 60},
        {"id": "b", "title": "B", "actions": "Share: {{ 100 // state.n }}", "next": {"ok": None}},
    ],
}


async def test_a_template_that_raises_on_agent_state_does_not_wedge_the_run(
    graphs: GraphClient,
) -> None:
    """Was: a ZeroDivisionError (not a TemplateError) escaped the inline render inside the
    workflow task: the task failed forever and the report that caused it never got its
    answer (the run wedged)."""
    rid = await graphs.start(Graph.model_validate(UNTYPED))
    done = await asyncio.wait_for(
        graphs.report(rid, StepReport(step_id="a", outcome="ok", state={"n": 0})), 20
    )
    assert done.next_step == "b"
    step = await asyncio.wait_for(_step(graphs, rid, "b"), 20)
    assert "could not be rendered" in step.actions
    await graphs.report(rid, StepReport(step_id="b", outcome="ok"))
    assert (await graphs.result(rid)).status == "completed"


@pytest.mark.parametrize(
    "actions",
    [
        "{{ 'x' * 30000000 }}",  # a string product far past what a step shows
        "{{ 7 ** 100000 }}",  # an integer past what Python will print
        "{{ 'x'.ljust(30000000) }}",  # a method padding to any width
        "{{ 'x' | center(30000000) }}",  # a filter padding to any width
        "{{ lipsum(n=100000) }}",
    ],
)
def test_an_explosive_template_is_refused_not_computed(actions: str) -> None:
    """Whoever starts a run (level 2: the agent, from a raw client) writes its templates,
    and the workflow renders substitution-only ones inside its own task."""
    began = time.monotonic()
    text = render_actions(RenderStepRequest(actions=actions, step_id="s", visit=1))
    assert "could not be rendered" in text and len(text) < 1000
    assert time.monotonic() - began < 1.0


async def test_the_step_state_cannot_grow_without_bound(graphs: GraphClient) -> None:
    """Was: a graph without state declarations took any new key in every report (each
    report up to 64 KB), so a loop grew the state, the carried input and every
    activity's input past Temporal's payload limit."""
    rid = await graphs.start(Graph.model_validate(UNTYPED))
    chunk = "x" * 60_000
    refused = None
    for i in range(20):
        try:
            await graphs.report(
                rid, StepReport(step_id="a", outcome="iterate", state={f"k{i}": chunk})
            )
        except SessionError as exc:
            refused = exc
            break
    assert refused is not None and "state" in str(refused)
    assert len(json.dumps((await graphs.status(rid)).state)) <= 512 * 1024


async def test_needs_input_cannot_carry_undeclared_or_ill_typed_state(graphs: GraphClient) -> None:
    """Was: a ``needs_input`` report skipped the state declarations (only its questions
    were checked) and its state was kept: any key, any type."""
    rid = await graphs.start(Graph.model_validate(LOOP))
    await graphs.report(rid, StepReport(step_id="work", outcome="ok"))
    qs = [Question(id="go", text="Ship it?", options=["yes", "no"])]
    for state in ({"secret": 1}, {"n": "not a number"}):
        with pytest.raises(SessionError, match="state"):
            await graphs.report(
                rid,
                StepReport(step_id="confirm", outcome="needs_input", questions=qs, state=state),
            )
    view = await graphs.status(rid)
    assert view.state == {"n": 0} and view.status == "running"


GATED = """\
name: gated
entry: prove
steps:
  - id: prove
    title: Prove it
    gate:
      checkpoint: {strict: true}
      evidence_schema:
        proof: {type: string, required: true}
    next: {ok: null}
"""


async def test_failing_reports_that_swell_history_do_not_wedge_the_run(
    graphs: GraphClient, tmp_path: Path
) -> None:
    """Each report the gate refuses is still an accepted update in history (its evidence
    up to 256 KB); enough of them make the server suggest continue-as-new, and a run
    that waits for reports must not spin on that suggestion."""
    from phasegate.activities.graphs import load_graph_file

    (tmp_path / "gated.yaml").write_text(GATED)
    rid = await graphs.start(load_graph_file(str(tmp_path / "gated.yaml")))
    pad = "x" * 250_000
    for _ in range(20):
        bad = await asyncio.wait_for(
            graphs.report(rid, StepReport(step_id="prove", outcome="ok", evidence={"pad": pad})),
            30,
        )
        assert not bad.accepted
    good = await asyncio.wait_for(
        graphs.report(rid, StepReport(step_id="prove", outcome="ok", evidence={"proof": "p"})), 30
    )
    assert good.accepted and (await graphs.result(rid)).status == "completed"


# ---- holes left (larger than a local fix) ----------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="the Jinja2 sandbox bounds what a template reaches, products, powers, call "
    "arguments and output size, but not CPU: loops that write nothing (nested over "
    "range(), or over the params/state) run to their end on phasegate's worker (a local "
    "activity's thread, which a timeout cannot stop). Needs rendering in a process with a "
    "time limit, or a loop budget in the compiled template",
)
def test_a_template_that_loops_without_writing_is_stopped() -> None:
    actions = "{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}"
    began = time.monotonic()
    render_actions(RenderStepRequest(actions=actions, step_id="s", visit=1))
    assert time.monotonic() - began < 0.2


CHILD = """\
name: child
entry: work
steps:
  - id: work
    title: Work
    next: {ok: null}
"""


async def test_a_squatted_child_id_does_not_end_the_run(
    env, settings_for, run_worker, tmp_path: Path
) -> None:
    """The agent starts a workflow under the id the child would have had before
    (``RUN--STEP-VISIT``): the parent's child takes an id with a random part instead,
    which the parent records, and the run goes on."""
    library = tmp_path / "lib"
    (library / "graphs").mkdir(parents=True)
    (library / "graphs" / "child.yaml").write_text(CHILD)
    parent = {
        "name": "parent",
        "entry": "first",
        "steps": [
            {"id": "first", "title": "First", "next": {"ok": "delegate"}},
            {"id": "delegate", "title": "Delegate", "handler": {"graph": "child"},
             "next": {"ok": None, "fail": None}},
        ],
    }  # fmt: skip
    settings = settings_for(library)
    async with run_worker(settings):
        graphs = GraphClient(env.client, settings.task_queue)
        rid = await graphs.start(Graph.model_validate(parent))
        await _step(graphs, rid, "first")
        squat = await env.client.start_workflow(
            "Squatter", id=f"{rid}--delegate-1", task_queue=f"nobody-{uuid.uuid4().hex[:6]}"
        )
        try:
            await graphs.report(rid, StepReport(step_id="first", outcome="ok"))
            child = ""
            for _ in range(200):
                child = (await graphs.status(rid)).children.get("delegate#1", "")
                if child:
                    break
                await asyncio.sleep(0.05)
            assert child and child != f"{rid}--delegate-1"
            await _step(graphs, child, "work")
            await graphs.report(child, StepReport(step_id="work", outcome="ok"))
            summary = await asyncio.wait_for(graphs.result(rid), 30)
            assert summary.status == "completed" and summary.outcome == "ok"
        finally:
            await squat.terminate()
