"""Step graph files: listed, found by name, read, checked and loaded.

A library holds its graphs in ``graphs/``: ``<name>.yaml`` (or ``.yml``) files, and
Python modules ``<name>.py`` exposing one ``GRAPH`` constant (a
:class:`~phasegate.domain.graph.model.Graph` or a dict of the same shape). The first
library on the path (``PHASEGATE_LIBRARY``, then the shipped ``library/``) holding a
graph of a name wins, as for workflows.

* :func:`list_graphs` runs no user code: YAML is read as data and a ``.py`` graph's
  name, description and step count come from its source (``ast``), never an import.
* :func:`read_graph` builds the graph a file holds (``activities.graphs_build``); a
  ``.py`` graph is imported for it (it is code the library's owner wrote).
* :func:`check_file` / :func:`check_path` read and :func:`validate` each graph with
  a :class:`LibraryResolver` (``phasegate graph check``).
* :func:`load_graph` is what a run starts from: the graph by name, refused with every
  problem when it has any (there is no switch that turns validation off).

A file over :data:`GRAPH_FILE_LIMIT` or with more than ``MAX_STEPS`` steps is
refused (``too_large``); every problem names ``file:line`` when known.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import phasegate.activities._safe_read as safe_read
from phasegate import SHIPPED_LIBRARY
from phasegate.activities.graphs_build import Built, Lines, build_graph, compose_yaml
from phasegate.activities.graphs_resolver import LibraryResolver
from phasegate.domain.errors import DefinitionError
from phasegate.domain.graph.model import GRAPH_ID, Graph
from phasegate.domain.graph.validate import Resolver, validate

__all__ = [
    "GRAPH_FILE_LIMIT",
    "GRAPH_SUFFIXES",
    "Built",
    "GraphInfo",
    "LibraryResolver",
    "check_file",
    "check_path",
    "find_graph",
    "graph_dirs",
    "graph_files",
    "list_graphs",
    "load_graph",
    "load_graph_file",
    "read_graph",
    "read_text_bounded",
]

GRAPH_FILE_LIMIT = safe_read.MiB
GRAPH_SUFFIXES = (".yaml", ".yml", ".py")


@dataclass(frozen=True)
class GraphInfo:
    """A graph as listing shows it (read without running its code)."""

    name: str
    description: str
    steps: int | None  # None: a .py graph whose steps are not a literal list
    path: Path
    problem: str | None = None  # why it cannot be listed fully


def graph_dirs(library_paths: list[str]) -> list[Path]:
    """The ``graphs/`` folders of the libraries, in search order (shipped last)."""
    libs = list(dict.fromkeys([*library_paths, SHIPPED_LIBRARY]))
    return [Path(lib) / "graphs" for lib in libs if (Path(lib) / "graphs").is_dir()]


def graph_files(folder: Path) -> list[Path]:
    """The graph files of one folder, by name (``_private.py`` and ``__init__.py`` are
    helpers, not graphs)."""
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix in GRAPH_SUFFIXES and not p.name.startswith(("_", "."))
    )


def find_graph(name: str, library_paths: list[str]) -> Path:
    """The file of graph ``name`` on the library path.

    Raises:
        DefinitionError: No library holds it; the hint lists the graphs there are.
    """
    if re.match(GRAPH_ID, name):
        for folder in graph_dirs(library_paths):
            for suffix in GRAPH_SUFFIXES:
                if (folder / f"{name}{suffix}").is_file():
                    return folder / f"{name}{suffix}"
    known = ", ".join(g.name for g in list_graphs(library_paths)) or "none"
    raise DefinitionError(
        f"graph {name!r} not found",
        where="graph",
        hint=f"graphs: {known}; add <name>.yaml to a library's graphs/ folder on PHASEGATE_LIBRARY",
    )


# ---------------------------------------------------------------- listing (no user code)


def list_graphs(library_paths: list[str]) -> list[GraphInfo]:
    """Every graph on the library path (the first library wins on a name clash), read
    without running any of its code."""
    seen: dict[str, GraphInfo] = {}
    for folder in graph_dirs(library_paths):
        for path in graph_files(folder):
            seen.setdefault(path.stem, _info(path))
    return list(seen.values())


def _info(path: Path) -> GraphInfo:
    try:
        text = _read(path)
    except DefinitionError as exc:
        return GraphInfo(path.stem, "", None, path, exc.message)
    if path.suffix == ".py":
        return _py_info(path, text)
    built = Built(path)
    data, _ = compose_yaml(text, built)
    if not isinstance(data, dict):
        return GraphInfo(path.stem, "", None, path, "not a graph: " + _first(built))
    steps = data.get("steps")
    description = data.get("description")
    return GraphInfo(
        str(data.get("name") or path.stem),
        description if isinstance(description, str) else "",
        len(steps) if isinstance(steps, (list, dict)) else None,
        path,
        _first(built) or None,
    )


def _first(built: Built) -> str:
    if not built.problems:
        return ""
    p = built.problems[0]
    line = p.where.rpartition(":")[2]
    return f"{'line ' + line + ': ' if line.isdigit() else ''}{p.code}: {p.message}"


def _py_info(path: Path, text: str) -> GraphInfo:
    """Name, description and step count of a ``.py`` graph from its source: the literal
    arguments of ``GRAPH = Graph(...)`` or the literal keys of ``GRAPH = {...}``."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        return GraphInfo(path.stem, "", None, path, f"syntax error at line {exc.lineno}")
    value = _graph_value(tree)
    if value is None:
        return GraphInfo(path.stem, "", None, path, "defines no GRAPH = ... at module level")
    fields: dict[str, ast.expr] = {}
    if isinstance(value, ast.Call):
        fields = {k.arg: k.value for k in value.keywords if k.arg}
    elif isinstance(value, ast.Dict):
        fields = {
            k.value: v
            for k, v in zip(value.keys, value.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }

    def literal(key: str) -> Any:
        node = fields.get(key)
        return node.value if isinstance(node, ast.Constant) else None

    steps = fields.get("steps")
    count = len(steps.elts) if isinstance(steps, (ast.List, ast.Tuple)) else None
    name, description = literal("name"), literal("description")
    return GraphInfo(
        name if isinstance(name, str) else path.stem,
        description if isinstance(description, str) else "",
        count,
        path,
    )


def _graph_value(tree: ast.Module) -> ast.expr | None:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "GRAPH" for t in targets):
            return value
    return None


