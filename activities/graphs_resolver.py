"""Does a step's handler resolve? Answered from the library and the Python path,
without running any user code (the :class:`~phasegate.domain.graph.validate.Resolver`
that ``phasegate graph check`` and graph loading use).

* ``module:function``: the module is found on ``sys.path`` (``importlib.machinery.
  PathFinder``, one package level at a time, so no package ``__init__`` runs) and its
  source parsed with ``ast``: the name must be defined or imported at module level.
  A compiled module (no source) is taken on trust. The worker's path is what counts
  at run time: check where the worker runs, or with the same ``PYTHONPATH``.
* ``agent: NAME``: an LLM agent phasegate runs (planner, analyst, architect,
  reviewer) whose prompt file ``agents/NAME.md`` is in a library on the path; its
  output fields come from its output model (``domain.orchestration.agents``), each
  with the values a ``Literal``, an ``Enum`` or ``bool`` allows.
* ``session: WORKFLOW_TYPE``: a workflow folder of a library on the path.
* ``graph: NAME``: a graph file in the same ``graphs/`` folder, or in a library's.
"""

from __future__ import annotations

import ast
import enum
import importlib.machinery
import importlib.util
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from phasegate import SHIPPED_LIBRARY
from phasegate.domain.graph.model import Handler
from phasegate.domain.orchestration.agents import (
    AnalysisResult,
    PlannerDecision,
    PlanOutput,
    ReviewResult,
)

__all__ = ["AGENT_OUTPUTS", "LibraryResolver", "output_fields"]

AGENT_OUTPUTS: dict[str, type[BaseModel]] = {
    "planner": PlannerDecision,
    "analyst": AnalysisResult,
    "architect": PlanOutput,
    "reviewer": ReviewResult,
}
"""The LLM agents a graph step can dispatch, and the model of each one's output (the
same as ``activities.agents``' agents: that module builds the pydantic-ai agents)."""

_GRAPH_SUFFIXES = (".yaml", ".yml", ".py")


def output_fields(model: type[BaseModel]) -> dict[str, list[Any] | None]:
    """Each field of ``model`` with the values it allows (None: any value)."""
    return {name: _allowed(info.annotation) for name, info in model.model_fields.items()}


