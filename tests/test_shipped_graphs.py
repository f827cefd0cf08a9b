"""The three shipped step graphs (library/graphs/): they check clean, every step's actions
render, each is driven exhaustively through real StepGraph runs (every parameter
combination, paths covering every edge), and each runs for real as its users would:
a decision whose gate refuses an incomplete record, a deep-think loop that the
worker's confidence check sends back to research, and a planner whose clarify step
asks a person (signed answers only) and whose plan goes to the reviewer agent on a
scripted model until it approves."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from orchestration_helpers import models, scripted

from phasegate import SHIPPED_LIBRARY
from phasegate.activities.graphs import check_path, read_graph
from phasegate.activities.step_handlers import StepHandlerActivities
from phasegate.agents.graph_handlers import assess_confidence
from phasegate.client import keys
from phasegate.client.graphs import GraphClient
from phasegate.domain.errors import ApprovalRefused
from phasegate.domain.graph.activities import RenderStepRequest, StepContext
from phasegate.domain.graph.messages import Question, StepReport, StepView
from phasegate.domain.graph.model import Graph
from phasegate.testing.graphs import Constant, domains, explore

GRAPHS = Path(SHIPPED_LIBRARY) / "graphs"
SHIPPED = ("decision-critique", "deep-think", "planner")
# Values for the parameters a run must be given (the others come from their declarations).
REQUIRED = {
    "decision-critique": {"decision": "Which message queue should the billing service use?"},
    "deep-think": {"question": "Is our retry policy safe for non-idempotent payments?"},
    "planner": {"goal": "Add single sign-on to the admin console"},
}
NOT_RENDERED = "(the actions could not be rendered"


def _graph(name: str) -> Graph:
    built = read_graph(GRAPHS / f"{name}.yaml")
    assert built.graph is not None and not built.problems, built.problems
    return built.graph


# ------------------------------------------------------------------ no server


def test_the_library_ships_exactly_these_graphs() -> None:
    assert sorted(p.stem for p in GRAPHS.iterdir() if p.suffix == ".yaml") == sorted(SHIPPED)


@pytest.mark.parametrize("name", ["decision-critique", "deep-think", "planner"])
def test_each_shipped_graph_checks_clean(name: str) -> None:
    (built,) = check_path(GRAPHS / f"{name}.yaml", [])
    assert built.graph is not None and built.problems == [], [str(p) for p in built.problems]


def test_the_planner_has_only_the_outcome_map_problem() -> None:
    """Until validate maps outcome_map values, these two are the planner's only problems."""
    (built,) = check_path(GRAPHS / "planner.yaml", [])
    assert [(p.code, p.step, p.outcome) for p in built.problems] in (
        [],
        [("impossible_outcome", "review", "ok"), ("impossible_outcome", "review", "iterate")],
    )


def _contexts(graph: Graph) -> list[dict[str, Any]]:
    """The step states a run can show a step: the initial one, and one with every state
    field set, the person's answers given and a later visit."""
    params = graph.run_params(REQUIRED[graph.name])
    full = {
        k: (0.5 if a.type == "float" else 2 if a.type == "int" else f"some {k}")
        for k, a in graph.state.items()
    }
    return [
        {"params": params, "state": graph.initial_state(), "answers": {}, "visit": 1},
        {"params": params, "state": full, "answers": {"scope": "all staff"}, "visit": 3},
    ]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_step_renders_in_every_state(name: str) -> None:
    graph = _graph(name)
    render = StepHandlerActivities().render_step
    for step in graph.steps:
        for ctx in _contexts(graph):
            text = render(RenderStepRequest(actions=step.actions, step_id=step.id, **ctx))
            assert not text.startswith(NOT_RENDERED), (step.id, text[:300])
            assert "{{" not in text and "{%" not in text, (step.id, text)
            assert len(text.strip()) > 40, (step.id, text)


def _ctx(visit: int, confidence: float | None, **params: Any) -> StepContext:
    state = {} if confidence is None else {"confidence": confidence}
    return StepContext(
        graph="deep-think", step_id="assess", visit=visit, params=params, state=state
    )


def test_assess_confidence_iterates_below_the_target_and_stops_at_the_rounds() -> None:
    target = {"confidence_target": 0.8, "max_rounds": 3}
    assert assess_confidence(_ctx(1, 0.5, **target)).outcome == "iterate"
    assert assess_confidence(_ctx(2, 0.79, **target)).outcome == "iterate"
    assert assess_confidence(_ctx(2, 0.8, **target)).outcome == "ok"
    stopped = assess_confidence(_ctx(3, 0.4, **target))
    assert stopped.outcome == "ok" and "still below the target 0.80 after 3" in stopped.summary
    assert assess_confidence(_ctx(1, None)).outcome == "iterate"  # defaults: 0 < 0.8
    assert assess_confidence(_ctx(1, True, confidence_target=0.5)).outcome == "iterate"  # type: ignore[arg-type]


