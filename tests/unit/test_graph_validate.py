"""Every code of ``domain.graph.validate`` on a graph that has that problem, with the
message a person reads, and a clean graph that has none."""

from __future__ import annotations

from typing import Any

import pytest

from phasegate.domain.graph.model import Graph, Handler
from phasegate.domain.graph.validate import (
    CODES,
    GraphProblem,
    check_params,
    outcome_values,
    possible_outcomes,
    validate,
)

REVIEW_FIELDS: dict[str, list[Any] | None] = {
    "approved": [True, False],
    "severity": ["none", "minor", "major", "critical"],
    "comments": None,
}


class FakeResolver:
    """Knows one function, one agent (``reviewer``), one workflow type, one graph."""

    def handler_problem(self, handler: Handler) -> str | None:
        known = {
            "function": "pkg.mod:work",
            "agent": "reviewer",
            "session": "spec_execution_v1",
            "graph": "child",
        }
        if handler.target == known[handler.kind]:
            return None
        return f"no {handler.kind} {handler.target!r}"

    def output_fields(self, agent: str) -> dict[str, list[Any] | None] | None:
        return REVIEW_FIELDS if agent == "reviewer" else None


def graph(steps: list[dict[str, Any]], **extra: Any) -> Graph:
    lines = {s["id"]: 10 * (i + 1) for i, s in enumerate(steps)}
    data = {
        "name": "g",
        "entry": steps[0]["id"],
        "source": "graphs/g.yaml",
        **extra,
        "steps": [{"title": s["id"].title(), "line": lines[s["id"]], **s} for s in steps],
    }
    return Graph.model_validate(data)


def problems(g: Graph, code: str) -> list[GraphProblem]:
    return [p for p in validate(g, FakeResolver()) if p.code == code]


def only(g: Graph, code: str) -> GraphProblem:
    found = validate(g, FakeResolver())
    assert [p.code for p in found] == [code], [str(p) for p in found]
    return found[0]


LINEAR = [{"id": "a", "next": {"ok": "b"}}, {"id": "b"}]


def test_a_clean_graph_has_no_problem() -> None:
    g = graph(
        [
            {"id": "plan", "next": {"ok": "review", "fail": None}},
            {
                "id": "review",
                "handler": {"agent": "reviewer", "outcome_field": "severity"},
                "next": {"none": "ship", "minor": "ship", "_default": "plan"},
            },
            {"id": "ship", "handler": "pkg.mod:work", "next": {"iterate": "ship", "ok": None}},
        ],
        params={"depth": {"type": "int", "min": 1, "max": 5, "default": 2}},
    )
    g.steps[2].max_iterations = 3
    assert validate(g, FakeResolver()) == []


def test_every_code_has_a_meaning() -> None:
    assert all(CODES.values())


def test_duplicate_step() -> None:
    g = graph([{"id": "a", "next": {"ok": "b"}}, {"id": "b"}, {"id": "a"}][:2])
    g.steps.append(g.steps[0].model_copy(update={"line": 30}))
    p = only(g, "duplicate_step")
    assert str(p) == (
        "graphs/g.yaml:30: duplicate_step: step id 'a' is used by an earlier step (line 10) "
        "(give each step its own id; edges cannot tell the two apart)"
    )
    assert p.step == "a"


def test_entry_missing_suggests_the_step_meant() -> None:
    p = only(graph(LINEAR, entry="aa"), "entry_missing")
    assert p.message == "entry 'aa' is no step"
    assert p.hint == "did you mean 'a'? set entry: to the first step's id (steps: a, b)"
    assert p.where == "graphs/g.yaml"


def test_unknown_target() -> None:
    g = graph([{"id": "a", "next": {"ok": "b", "fail": "bb"}}, {"id": "b"}])
    p = only(g, "unknown_target")
    assert (p.step, p.outcome, p.where) == ("a", "fail", "graphs/g.yaml:10")
    assert p.message == "outcome 'fail' of step 'a' goes to 'bb', which is no step"
    assert p.hint.startswith("did you mean 'b'? use a step id, or null to end the run")


