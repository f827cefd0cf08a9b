"""Graph files read from disk (``activities.graphs``): YAML with each step's file:line,
``.py`` graphs listed without running them, bounds, and the library resolver."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from phasegate.activities.graphs import (
    LibraryResolver,
    check_file,
    check_path,
    find_graph,
    list_graphs,
    load_graph,
    load_graph_file,
    read_graph,
)
from phasegate.activities.graphs_resolver import output_fields
from phasegate.domain.errors import DefinitionError
from phasegate.domain.graph.model import MAX_STEPS, Handler
from phasegate.domain.orchestration.agents import ReviewResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "graphs"
GOOD = FIXTURES / "good"


def write(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "lib" / "graphs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def codes(path: Path) -> list[tuple[str, int | None]]:
    built = check_file(path, LibraryResolver([]))
    return [(p.code, _line(p.where)) for p in built.problems]


def _line(where: str) -> int | None:
    tail = where.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def test_each_step_keeps_the_line_it_starts_on() -> None:
    built = read_graph(GOOD / "graphs" / "essay-writer.yaml")
    assert built.graph is not None and not built.problems
    lines = {s.id: s.line for s in built.graph.steps}
    assert lines == {
        "planner": 18,
        "research_plan": 25,
        "generate": 30,
        "reflect": 39,
        "research_critique": 44,
    }
    assert built.graph.source.endswith("essay-writer.yaml")


def test_the_real_graphs_load_clean() -> None:
    results = check_path(GOOD, [])
    assert [(b.path.name, [str(p) for p in b.problems]) for b in results] == [
        ("bmad-dev-story.yaml", []),
        ("essay-writer.yaml", []),
        ("floe-choice.yaml", []),
        ("reflection.py", []),
    ]
    bmad = results[0].graph
    assert bmad is not None and bmad.step("complete_story").gate is not None  # type: ignore[union-attr]


def test_steps_as_a_mapping_keep_both_duplicates(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "m.yaml",
        "name: m\nentry: a\nsteps:\n  a:\n    title: A\n    next: {ok: b}\n"
        "  b:\n    title: B\n  a:\n    title: A again\n",
    )
    assert codes(path) == [("duplicate_step", 9)]


def test_an_edge_problem_points_at_its_outcome_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "e.yaml",
        "name: e\nentry: a\nsteps:\n  - id: a\n    title: A\n    next:\n"
        "      ok: b\n      fail: nowhere\n  - id: b\n    title: B\n",
    )
    assert codes(path) == [("unknown_target", 8)]


def test_a_bad_step_is_reported_and_the_rest_still_checked(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "s.yaml",
        "name: s\nentry: a\nsteps:\n  - id: a\n    title: A\n    next: {ok: Bad Target, fail: b}\n"
        "  - id: b\n    title: B\n    next: {ok: c, fail: null}\n",
    )
    assert codes(path) == [("bad_field", 6), ("unknown_target", 9)]


def test_a_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "y.yaml", "name: y\nsteps:\n  - id: a\n   title: [\n")
    built = read_graph(path)
    assert built.graph is None
    assert [p.code for p in built.problems] == ["syntax_error"]
    assert built.problems[0].where == f"{path}:4"


def test_a_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "big.yaml", "# " + "x" * (1 << 20) + "\n")
    [problem] = read_graph(path).problems
    assert problem.code == "too_large"
    assert "1 MiB" in problem.message + problem.hint


def test_too_many_steps_are_refused(tmp_path: Path) -> None:
    steps = "".join(f"  - {{id: s{i}, title: S}}\n" for i in range(MAX_STEPS + 1))
    path = write(tmp_path, "many.yaml", f"name: many\nentry: s0\nsteps:\n{steps}")
    [problem] = read_graph(path).problems
    assert problem.code == "too_large"
    assert (
        problem.message == f"the graph has {MAX_STEPS + 1} steps; at most {MAX_STEPS} are allowed"
    )


SIDE_EFFECT = """
from pathlib import Path
Path({marker!r}).write_text("imported")
GRAPH = {{"name": "side", "description": "Has a side effect", "entry": "a",
          "steps": [{{"id": "a", "title": "A", "next": {{"ok": "b"}}}},
                    {{"id": "b", "title": "B"}}]}}