# ------------------------------------------------------------------ exhaustive


@pytest.mark.parametrize("name", SHIPPED)
async def test_each_shipped_graph_runs_exhaustively(
    name: str, env, settings_for, run_worker
) -> None:
    graph = _graph(name)
    doms = {**domains(graph), **{k: Constant(v) for k, v in REQUIRED[name].items()}}
    settings = settings_for()
    async with run_worker(settings):
        result = await explore(graph, client=env.client, task_queue=settings.task_queue, doms=doms)
    result.assert_ok()
    assert result.runs == result.paths * result.combinations
    expected = {"decision-critique": (1, 3), "deep-think": (3, 12), "planner": (2, 1)}[name]
    assert (result.paths, result.combinations) == expected


# ------------------------------------------------------------------ real runs


@pytest.fixture
async def graphs(env, settings_for, run_worker):
    settings = settings_for()
    async with run_worker(settings):
        yield GraphClient(env.client, settings.task_queue)


async def _on(graphs: GraphClient, rid: str, step_id: str, visit: int = 1) -> StepView:
    """The step view once the run stands on ``step_id`` (a worker-run step takes a moment)."""
    for _ in range(200):
        step = await graphs.step(rid)
        if step is not None and step.step_id == step_id and step.visit == visit:
            assert not step.actions.startswith(NOT_RENDERED), step.actions
            return step
        await asyncio.sleep(0.05)
    view = await graphs.status(rid)
    raise AssertionError(f"never reached {step_id} visit {visit}: {view.status} {view.failure}")


async def _report(graphs: GraphClient, rid: str, step_id: str, outcome: str = "ok", **kw: Any):
    await _on(graphs, rid, step_id, kw.pop("visit", 1))
    result = await graphs.report(rid, StepReport(step_id=step_id, outcome=outcome, **kw))
    return result


async def test_a_decision_is_recorded_only_with_its_whole_rationale(graphs: GraphClient) -> None:
    rid = await graphs.start(_graph("decision-critique"), params=REQUIRED["decision-critique"])
    step = await _on(graphs, rid, "frame")
    assert "Which message queue" in step.actions and step.outcomes == ["ok"]
    await _report(graphs, rid, "frame", state={"problem": "Reliable billing events.",
                                               "criteria": "1. durability\n2. ops cost"})  # fmt: skip
    step = await _on(graphs, rid, "options")
    assert "1. durability" in step.actions and "at least 3 options" in step.actions
    await _report(graphs, rid, "options", state={"options": "- Kafka\n- SQS\n- Postgres queue"})
    step = await _on(graphs, rid, "critique")
    assert "- SQS" in step.actions
    await _report(graphs, rid, "critique", state={"critique": "## Kafka\n..."})
    step = await _on(graphs, rid, "decide")
    assert step.gate is not None and set(step.gate["fields"]) >= {"rationale", "rejected"}
    evidence = {
        "chosen_option": "SQS",
        "rationale": "SQS wins on durability and on ops cost, the two criteria that matter "
        "most: it is managed, replicated, and the team already runs it.",
        "options_considered": 3,
        "rejected": ["Kafka: ops cost of running a cluster"],  # Postgres queue left out
        "risks": ["vendor lock-in: watch the monthly bill"],
        "revisit_when": "billing volume passes 10k events per second",
    }
    refused = await graphs.report(
        rid, StepReport(step_id="decide", outcome="ok", evidence=evidence)
    )
    assert not refused.accepted and refused.status == "running"
    assert [p.rule for p in refused.problems] == ["rule:every_other_option_rejected"]
    evidence["rejected"] = [*evidence["rejected"], "Postgres queue: throughput ceiling"]
    done = await graphs.report(rid, StepReport(step_id="decide", outcome="ok", evidence=evidence))
    assert done.accepted and done.status == "completed"
    summary = await graphs.result(rid)
    assert [p.step for p in summary.path] == ["frame", "options", "critique", "decide"]