def test_no_terminal_is_said_once() -> None:
    g = graph([{"id": "a", "next": {"ok": "b"}}, {"id": "b", "next": {"ok": "a"}}])
    p = only(g, "no_terminal")
    assert p.message == "no step ends the run: every step has edges and none goes to null"
    assert "ok: null" in p.hint


def test_an_edge_to_null_is_a_way_out() -> None:
    g = graph([{"id": "a", "next": {"ok": "b"}}, {"id": "b", "next": {"ok": "a", "fail": None}}])
    assert validate(g) == []


def test_unreachable_step() -> None:
    p = only(graph([*LINEAR, {"id": "orphan"}]), "unreachable_step")
    assert p.message == "step 'orphan' is never reached from the entry 'a'"
    assert p.where == "graphs/g.yaml:30"


def test_no_way_out_names_each_step_of_the_trap() -> None:
    g = graph(
        [
            {"id": "a", "next": {"ok": "loop1", "fail": None}},
            {"id": "loop1", "next": {"ok": "loop2"}},
            {"id": "loop2", "next": {"ok": "loop1"}},
        ]
    )
    found = problems(g, "no_way_out")
    assert [p.step for p in found] == ["loop1", "loop2"]
    assert found[0].message == (
        "from step 'loop1' no step that ends the run can be reached: "
        "a run that gets here never finishes"
    )
    assert [p.code for p in validate(g)] == ["no_way_out", "no_way_out"]


def test_uncapped_iterate() -> None:
    g = graph([{"id": "a", "next": {"iterate": "a", "ok": None}}])
    p = only(g, "uncapped_iterate")
    assert p.message == "step 'a' has an iterate edge but no cap: the loop could run forever"
    assert p.hint == "set max_iterations: N on the step, or max_visits: N"
    g.steps[0].max_visits = 5
    assert validate(g) == []


def test_useless_default() -> None:
    g = graph(
        [
            {"id": "a", "handler": {"session": "spec_execution_v1"}, "next": {"ok": "b"}},
            {"id": "b"},
        ]
    )
    g.steps[0].next.update({"fail": None, "_default": "b"})
    p = only(g, "useless_default")
    assert p.message == (
        "step 'a''s _default edge is never taken: every outcome it can end with (ok, fail) "
        "has its own edge"
    )
    assert p.outcome == "_default"


def test_a_default_that_catches_something_is_fine() -> None:
    g = graph([{"id": "a", "next": {"ok": "b", "_default": None}}, {"id": "b"}])
    assert validate(g) == []


def test_impossible_outcome_of_a_session() -> None:
    g = graph(
        [
            {"id": "a", "handler": {"session": "spec_execution_v1"}, "next": {"ok": "b"}},
            {"id": "b"},
        ]
    )
    g.steps[0].next["skip"] = None
    p = only(g, "impossible_outcome")
    assert p.message == (
        "step 'a' has an edge for 'skip', which its session handler cannot end with "
        "(it ends with ok, fail)"
    )
    assert p.hint.startswith("a session step ends ok or fail")


def test_impossible_outcome_from_an_agents_output_schema() -> None:
    g = graph(
        [
            {
                "id": "a",
                "handler": {"agent": "reviewer", "outcome_field": "approved"},
                "next": {"true": None, "false": "b", "maybe": "b"},
            },
            {"id": "b"},
        ]
    )
    p = only(g, "impossible_outcome")
    assert p.outcome == "maybe"
    assert "(it ends with true, false)" in p.message
    assert p.hint == "map the values reviewer's 'approved' can take, or delete the edge"


def test_a_free_text_output_field_allows_any_outcome() -> None:
    g = graph(
        [
            {
                "id": "a",
                "handler": {"agent": "reviewer", "outcome_field": "comments"},
                "next": {"anything": None},
            }
        ]
    )
    assert validate(g, FakeResolver()) == []