# ---------------------------------------------------------------- reading


def read_text_bounded(path: Path) -> str:
    """A graph (or ASL) file's text, refused over :data:`GRAPH_FILE_LIMIT`.

    Raises:
        DefinitionError: Absent, not a regular UTF-8 file, or too large.
    """
    return _read(path)


def _read(path: Path) -> str:
    """The file's text, refused over :data:`GRAPH_FILE_LIMIT` (``DefinitionError``)."""
    try:
        return safe_read.read_text(
            path,
            limit=GRAPH_FILE_LIMIT,
            what="graph file",
            hint=f"a graph file must be a regular UTF-8 file of at most "
            f"{safe_read.size_text(GRAPH_FILE_LIMIT)}; split a large graph into "
            "graphs that run one another ({graph: NAME})",
        )
    except FileNotFoundError:
        raise DefinitionError("file not found", where=str(path)) from None


def read_graph(path: Path) -> Built:
    """The graph ``path`` holds, built with every problem reading found (not yet
    validated); ``built.graph`` is None when nothing could be built."""
    built = Built(path)
    try:
        size = path.stat().st_size
        text = _read(path)
    except OSError as exc:
        built.add("unreadable", f"cannot read it: {exc.strerror or exc}")
        return built
    except DefinitionError as exc:
        built.add(
            "too_large" if size > GRAPH_FILE_LIMIT else "unreadable",
            exc.message,
            hint=exc.hint or "",
        )
        return built
    if path.suffix == ".py":
        data, lines = _import_graph(path, text, built)
    else:
        data, lines = compose_yaml(text, built)
    if built.problems and data is None:
        return built
    build_graph(data, lines, built, gate_dir=path.parent)
    return built


def _import_graph(path: Path, text: str, built: Built) -> tuple[Any, Lines]:
    """Import a ``.py`` graph (its code runs) and take its ``GRAPH``; step lines come
    from the source (each literal ``id=``/``"id":`` of a step)."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        built.add("syntax_error", exc.msg, exc.lineno, hint="fix the Python syntax")
        return None, Lines(None)
    name = f"phasegate_graphs_{abs(hash(str(path.resolve())))}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        built.add("unreadable", "cannot be imported as a Python module")
        return None, Lines(None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pydantic models defined in it resolve their names here
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - anything the user's module raises is a problem
        sys.modules.pop(name, None)
        line = _error_line(exc, path)
        built.add(
            "unreadable",
            f"importing it raised {type(exc).__name__}: {exc}",
            line,
            hint="fix the module so that importing it only defines GRAPH",
        )
        return None, Lines(None)
    graph = getattr(module, "GRAPH", None)
    if isinstance(graph, Graph):
        gates = [s.gate for s in graph.steps]
        graph = graph.model_dump(exclude={"source"}, exclude_defaults=True)
        for step, gate in zip(graph["steps"], gates, strict=True):
            if gate is not None:
                step["gate"] = gate  # already a GateDefinition, not the file format
    if not isinstance(graph, dict):
        built.add(
            "unreadable",
            f"GRAPH is {type(graph).__name__ if graph is not None else 'not defined'}",
            hint="define GRAPH = Graph(...) (phasegate.domain.graph.model) or a dict at module level",
        )
        return None, Lines(None)
    return _with_py_lines(graph, tree), Lines(None)


def _with_py_lines(graph: dict[str, Any], tree: ast.Module) -> dict[str, Any]:
    """Each step's ``line``: where its literal id is written in the module."""
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        pairs: list[tuple[object, ast.expr]]
        if isinstance(node, ast.Call):
            pairs = [(k.arg, k.value) for k in node.keywords]
        elif isinstance(node, ast.Dict):
            pairs = [
                (k.value if isinstance(k, ast.Constant) else None, v)
                for k, v in zip(node.keys, node.values, strict=True)
            ]
        else:
            continue
        for key, value in pairs:
            if key == "id" and isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.setdefault(value.value, node.lineno)
    steps = graph.get("steps")
    if isinstance(steps, list):
        graph = {
            **graph,
            "steps": [
                {**s, "line": found.get(str(s.get("id")))} if isinstance(s, dict) else s
                for s in steps
            ],
        }
    return graph