def _allowed(annotation: Any) -> list[Any] | None:
    if annotation is bool:
        return [True, False]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [m.value for m in annotation]
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return list(typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        values: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is type(None):
                continue
            allowed = _allowed(arg)
            if allowed is None:
                return None
            values += allowed
        return values
    if origin is typing.Annotated:
        return _allowed(typing.get_args(annotation)[0])
    return None


class LibraryResolver:
    """Resolves handler references against library folders and the Python path."""

    def __init__(
        self,
        library_paths: list[str],
        *,
        graphs_dir: Path | None = None,
        python_path: list[str] | None = None,
    ) -> None:
        """Args:
        library_paths: Library folders searched in order (the shipped one is added last).
        graphs_dir: The folder of the graph being checked (child graphs are found there first).
        python_path: Where modules are found (default ``sys.path``).
        """
        libs = [*library_paths, SHIPPED_LIBRARY]
        self.libraries = [Path(p) for p in dict.fromkeys(os.path.realpath(p) for p in libs)]
        self.graphs_dir = graphs_dir.resolve() if graphs_dir else None
        self.python_path = list(sys.path if python_path is None else python_path)
        self._meta_path = python_path is None  # also ask the installed finders

    def handler_problem(self, handler: Handler) -> str | None:
        """Why ``handler`` does not resolve, or None (see the module docstring)."""
        if handler.kind == "function":
            return self._function(handler.target)
        if handler.kind == "agent":
            return self._agent(handler.target)
        if handler.kind == "session":
            return self._session(handler.target)
        if handler.kind == "graph":
            return self._graph(handler.target)
        return None

    def output_fields(self, agent: str) -> dict[str, list[Any] | None] | None:
        model = AGENT_OUTPUTS.get(agent)
        return output_fields(model) if model else None

    # ------------------------------------------------------------ kinds

    def _libs_text(self) -> str:
        return ", ".join(str(p) for p in self.libraries)

    def _agent(self, name: str) -> str | None:
        if name not in AGENT_OUTPUTS:
            llm = ", ".join(AGENT_OUTPUTS)
            if name == "developer":
                return (
                    "the developer is not an LLM agent: it works through a gated session "
                    f"(use {{session: WORKFLOW_TYPE}}); LLM agents are {llm}"
                )
            extra = " (its prompt file exists, but phasegate has no output model for it)"
            has_prompt = any((lib / "agents" / f"{name}.md").is_file() for lib in self.libraries)
            return f"no LLM agent {name!r}{extra if has_prompt else ''}; agents are {llm}"
        if not any((lib / "agents" / f"{name}.md").is_file() for lib in self.libraries):
            return f"agent {name!r} has no prompt file agents/{name}.md in {self._libs_text()}"
        return None

    def _session(self, workflow_type: str) -> str | None:
        for lib in self.libraries:
            folder = lib / workflow_type
            if (folder / "metadata.json").is_file() or (folder / "phases").is_dir():
                return None
        return f"no workflow type {workflow_type!r} in {self._libs_text()}"

    def _graph(self, name: str) -> str | None:
        folders = [self.graphs_dir] if self.graphs_dir else []
        folders += [lib / "graphs" for lib in self.libraries]
        folders = list(dict.fromkeys(folders))
        for folder in folders:
            if any((folder / f"{name}{s}").is_file() for s in _GRAPH_SUFFIXES):
                return None
        shown = (
            ", ".join(str(f) for f in dict.fromkeys(folders) if f.is_dir()) or "no graphs/ folder"
        )
        return f"no graph {name!r} in {shown}"

    def _function(self, target: str) -> str | None:
        module, _, name = target.partition(":")
        loaded = sys.modules.get(module)
        if loaded is not None:  # imported already (os.path, phasegate's own): no code runs
            return None if hasattr(loaded, name) else f"module {module!r} has no {name!r}"
        spec = self._find_module(module)
        if spec is None:
            return f"module {module!r} is not on the Python path"
        origin = spec.origin
        if not origin or not origin.endswith(".py"):
            return None  # compiled or built-in: its names cannot be read without importing it
        try:
            tree = ast.parse(Path(origin).read_bytes(), filename=origin)
        except (OSError, SyntaxError, ValueError) as exc:
            return f"module {module!r} ({origin}) cannot be read: {exc}"
        if name in _module_names(tree):
            return None
        return f"module {module!r} ({origin}) defines no {name!r} at module level"

    def _find_module(self, dotted: str) -> importlib.machinery.ModuleSpec | None:
        """The spec of ``dotted`` found level by level without importing any package."""
        path: list[str] | None = self.python_path
        spec = None
        parts = dotted.split(".")
        for i in range(len(parts)):
            name = ".".join(parts[: i + 1])
            try:
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                if spec is None and i == 0 and self._meta_path:
                    # An editable install's package is found by a meta path finder, not
                    # on sys.path; a top-level name has no parent, so nothing is imported.
                    spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                return _builtin(dotted) if i == 0 else None
            locations = spec.submodule_search_locations
            path = list(locations) if locations is not None else None
            if path is None and i < len(parts) - 1:
                return None  # a module, not a package: it has no submodules
        return spec


def _builtin(dotted: str) -> importlib.machinery.ModuleSpec | None:
    top = dotted.split(".")[0]
    if top in sys.builtin_module_names:
        return importlib.machinery.ModuleSpec(dotted, None, origin="built-in")
    return None


def _module_names(tree: ast.Module) -> set[str]:
    """Names a module defines or imports at its top level (``if``/``try`` bodies too)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)

    visit(tree.body)
    return names