def test_declared_outcomes_are_the_possible_ones() -> None:
    g = graph([{"id": "a", "outcomes": ["quick", "full"], "next": {"quick": None, "ok": None}}])
    p = only(g, "impossible_outcome")
    assert p.outcome == "ok"
    assert p.hint == "add it to the step's outcomes: [...], or delete the edge"


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ({"kind": "outside", "target": "x"}, "an outside step names no target"),
        ({"kind": "agent"}, "a agent handler needs a target"),
        ("not a function", "'not a function' is not module:function"),
        ({"session": "Bad Name"}, "'Bad Name' is not a session name"),
        ({"kind": "function", "target": "m:f", "outcome_field": "x"}, "outcome_field is for"),
        ({"graph": "g"}, "graph 'g' runs itself as a child: it would never end"),
    ],
)
def test_bad_handler(handler: Any, message: str) -> None:
    p = only(graph([{"id": "a", "handler": handler}]), "bad_handler")
    assert p.message.startswith(message)
    assert "handler: outside" in p.hint


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("pkg.mod:missing", "step 'a': no function 'pkg.mod:missing'"),
        ({"agent": "nobody"}, "step 'a': no agent 'nobody'"),
        ({"session": "nope_v1"}, "step 'a': no session 'nope_v1'"),
        ({"graph": "nope"}, "step 'a': no graph 'nope'"),
    ],
)
def test_unresolved_handler(handler: Any, message: str) -> None:
    p = only(graph([{"id": "a", "handler": handler}]), "unresolved_handler")
    assert p.message == message
    assert p.hint


def test_without_a_resolver_references_are_checked_for_shape_only() -> None:
    assert validate(graph([{"id": "a", "handler": "pkg.mod:missing"}])) == []


def test_unknown_output_field_lists_the_fields() -> None:
    g = graph(
        [{"id": "a", "handler": {"agent": "reviewer", "outcome_field": "verdict"}, "next": {}}]
    )
    p = only(g, "unknown_output_field")
    assert p.message == (
        "step 'a' maps the reviewer agent's 'verdict' to an outcome, but its output has no "
        "such field"
    )
    assert p.hint == (
        "use one of its fields: approved (true/false), severity (none/minor/major/critical), "
        "comments"
    )


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ({"type": "int", "min": 5, "max": 1}, "params.n: min 5 is greater than max 1"),
        ({"type": "int", "max": 3, "default": 4}, "params.n: default 4 is above max 3"),
        ({"type": "int", "min": 1, "default": 0}, "params.n: default 0 is below min 1"),
        ({"type": "str", "choices": ["a", "b"], "default": "c"}, "not one of the choices"),
        ({"type": "int", "default": "3"}, "params.n: default '3' is not of type int"),
        ({"type": "int", "default": True}, "params.n: default True is not of type int"),
        ({"type": "str", "choices": ["a", 2]}, "params.n: choices [2] are not of type str"),
        ({"type": "int", "choices": [1, 9], "max": 5}, "params.n: choice 9 is above max 5"),
        ({"type": "str", "choices": []}, "params.n: choices is empty"),
        ({"type": "str", "choices": ["a", "a"]}, "params.n: choices lists a value twice"),
        ({"type": "str", "min": 1}, "params.n: min/max bound numbers, but the type is str"),
        ({"required": True, "default": "x"}, "params.n: is required and has a default"),
    ],
)
def test_bad_arg(arg: dict[str, Any], message: str) -> None:
    p = only(graph(LINEAR, params={"n": arg}), "bad_arg")
    assert message in p.message
    assert p.field == "params.n"
    assert p.hint


def test_bad_arg_names_and_sections() -> None:
    g = graph(
        LINEAR,
        params={"bad-name": {}, "x": {}},
        state={"x": {"type": "int"}, "s": {"required": True}},
    )
    found = [p.message for p in problems(g, "bad_arg")]
    assert found == [
        "params.bad-name: 'bad-name' is not a name templates can use",
        "state.s: state is set by the steps, not the starter",
        "'x' is both a parameter and a state field",
    ]