"""


def test_listing_runs_no_user_code(tmp_path: Path) -> None:
    marker = tmp_path / "imported.txt"
    write(tmp_path, "side.py", SIDE_EFFECT.format(marker=str(marker)))
    write(
        tmp_path,
        "plain.yaml",
        "name: plain\ndescription: Plain\nentry: a\nsteps: [{id: a, title: A}]\n",
    )
    found = {g.name: (g.description, g.steps) for g in list_graphs([str(tmp_path / "lib")])}
    assert found["side"] == ("Has a side effect", 2)
    assert found["plain"] == ("Plain", 1)
    assert not marker.exists()
    built = check_file(tmp_path / "lib" / "graphs" / "side.py")  # checking may import it
    assert marker.exists() and built.graph is not None and not built.problems
    assert [s.line for s in built.graph.steps] == [5, 6]  # where each literal id is


def test_a_py_graph_that_fails_to_import_says_where() -> None:
    built = read_graph(FIXTURES / "broken" / "graphs" / "import_error.py")
    [problem] = built.problems
    assert (problem.code, _line(problem.where)) == ("unreadable", 6)
    assert "RuntimeError: the graph module does I/O at import" in problem.message


def test_load_graph_refuses_a_graph_with_problems(tmp_path: Path) -> None:
    write(tmp_path, "ok.yaml", "name: ok\nentry: a\nsteps: [{id: a, title: A}]\n")
    write(tmp_path, "bad.yaml", "name: bad\nentry: zz\nsteps: [{id: a, title: A}]\n")
    lib = [str(tmp_path / "lib")]
    assert load_graph("ok", lib).name == "ok"
    with pytest.raises(DefinitionError) as err:
        load_graph("bad", lib)
    assert "entry_missing: entry 'zz' is no step" in str(err.value)
    with pytest.raises(DefinitionError, match="graph 'nope' not found"):
        find_graph("nope", lib)


# ---------------------------------------------------------------- the resolver


def test_functions_resolve_from_source_without_importing(tmp_path: Path) -> None:
    pkg = tmp_path / "acme"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('package code ran')\n")
    (pkg / "steps.py").write_text(
        "import os\nfrom json import dumps as lint\n\ndef work(x):\n    return x\n\n"
        "async def later(x):\n    return x\n\nif True:\n    def maybe(x): ...\n"
    )
    r = LibraryResolver([], python_path=[str(tmp_path), *sys.path])

    def problem(target: str) -> str | None:
        return r.handler_problem(Handler(kind="function", target=target))

    assert problem("acme.steps:work") is None
    assert problem("acme.steps:later") is None
    assert problem("acme.steps:lint") is None
    assert problem("acme.steps:maybe") is None
    assert "defines no 'missing' at module level" in (problem("acme.steps:missing") or "")
    assert problem("acme.nothing:work") == "module 'acme.nothing' is not on the Python path"
    assert "acme" not in sys.modules


def test_agents_sessions_and_graphs_resolve_against_the_library() -> None:
    r = LibraryResolver([], graphs_dir=GOOD / "graphs")
    assert r.handler_problem(Handler(kind="agent", target="reviewer")) is None
    developer = r.handler_problem(Handler(kind="agent", target="developer")) or ""
    assert developer.startswith("the developer is not an LLM agent")
    assert r.handler_problem(Handler(kind="session", target="spec_execution_v1")) is None
    assert r.handler_problem(Handler(kind="graph", target="essay-writer")) is None
    assert "no graph 'nope'" in (r.handler_problem(Handler(kind="graph", target="nope")) or "")


def test_an_agents_output_fields_and_their_values() -> None:
    fields = output_fields(ReviewResult)
    assert fields["approved"] == [True, False]
    assert fields["severity"] == ["none", "minor", "major", "critical"]
    assert fields["comments"] is None
    assert fields["replan_request"] is None


def test_graphs_that_run_each_other_are_a_cycle(tmp_path: Path) -> None:
    for name, child in (("a", "b"), ("b", "c"), ("c", "a")):
        write(
            tmp_path,
            f"{name}.yaml",
            f"name: {name}\nentry: s\nsteps:\n  - id: s\n    title: S\n    handler: {{graph: {child}}}\n",
        )
    results = check_path(tmp_path / "lib", [])
    messages = [p.message for b in results for p in b.problems]
    assert messages == [
        "step 's' runs graph 'b', which runs this graph again (a → b → c → a): the runs would never end",
        "step 's' runs graph 'c', which runs this graph again (b → c → a → b): the runs would never end",
        "step 's' runs graph 'a', which runs this graph again (c → a → b → c): the runs would never end",
    ]
    assert [p.code for b in results for p in b.problems] == ["bad_handler"] * 3


def test_load_graph_file_by_path() -> None:
    assert load_graph_file(GOOD / "graphs" / "bmad-dev-story.yaml").entry == "find_story"
    with pytest.raises(DefinitionError) as err:
        load_graph_file(FIXTURES / "broken" / "graphs" / "no-end.yaml")
    assert "graph 'no-end' has 1 problem(s):\n" in err.value.message
    assert "no_terminal: no step ends the run" in err.value.message