def _error_line(exc: BaseException, path: Path) -> int | None:
    if isinstance(exc, SyntaxError):
        return exc.lineno
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


# ---------------------------------------------------------------- checking and loading


def check_file(path: Path, resolver: Resolver | None = None) -> Built:
    """Read ``path`` and validate the graph: every problem, reading's and validation's."""
    built = read_graph(path)
    if built.graph is not None:
        built.problems += [built.locate(p) for p in validate(built.graph, resolver)]
    built.problems.sort(key=lambda p: _line_of(p.where))  # stable: file order, then kind
    return built


def _line_of(where: str) -> int:
    line = where.rpartition(":")[2]
    return int(line) if line.isdigit() else 0


def check_path(target: Path, library_paths: list[str]) -> list[Built]:
    """Check one graph file, a ``graphs/`` folder, or a library holding one.

    Handlers resolve against the library the graphs are in, then ``library_paths``.

    Raises:
        DefinitionError: ``target`` is none of those, or holds no graph file.
    """
    if target.is_file():
        files, folder = [target], target.parent
    elif (target / "graphs").is_dir():
        folder = target / "graphs"
        files = graph_files(folder)
    elif target.is_dir():
        folder, files = target, graph_files(target)
    else:
        raise DefinitionError(
            "no such file or folder",
            where=str(target),
            hint="name a graph file or a graphs/ folder",
        )
    if not files:
        raise DefinitionError(
            "no graph files (<name>.yaml, <name>.yml or <name>.py) here",
            where=str(target),
            hint="name a library's graphs/ folder, or a graph file",
        )
    own = [str(folder.parent)] if folder.name == "graphs" else []
    resolver = LibraryResolver([*own, *library_paths], graphs_dir=folder)
    results = [check_file(path, resolver) for path in files]
    _child_cycles(results)
    return results


def _child_cycles(results: list[Built]) -> None:
    """A graph that runs itself through other graphs (a → b → a) never ends: report
    each step whose child graph leads back to its own graph (``bad_handler``)."""
    children: dict[str, set[str]] = {}
    for built in results:
        if built.graph is not None:
            kids = {s.handler.target for s in built.graph.steps if s.handler.kind == "graph"}
            children[built.graph.name] = kids - {built.graph.name}  # itself: validate says so

    def leads_back(start: str, home: str) -> list[str] | None:
        path, todo, seen = {start: [start]}, [start], {start}
        while todo:
            node = todo.pop()
            for nxt in sorted(children.get(node, ())):
                if nxt == home:
                    return path[node]
                if nxt not in seen:
                    seen.add(nxt)
                    path[nxt] = [*path[node], nxt]
                    todo.append(nxt)
        return None

    for built in results:
        graph = built.graph
        if graph is None:
            continue
        for step in graph.steps:
            if step.handler.kind != "graph" or step.handler.target == graph.name:
                continue
            chain = leads_back(step.handler.target, graph.name)
            if chain:
                loop = " → ".join([graph.name, *chain, graph.name])
                built.add(
                    "bad_handler",
                    f"step {step.id!r} runs graph {step.handler.target!r}, which runs this "
                    f"graph again ({loop}): the runs would never end",
                    step.line,
                    step=step.id,
                    hint="break the cycle: let one of the graphs end instead of running the other",
                )


def load_graph(name: str, library_paths: list[str]) -> Graph:
    """Graph ``name`` from the library path, validated: what a run starts from.

    Raises:
        DefinitionError: It is not found, or it has problems (all of them listed, one
            per line, in the message).
    """
    return load_graph_file(find_graph(name, library_paths), library_paths)


def load_graph_file(path: Path | str, library_paths: list[str] | None = None) -> Graph:
    """The graph in the file at ``path``, validated (handlers resolved against its own
    library, then ``library_paths``).

    Raises:
        DefinitionError: Every problem of the file, one per line, in the message.
    """
    path = Path(path)
    own = [str(path.parent.parent)] if path.parent.name == "graphs" else []
    resolver = LibraryResolver([*own, *(library_paths or [])], graphs_dir=path.parent)
    built = check_file(path, resolver)
    if built.problems or built.graph is None:
        listed = "\n".join(f"  {p}" for p in built.problems)
        raise DefinitionError(
            f"graph {built.graph.name if built.graph else path.stem!r} has "
            f"{len(built.problems)} problem(s):\n{listed}",
            where=str(path),
            hint=f"fix them; `phasegate graph check {path}` lists them",
        )
    return built.graph