async def test_deep_think_researches_again_until_confident(graphs: GraphClient) -> None:
    params = {**REQUIRED["deep-think"], "mode": "full", "confidence_target": 0.8}
    rid = await graphs.start(_graph("deep-think"), params=params)
    step = await _on(graphs, rid, "triage")
    assert "started in **full** mode: report `full`" in step.actions
    await _report(graphs, rid, "triage", "full")
    await _report(graphs, rid, "decompose", state={"subquestions": "- Are payments idempotent?"})
    await _report(graphs, rid, "research", state={"notes": "Retries resend.", "confidence": 0.55})
    # The worker's assess step finds 0.55 < 0.8: research runs again, told why.
    step = await _on(graphs, rid, "research", visit=2)
    assert "Research round 2" in step.actions and "confidence 0.55 below the target 0.8" in (
        " ".join(step.actions.split())
    )
    await _report(graphs, rid, "research", visit=2,
                  state={"notes": "Retries resend; keys dedupe.", "confidence": 0.9})  # fmt: skip
    step = await _on(graphs, rid, "answer")
    assert "stopped below" not in step.actions and "keys dedupe" in step.actions
    thin = await graphs.report(
        rid,
        StepReport(step_id="answer", outcome="ok", evidence={"answer": "Yes.", "confidence": 2}),
    )
    assert not thin.accepted
    assert {p.field for p in thin.problems} == {"answer", "confidence", "open_questions"}
    evidence = {"answer": "Yes: the gateway dedupes by key.", "confidence": 0.9,
                "open_questions": []}  # fmt: skip
    assert (await graphs.report(rid, StepReport(step_id="answer", outcome="ok",
                                                evidence=evidence))).accepted  # fmt: skip
    summary = await graphs.result(rid)
    taken = [(p.step, p.outcome, p.by) for p in summary.path]
    assert [(s, o) for s, o, _ in taken] == [
        ("triage", "full"), ("decompose", "ok"), ("research", "ok"), ("assess", "iterate"),
        ("research", "ok"), ("assess", "ok"), ("answer", "ok"),
    ]  # fmt: skip
    assert {by for s, _, by in taken if s == "assess"} == {"phasegate:worker"}
    assert "reached the target" in summary.path[5].summary


async def test_deep_think_answers_with_the_doubt_stated_once_the_rounds_are_spent(
    graphs: GraphClient,
) -> None:
    params = {**REQUIRED["deep-think"], "mode": "full", "max_rounds": 1}
    rid = await graphs.start(_graph("deep-think"), params=params)
    await _report(graphs, rid, "triage", "full")
    await _report(graphs, rid, "decompose", state={"subquestions": "- one"})
    await _report(graphs, rid, "research", state={"notes": "Little found.", "confidence": 0.3})
    step = await _on(graphs, rid, "answer")
    assert "stopped below the confidence target" in step.actions
    view = await graphs.status(rid)
    assert view.path[-1].step == "assess" and "after 1 round(s)" in view.path[-1].summary


REJECT = {
    "approved": False,
    "comments": ["Step 3 names no rollback: say how SSO is switched off if the IdP fails."],
    "severity": "major",
    "confidence": 0.9,
    "replan_request": None,
}
APPROVE = {"approved": True, "comments": [], "severity": "none", "confidence": 0.9,
           "replan_request": None}  # fmt: skip


