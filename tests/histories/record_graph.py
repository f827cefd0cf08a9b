"""Record StepGraph histories for the replay test (tests/test_step_graph.py).

    .venv/bin/python tests/histories/record_graph.py [PREFIX]
    .venv/bin/python tests/histories/record_graph.py children   # only the child scenario

Keep what older code recorded; record again only scenarios you add, or with a PREFIX
(``inline_``: the runs recorded after ``graph-render-inline``) so both branches of a
``workflow.patched`` change keep a history. It starts its own
dev server and worker, runs each scenario to its end and writes every run's history
to ``graph_runs/<scenario>--<workflow id>[--run N].json``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: graph_handlers, the graphs of the tests

from temporalio.testing import WorkflowEnvironment
from test_step_graph import CRITIQUE, HANDLED

from phasegate import SHIPPED_LIBRARY
from phasegate.client.devserver import temporal_binary
from phasegate.client.graphs import GraphClient
from phasegate.domain.graph.messages import Question, StepReport
from phasegate.domain.graph.model import Graph
from phasegate.domain.settings import Settings
from phasegate.temporal import DATA_CONVERTER, SEARCH_ATTRIBUTE_KEYS
from phasegate.worker import build_worker

OUT = HERE / "graph_runs"

CHILD = """\
name: child
entry: work
params:
  depth: {type: int, default: 1}
steps:
  - id: work
    title: Work
    handler: graph_handlers:judge
    outcomes: [quick, full]
    next: {quick: null, full: null}
"""
PARENT = {
    "name": "parent",
    "entry": "delegate",
    "params": {"depth": {"type": "int", "default": 1}},
    "steps": [
        {
            "id": "delegate",
            "title": "Delegate",
            "handler": {"graph": "child"},
            "outcomes": ["quick", "full"],
            "next": {"quick": None, "full": None},
        }
    ],
}


async def _save(graphs: GraphClient, rid: str, name: str) -> None:
    """Every run of ``rid``'s chain, first to last."""
    runs: list[str] = []
    run_id: str | None = (await graphs.temporal.get_workflow_handle(rid).describe()).run_id
    while run_id:
        runs.insert(0, run_id)
        history = await graphs.temporal.get_workflow_handle(rid, run_id=run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
    for n, run in enumerate(runs, 1):
        history = await graphs.temporal.get_workflow_handle(rid, run_id=run).fetch_history()
        suffix = f"--run{n}" if len(runs) > 1 else ""
        (OUT / f"{name}--{rid}{suffix}.json").write_text(history.to_json())
        print(f"recorded {name}--{rid}{suffix}.json ({len(history.events)} events)")


async def main(prefix: str = "") -> None:
    OUT.mkdir(exist_ok=True)
    home = tempfile.mkdtemp(prefix="phasegate-record-")
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        search_attributes=list(SEARCH_ATTRIBUTE_KEYS),
        data_converter=DATA_CONVERTER,
    ) as env:
        settings = Settings(
            task_queue="record-graph",
            home=home,
            library_paths=[SHIPPED_LIBRARY],
            allow_unsigned_approvals=True,
            graph_function_modules=["graph_handlers"],
        )
        library = Path(home) / "lib"
        (library / "graphs").mkdir(parents=True)
        (library / "graphs" / "child.yaml").write_text(CHILD)
        settings = settings.model_copy(
            update={"library_paths": [str(library), *settings.library_paths]}
        )
        graphs = GraphClient(env.client, settings.task_queue)
        with concurrent.futures.ThreadPoolExecutor() as pool:
            async with build_worker(env.client, settings, executor=pool):
                if prefix == "children":  # only the scenario added with graph-child-ids
                    rid = await graphs.start(
                        Graph.model_validate(PARENT), params={"depth": 3}, run_id="graph-parent"
                    )
                    await graphs.result(rid)
                    await _save(graphs, rid, "child_graph")
                    return
                # 1. an outside agent: a refused report, a branch, a question relayed
                rid = await graphs.start(
                    Graph.model_validate(CRITIQUE), params={"depth": 3}, run_id="graph-outside"
                )
                await graphs.step(rid)
                await graphs.report(rid, StepReport(step_id="draft", outcome="full"))
                ask = [Question(id="scope", text="How deep?", options=["quick", "thorough"])]
                await graphs.report(
                    rid, StepReport(step_id="research", outcome="needs_input", questions=ask)
                )
                await graphs.answer(rid, {"scope": "quick"}, as_key=None, approver="lead")
                await graphs.step(rid)
                await graphs.report(rid, StepReport(step_id="research", outcome="ok"))
                await graphs.report(rid, StepReport(step_id="answer", outcome="ok"))
                await graphs.result(rid)
                await _save(graphs, rid, f"{prefix}outside_walk")

                # 2. function handlers looping across continue-as-new
                spec = {**HANDLED, "continue_as_new_after": 3}
                spec["steps"] = [dict(s) for s in HANDLED["steps"]]
                spec["steps"][1]["max_iterations"] = 20
                rid = await graphs.start(
                    Graph.model_validate(spec), params={"target": 5}, run_id="graph-loop"
                )
                await graphs.result(rid)
                await _save(graphs, rid, f"{prefix}handler_loop")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:2]))
