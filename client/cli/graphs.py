"""``phasegate graph list | check | import-asl``: step graphs on this machine (no
server needed).

``graph list`` reads the graphs on the library path without running any of their
code; ``graph check`` reads and validates every graph of a file, a ``graphs/``
folder or a library, printing every problem as ``file:line: code: message (hint)``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phasegate.client.cli._common import EXIT_ERROR, EXIT_OK, JSON, Parser, echo, echo_err
from phasegate.client.cli._render import one_line, table, to_json
from phasegate.client.cli.graph_runs import register as register_runs

if TYPE_CHECKING:
    from phasegate.domain.settings import Settings

__all__ = ["register"]

_CHECK_EPILOG = """\
Each problem is printed as FILE:LINE: CODE: MESSAGE (HINT); the codes are stable
(duplicate_step, entry_missing, unknown_target, no_terminal, unreachable_step,
no_way_out, uncapped_iterate, useless_default, impossible_outcome, bad_handler,
unresolved_handler, unknown_output_field, bad_arg, bad_gate, bad_field,
syntax_error, unreadable, too_large). Handlers resolve against the checked
library, then PHASEGATE_LIBRARY and the shipped library; functions against this
Python's path (run it where the worker runs). A .py graph is imported to check it.

exit codes: 0 every graph is clean; 1 a graph has a problem, or DIR_OR_FILE holds
no graph (as `library check`)."""


def register(sub: Any) -> None:
    """Add ``graph list`` and ``graph check`` to ``sub``."""
    graph = sub.add_parser("graph", help="step graphs: list, check, run, show, report, answer")
    graph_sub = graph.add_subparsers(
        dest="graph_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    graph_sub.add_parser(
        "list",
        parents=[JSON],
        help="graphs on the library path (runs none of their code)",
        description="The graphs in the graphs/ folders of PHASEGATE_LIBRARY and the "
        "shipped library (the first library wins on a name). YAML is read as data and "
        "a .py graph's source is parsed, never imported.",
    ).set_defaults(func=graph_list)
    s = graph_sub.add_parser(
        "check",
        parents=[JSON],
        help="validate graphs and print every problem",
        description="Read and validate every graph of DIR_OR_FILE.",
        epilog=_CHECK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument(
        "target",
        metavar="DIR_OR_FILE",
        help="a graph file, a graphs/ folder, or a library holding graphs/",
    )
    s.set_defaults(func=graph_check)
    s = graph_sub.add_parser(
        "import-asl",
        help="print an AWS States Language state machine as a graph file (YAML)",
        description="Convert an Amazon States Language definition (JSON) into a phasegate "
        "graph, printed as YAML: save it as graphs/NAME.yaml. What is not converted "
        "(Parallel and Map branches) and the graph's problems are listed on stderr.",
    )
    s.add_argument("file", metavar="FILE", help="the state machine definition (JSON)")
    s.add_argument("--name", help="the graph's name (default: from the file name)")
    s.set_defaults(func=graph_import_asl)
    register_runs(graph_sub)


def graph_list(args: argparse.Namespace, settings: Settings) -> int:
    from phasegate.activities.graphs import list_graphs

    graphs = list_graphs(settings.library_paths)
    if args.json:
        echo(
            to_json(
                [
                    {
                        "name": g.name,
                        "steps": g.steps,
                        "description": g.description,
                        "path": str(g.path),
                        "problem": g.problem,
                    }
                    for g in graphs
                ]
            )
        )
        return EXIT_OK
    if not graphs:
        echo("no graphs found (add <name>.yaml to a library's graphs/ folder on PHASEGATE_LIBRARY)")
        return EXIT_OK
    rows = [
        (
            g.name,
            "?" if g.steps is None else g.steps,
            one_line(g.description)[:60] or "-",
            g.path,
        )
        for g in graphs
    ]
    echo(table(("NAME", "STEPS", "DESCRIPTION", "FILE"), rows))
    for g in graphs:
        if g.problem:
            echo(f"note: {g.path}: {one_line(g.problem)} (phasegate graph check {g.path})")
    return EXIT_OK


def graph_check(args: argparse.Namespace, settings: Settings) -> int:
    from phasegate.activities.graphs import check_path

    results = check_path(Path(args.target).expanduser(), settings.library_paths)
    problems = [p for built in results for p in built.problems]
    if args.json:
        echo(
            to_json(
                {
                    "ok": not problems,
                    "graphs": [
                        {
                            "path": str(b.path),
                            "name": b.graph.name if b.graph else b.path.stem,
                            "sha256": b.graph.sha256() if b.graph and not b.problems else None,
                            "steps": len(b.graph.steps) if b.graph else None,
                            "problems": [p.model_dump(mode="json") for p in b.problems],
                        }
                        for b in results
                    ],
                }
            )
        )
    else:
        for p in problems:
            echo(one_line(str(p)))
        bad = sum(1 for b in results if b.problems)
        verdict = "FAILED" if problems else "ok"
        echo(
            f"{args.target}: {verdict} — {len(results)} graph(s), {bad} with problems, "
            f"{len(problems)} problem(s)"
        )
    return EXIT_ERROR if problems else EXIT_OK


def graph_import_asl(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from phasegate.activities.graphs import read_text_bounded
    from phasegate.activities.graphs_asl import asl_to_graph, step_id, to_yaml
    from phasegate.domain.errors import DefinitionError
    from phasegate.domain.graph.model import Graph
    from phasegate.domain.graph.validate import validate

    path = Path(args.file).expanduser()
    try:
        asl = json.loads(read_text_bounded(path))
    except json.JSONDecodeError as exc:
        raise DefinitionError(
            f"not JSON: {exc.msg}", where=f"{path}:{exc.lineno}", hint="give the ASL JSON file"
        ) from None
    name = args.name or step_id(path.name.split(".")[0], set()).replace("_", "-")
    data, notes = asl_to_graph(asl, name)
    echo(f"# converted from {path.name} by phasegate graph import-asl")
    echo(to_yaml(data).rstrip())
    for note in notes:
        echo_err(f"note: {note}")
    for problem in validate(Graph.model_validate(data)):
        echo_err(f"note: {problem.code}: {problem.message} ({problem.hint})")
    return EXIT_OK