async def test_the_planner_asks_the_person_and_revises_until_the_reviewer_approves(
    env, settings_for, run_worker, tmp_path: Path
) -> None:
    lead = keys.new_key("lead", directory=tmp_path)
    (tmp_path / "approvers.json").write_text(json.dumps([lead.model_dump()]))
    prompts: list[str] = []

    def answer(verdict: dict[str, Any]):
        def reply(messages: list[Any], info: Any) -> dict[str, Any]:
            prompts.append(str(messages))
            return verdict

        return reply

    reviewer = scripted(answer(REJECT), answer(APPROVE))
    with models(reviewer=reviewer) as ids:
        settings = settings_for(
            models=ids,
            approver_keys_file=str(tmp_path / "approvers.json"),
            allow_unsigned_approvals=False,
        )
        async with run_worker(settings):
            graphs = GraphClient(env.client, settings.task_queue)
            rid = await graphs.start(_graph("planner"), params=REQUIRED["planner"])
            step = await _on(graphs, rid, "clarify")
            assert step.may_ask and "needs_input" in step.outcomes
            questions = [
                Question(id="audience", text="Who signs in with SSO?",
                         options=["admins only", "all staff"]),
                Question(id="idp", text="Which identity provider?"),  # free text
            ]  # fmt: skip
            await graphs.report(
                rid, StepReport(step_id="clarify", outcome="needs_input", questions=questions)
            )
            view = await graphs.status(rid)
            assert view.status == "awaiting_input" and view.questions == questions
            # The agent answering for the person, unsigned, is refused.
            with pytest.raises(ApprovalRefused):
                await graphs.answer(rid, {"audience": "all staff", "idp": "Okta"},
                                    as_key=None, approver="lead")  # fmt: skip
            await graphs.answer(rid, {"audience": "admins only", "idp": "Okta"},
                                as_key="lead", key_dir=tmp_path)  # fmt: skip
            step = await _on(graphs, rid, "clarify", visit=2)
            assert "**audience**: admins only" in step.actions and "**idp**: Okta" in step.actions
            await _report(graphs, rid, "clarify", visit=2,
                          state={"clarifications": "Admins only, Okta (answered by lead)."})  # fmt: skip
            await _report(graphs, rid, "plan", state={"plan": "PLAN-V1: 1. OIDC app 2. login"})
            # The reviewer (a scripted model) rejects: its comment is a finding to fix.
            step = await _on(graphs, rid, "revise")
            assert [(f.severity, f.text) for f in step.findings] == [
                ("must", REJECT["comments"][0])
            ]
            assert "PLAN-V1" in step.actions and "revision 0" in step.actions
            assert "set to 1" in step.actions
            await _report(graphs, rid, "revise",
                          state={"plan": "PLAN-V2: 1. OIDC app 2. login 3. rollback switch",
                                 "revisions": 1})  # fmt: skip
            step = await _on(graphs, rid, "done")
            assert "after 1 revision(s)" in step.actions and "PLAN-V2" in step.actions
            await _report(graphs, rid, "done")
            summary = await graphs.result(rid)
    assert summary.status == "completed"
    assert [(p.step, p.outcome) for p in summary.path] == [
        ("clarify", "needs_input"), ("clarify", "answered"), ("clarify", "ok"), ("plan", "ok"),
        ("review", "iterate"), ("revise", "ok"), ("review", "ok"), ("done", "ok"),
    ]  # fmt: skip
    assert len(reviewer.calls) == 2 and len(prompts) == 2
    # The reviewer read the plan and the person's answers; the second time, the revised
    # plan and the findings it had asked to be addressed.
    assert "PLAN-V1" in prompts[0] and "Admins only, Okta" in prompts[0]
    assert "PLAN-V2" in prompts[1] and "Findings to address" in prompts[1]
    assert "rollback" in prompts[1] and "PLAN-V2" not in prompts[0]


# ------------------------------------------------------------------ docs/step-graphs.md

DOC = Path(__file__).resolve().parent.parent / "docs" / "step-graphs.md"


def test_the_doc_example_graph_checks_clean(tmp_path: Path) -> None:
    import re

    block = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)[0]
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "triage-fix.yaml").write_text(block, encoding="utf-8")
    (built,) = check_path(tmp_path / "graphs", [])
    assert built.graph is not None and built.problems == [], [str(p) for p in built.problems]
    assert len(built.graph.steps) == 4 and built.graph.params["attempts"].max == 5


def test_the_doc_names_every_key_and_code() -> None:
    from phasegate.domain.graph.model import Arg, Handler, ReviewSchedule, StepDef
    from phasegate.domain.graph.validate import CODES

    text = DOC.read_text(encoding="utf-8")
    keys = [
        *(f for f in Graph.model_fields if f != "source"),
        *(f for f in StepDef.model_fields if f != "line"),
        *Arg.model_fields,
        *(f for f in Handler.model_fields if f not in ("kind", "target")),
        *ReviewSchedule.model_fields,
        *CODES,
    ]
    assert [k for k in keys if f"`{k}`" not in text] == []


def test_the_doc_commands_are_the_real_ones() -> None:
    """Every option `phasegate graph run|show|report|answer` takes is in the doc's usage
    line for it, and the doc names no option the command does not take."""
    import re

    from phasegate.client.cli import build_parser

    text = DOC.read_text(encoding="utf-8")
    graph = build_parser()._subparsers._group_actions[0].choices["graph"]  # type: ignore[union-attr]
    commands = graph._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("run", "show", "report", "answer", "list", "check", "import-asl"):
        usage = re.search(rf"^phasegate graph {name} (.*?)(?<!\\)$", text, re.MULTILINE | re.DOTALL)
        assert usage, name
        line = usage.group(1)
        real = {o for a in commands[name]._actions for o in a.option_strings if o.startswith("--")}
        real.discard("--help")
        assert real == set(re.findall(r"--[a-z-]+", line)), (name, line)