def test_a_float_param_takes_an_integer_default() -> None:
    assert validate(graph(LINEAR, params={"p": {"type": "float", "default": 1, "max": 2}})) == []


def test_bad_gate() -> None:
    child = {"id": "a", "handler": {"session": "spec_execution_v1"}, "gate": {"fields": {"x": {}}}}
    p = only(graph([child]), "bad_gate")
    assert "a gate here is never checked" in p.message
    p = only(graph([{"id": "a", "gate": {}}]), "bad_gate")
    assert p.message == "step 'a''s gate checks nothing: every report passes it"


def test_every_problem_at_once() -> None:
    g = graph(
        [
            {"id": "a", "next": {"ok": "zz", "iterate": "a", "maybe": "b"}},
            {"id": "b", "handler": {"agent": "ghost"}, "next": {"ok": "b"}},
            {"id": "c"},
        ],
        entry="start",
        params={"n": {"type": "int", "min": 2, "max": 1}},
    )
    codes = [p.code for p in validate(g, FakeResolver())]
    assert codes == [
        "entry_missing",
        "no_way_out",  # a: its edges lead only to b, zz and itself
        "no_way_out",  # b: loops on itself
        "unknown_target",
        "impossible_outcome",
        "uncapped_iterate",
        "unresolved_handler",
        "bad_arg",
    ]


def test_possible_outcomes_and_values() -> None:
    step = graph([{"id": "a", "handler": {"agent": "reviewer", "outcome_field": "approved"}}])
    assert possible_outcomes(step.steps[0], FakeResolver()) == ["true", "false"]
    assert possible_outcomes(step.steps[0]) is None  # unknown without a resolver
    assert outcome_values([True, "x", 3, None, "x"]) == ["true", "x", "3"]


def test_check_params() -> None:
    g = graph(
        LINEAR,
        params={
            "mode": {"type": "str", "choices": ["quick", "full"], "default": "quick"},
            "depth": {"type": "int", "required": True, "description": "how deep"},
            "budget": {"type": "float", "min": 0, "max": 1},
        },
    )
    assert check_params(g, {"depth": 2, "budget": 0.5}) == []
    found = [str(p) for p in check_params(g, {"mdoe": "full", "budget": 2, "mode": "slow"})]
    assert found == [
        "g: bad_param: g has no parameter 'mdoe' (did you mean 'mode'?)",
        (
            "g: bad_param: parameter 'mode': value 'slow' is not one of the choices "
            "(use one of 'quick', 'full')"
        ),
        "g: bad_param: parameter 'depth' (how deep) is required (pass depth=VALUE)",
        "g: bad_param: parameter 'budget': value 2 is above max 1 (change the value or the bound)",
    ]


def test_an_agents_outcome_map_decides_which_edges_are_possible() -> None:
    """The run maps an outcome_field's value through outcome_map (Handler.outcome_of);
    validation must judge the edges on the mapped names, not the raw values."""
    from phasegate.domain.graph.model import Graph
    from phasegate.domain.graph.validate import validate

    class Fields:
        def handler_problem(self, handler):  # type: ignore[no-untyped-def]
            return None

        def output_fields(self, agent):  # type: ignore[no-untyped-def]
            return {"approved": [True, False]}

    spec = {
        "name": "mapped",
        "entry": "review",
        "steps": [
            {
                "id": "review",
                "title": "Review",
                "handler": {
                    "agent": "reviewer",
                    "outcome_field": "approved",
                    "outcome_map": {"true": "ok", "false": "iterate"},
                },
                "next": {"ok": None, "iterate": "review"},
                "max_iterations": 3,
            }
        ],
    }
    assert [p.code for p in validate(Graph.model_validate(spec), Fields())] == []
    unmapped = {**spec, "steps": [{**spec["steps"][0], "next": {"yes": None}}]}
    unmapped["steps"][0]["handler"] = {**spec["steps"][0]["handler"], "outcome_map": {}}
    codes = [p.code for p in validate(Graph.model_validate(unmapped), Fields())]
    assert "impossible_outcome" in codes
