"""``phasegate graph run | show | report | answer``: step graph runs on the server.

``graph run NAME`` loads the graph from the library path (validated first: a graph
with a problem never starts), starts a ``StepGraph`` run pinned to its SHA-256 and
prints the first step; ``graph show RUN`` prints the step the run is on (never
another), the path it took and, with ``--mermaid``, the graph with the current step
and the path marked; ``graph report`` ends the current step with an outcome (an
outside agent's move); ``graph answer`` answers the questions a step asked (signed
with your key when you hold it, as approvals are).

Exit codes: 0 done; 1 an error (refused reports say why and what to do); 2 ``report``:
the step's gate refused the evidence (problems printed); 3 ``run``/``show``: the run
waits for a person's answers.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from phasegate.client._graph_text import graph_text
from phasegate.client.cli._common import (
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    JSON,
    Ctx,
    remote,
    signer,
)
from phasegate.domain.errors import PhasegateError

if TYPE_CHECKING:
    from phasegate.client.graphs import GraphClient

__all__ = ["register"]


def register(graph_sub: Any) -> None:
    """Add ``run``, ``show``, ``report`` and ``answer`` to the ``graph`` group."""
    s = graph_sub.add_parser(
        "run",
        parents=[JSON],
        help="start a run of a graph from the library",
        description="Validate graph NAME (from PHASEGATE_LIBRARY's and the shipped "
        "graphs/ folders) and start a run of it, pinned to its SHA-256: later edits to "
        "the file never change a running graph. Prints the first step.",
    )
    s.add_argument("name", metavar="NAME", help="the graph's name (`phasegate graph list`)")
    s.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run parameter (repeatable; VALUE is JSON when it parses, else text)",
    )
    s.add_argument("--target", default="", help="the workspace handlers work in")
    s.add_argument("--id", help="the run's id (default: graph-NAME-RANDOM)")
    s.add_argument(
        "--approver",
        action="append",
        dest="approvers",
        metavar="NAME",
        help="only NAME may answer questions (repeatable; narrows, never widens)",
    )
    s.set_defaults(func=remote(graph_run))
    s = graph_sub.add_parser(
        "show",
        parents=[JSON],
        help="the step a run is on, its path and what it waits for",
        description="The current step (title, actions, allowed outcomes, state, "
        "questions), the path the run took, and its status.",
    )
    s.add_argument("run_id", metavar="RUN")
    s.add_argument(
        "--mermaid", action="store_true", help="print the graph as Mermaid, the run marked"
    )
    s.set_defaults(func=remote(graph_show))
    s = graph_sub.add_parser(
        "report",
        parents=[JSON],
        help="end the current step with an outcome (the agent's move)",
        description="Report STEP of RUN ended with OUTCOME. Refused (nothing recorded) "
        "when the run is not on STEP, OUTCOME is not one the step allows, or the state "
        "does not fit the graph's declarations.",
    )
    s.add_argument("run_id", metavar="RUN")
    s.add_argument("step", metavar="STEP")
    s.add_argument("outcome", metavar="OUTCOME", help="one of the step's outcomes, or needs_input")
    s.add_argument("--state", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--evidence", help="evidence for the step's gate (JSON object)")
    s.add_argument(
        "--question",
        action="append",
        default=[],
        metavar="ID:TEXT[:OPTION|OPTION...]",
        help="with needs_input: a question for a person (1-3; 2-3 options, or none for "
        "free text where the step allows it)",
    )
    s.add_argument("--summary", default="", help="one line on what was done")
    s.add_argument("--visit", type=int, help="the visit reported (refused if stale)")
    s.set_defaults(func=remote(graph_report))
    s = graph_sub.add_parser(
        "answer",
        parents=[JSON],
        help="answer the questions a run's step asked (a person's move)",
        description="Answer every open question of RUN. With your private key in the key "
        "directory the answers are signed (runs on a deployment with approver keys "
        "accept only signed answers).",
    )
    s.add_argument("run_id", metavar="RUN")
    s.add_argument("--answer", action="append", default=[], metavar="QUESTION=VALUE", required=True)
    s.add_argument("--as", dest="as_name", metavar="NAME", help="who answers (your key's name)")
    s.set_defaults(func=remote(graph_answer))


def _graphs(ctx: Ctx, pg: Any) -> GraphClient:
    from phasegate.client.graphs import GraphClient

    return GraphClient(pg.temporal, ctx.settings.task_queue)


def _pairs(items: list[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PhasegateError(f"{item!r} is not KEY=VALUE", where=flag)
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


async def graph_run(ctx: Ctx) -> int:
    from phasegate.activities.graphs import load_graph

    a = ctx.args
    graph = load_graph(a.name, ctx.settings.library_paths)  # every problem, before a start
    graphs = _graphs(ctx, await ctx.client())
    rid = await graphs.start(
        graph,
        params=_pairs(a.param, "--param"),
        target=a.target,
        run_id=a.id,
        approvers=a.approvers,
    )
    step = await graphs.step(rid)
    view = await graphs.status(rid)
    ctx.emit(
        view,
        f"graph run {rid} ({graph.name}, sha256 {graph.sha256()[:12]})\n" + graph_text(view, step),
    )
    return EXIT_REFUSED if view.status == "awaiting_input" else EXIT_OK


async def graph_show(ctx: Ctx) -> int:
    graphs = _graphs(ctx, await ctx.client())
    view = await graphs.status(ctx.args.run_id)
    step = await graphs.step(ctx.args.run_id)
    if ctx.args.mermaid:
        from phasegate.domain.graph.views import mermaid

        start = await _graph_of(graphs, ctx.args.run_id)
        taken = {p.step for p in view.path}
        ctx.emit(view, mermaid(start, current=view.current_step, taken=taken))
        return EXIT_OK
    ctx.emit(view, graph_text(view, step))
    return EXIT_REFUSED if view.status == "awaiting_input" else EXIT_OK


async def _graph_of(graphs: GraphClient, rid: str) -> Any:
    """The graph the run is pinned to, from its first event (the start input)."""
    from phasegate.domain.graph.messages import StartGraph
    from phasegate.temporal import DATA_CONVERTER

    handle = graphs.temporal.get_workflow_handle(rid)
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        [start] = await DATA_CONVERTER.decode(payloads, [StartGraph])
        return start.graph
    raise PhasegateError(f"graph run {rid} has no start event")


async def graph_report(ctx: Ctx) -> int:
    from phasegate.domain.graph.messages import StepReport

    a = ctx.args
    evidence = None
    if a.evidence:
        try:
            evidence = json.loads(a.evidence)
        except ValueError as exc:
            raise PhasegateError(f"not JSON: {exc}", where="--evidence") from None
    report = StepReport(
        step_id=a.step,
        outcome=a.outcome,
        visit=a.visit,
        state=_pairs(a.state, "--state"),
        evidence=evidence,
        questions=[_question(q) for q in a.question],
        summary=a.summary,
    )
    graphs = _graphs(ctx, await ctx.client())
    result = await graphs.report(a.run_id, report)
    if not result.accepted:
        lines = [f"step {a.step}: the gate refused the evidence"]
        lines += [f"  {p.field}: {p.message}" for p in result.problems]
        ctx.emit(result, "\n".join(lines))
        return EXIT_GATE_FAILED
    where = {
        "completed": "the run completed",
        "failed": "the run failed (phasegate graph show RUN says why)",
        "awaiting_input": "the step waits for a person's answers (phasegate graph answer)",
    }.get(result.status, f"next step: {result.next_step} (phasegate graph show {a.run_id})")
    ctx.emit(result, f"step {a.step} ended {result.outcome}: {where}")
    return EXIT_OK


def _question(text: str) -> Any:
    from phasegate.domain.graph.messages import Question

    qid, _, rest = text.partition(":")
    body, _, options = rest.partition(":")
    if not qid or not body:
        raise PhasegateError(f"{text!r} is not ID:TEXT[:OPTION|OPTION]", where="--question")
    return Question(id=qid, text=body, options=[o for o in options.split("|") if o])


async def graph_answer(ctx: Ctx) -> int:
    a = ctx.args
    name, signed = signer(a.as_name)
    graphs = _graphs(ctx, await ctx.client())
    answers = {k: str(v) for k, v in _pairs(a.answer, "--answer").items()}
    view = await graphs.answer(a.run_id, answers, as_key=name if signed else None, approver=name)
    ctx.emit(
        view,
        f"answered by {name}{' (signed)' if signed else ''}; step {view.current_step} "
        f"runs again with the answers",
    )
    return EXIT_OK
