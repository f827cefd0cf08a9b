"""phasegate.testing.graphs: every parameter combination and a set of paths covering
every edge, driven through real StepGraph runs; and a broken graph caught by it."""

from __future__ import annotations

import itertools

import pytest
from test_step_graph import CRITIQUE, HANDLED

from phasegate.domain.graph.model import Graph
from phasegate.testing.graphs import (
    BoundedInt,
    ChoiceSet,
    Constant,
    combinations,
    covering_paths,
    domains,
    explore,
)


def _edges(graph: Graph) -> set[tuple[str, str]]:
    return {(s.id, o) for s in graph.steps for o in s.next} | {
        (s.id, "end") for s in graph.steps if s.terminal
    }


@pytest.mark.parametrize("spec", [CRITIQUE, HANDLED], ids=["critique", "handled"])
def test_the_paths_take_every_edge_and_end(spec) -> None:
    graph = Graph.model_validate(spec)
    paths = covering_paths(graph)
    covered = set()
    for path in paths:
        assert path[0].step == graph.entry and path[-1].to is None
        for a, b in itertools.pairwise(path):
            assert a.to == b.step  # a walk, not a bag of edges
        for m in path:
            step = graph.step(m.step)
            assert step is not None
            explicit = m.outcome in step.next
            covered.add((m.step, m.outcome if explicit or step.terminal else "_default"))
    want = {(s, o) for s, o in _edges(graph)}
    got = {(s, "end" if graph.step(s).terminal else o) for s, o in covered}  # type: ignore[union-attr]
    assert want <= got, want - got


def test_domains_and_combinations_come_from_the_declarations() -> None:
    graph = Graph.model_validate(
        {
            **CRITIQUE,
            "params": {
                "depth": {"type": "int", "min": 1, "max": 3},
                "wide": {"type": "int", "min": 0, "max": 100, "default": 10},
                "mode": {"type": "str", "choices": ["quick", "full"]},
                "strict": {"type": "bool"},
                "name": {"type": "str", "default": "x"},
            },
        }
    )
    doms = domains(graph)
    assert doms["depth"] == BoundedInt(1, 3) and doms["wide"] == ChoiceSet((0, 10, 100))
    assert doms["mode"] == ChoiceSet(("quick", "full")) and doms["name"] == Constant("x")
    assert len(combinations(doms)) == 3 * 3 * 2 * 2 * 1


async def test_shipped_style_graphs_run_exhaustively(env, settings_for, run_worker) -> None:
    settings = settings_for()
    async with run_worker(settings):
        for spec in (CRITIQUE, HANDLED):
            graph = Graph.model_validate(spec)
            result = await explore(graph, client=env.client, task_queue=settings.task_queue)
            result.assert_ok()
            assert result.runs == result.paths * result.combinations >= 3


async def test_a_cap_the_paths_cannot_live_with_is_reported(env, settings_for, run_worker) -> None:
    spec = {
        "name": "capped",
        "entry": "a",
        "steps": [
            {"id": "a", "title": "A", "next": {"ok": "b", "fail": "a"}, "max_visits": 1},
            {"id": "b", "title": "B"},
        ],
    }
    settings = settings_for()
    async with run_worker(settings):
        result = await explore(
            Graph.model_validate(spec), client=env.client, task_queue=settings.task_queue
        )
    assert result.failures and "more than its cap of 1 visits" in result.failures[0]
    with pytest.raises(AssertionError, match="went wrong"):
        result.assert_ok()
