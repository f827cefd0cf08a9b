"""``activities.graphs_asl``: an Amazon States Language state machine as a graph that
validates, with what cannot be converted said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from phasegate.activities.graphs_asl import asl_to_graph, step_id, to_yaml
from phasegate.domain.errors import DefinitionError
from phasegate.domain.graph.model import Graph
from phasegate.domain.graph.validate import validate

ASL = Path(__file__).resolve().parents[1] / "fixtures" / "graphs" / "asl" / "review-loop.asl.json"


def test_a_state_machine_becomes_a_graph_that_validates() -> None:
    data, notes = asl_to_graph(json.loads(ASL.read_text()), "review-loop")
    graph = Graph.model_validate(yaml.safe_load(to_yaml(data)))  # what the file holds
    assert notes == []
    assert validate(graph) == []
    assert graph.entry == "write_draft"
    edges = {s.id: s.next for s in graph.steps}
    assert edges == {
        "write_draft": {"ok": "review", "fail": "give_up"},
        "review": {"ok": "approved"},
        "approved": {"choice_1": "publish", "choice_2": "write_draft", "otherwise": "give_up"},
        "publish": {},
        "give_up": {},
    }
    choice = graph.step("approved")
    assert choice is not None and choice.outcomes == ["choice_1", "choice_2", "otherwise"]
    assert (
        "End choice_2 when ($.round NumericLessThan 3) and ($.approved BooleanEquals false)."
        in (choice.actions)
    )
    assert "Retried up to 2 times on States.Timeout." in graph.steps[0].actions


def test_named_catchers_end_with_their_own_outcomes() -> None:
    asl = {
        "StartAt": "Call",
        "States": {
            "Call": {
                "Type": "Task",
                "End": True,
                "Catch": [{"ErrorEquals": ["Timeout"], "Next": "Later"}],
            },
            "Later": {"Type": "Succeed"},
        },
    }
    data, _ = asl_to_graph(asl, "c")
    call = data["steps"][0]
    assert call["next"] == {"ok": None, "error_1": "later"}
    assert call["outcomes"] == ["ok", "error_1", "fail"]
    assert validate(Graph.model_validate(data)) == []


def test_parallel_branches_are_noted_not_converted() -> None:
    asl = {
        "StartAt": "Both",
        "States": {"Both": {"Type": "Parallel", "Branches": [], "End": True}, "X": {"Type": "Odd"}},
    }
    data, notes = asl_to_graph(asl, "p")
    assert notes == [
        "Both: Parallel branches are not converted; the step stands for them",
        "X: unknown state type 'Odd'; converted as a step that ends the run",
    ]
    assert [p.code for p in validate(Graph.model_validate(data))] == ["unreachable_step"]


def test_state_names_become_unique_ids() -> None:
    taken: set[str] = set()
    assert [step_id(n, taken) for n in ("FirstState", "first state", "Approved?", "3rd")] == [
        "first_state",
        "first_state_2",
        "approved",
        "s_3rd",
    ]


def test_not_a_state_machine() -> None:
    with pytest.raises(DefinitionError, match="not a state machine"):
        asl_to_graph({"Comment": "no states"}, "x")
