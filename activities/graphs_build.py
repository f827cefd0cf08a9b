"""From a graph file's data to a :class:`~phasegate.domain.graph.model.Graph`, keeping
every ``file:line`` and every problem.

A YAML graph is composed with PyYAML's ``SafeLoader`` into its node tree first, so
each step keeps the line it starts on (``StepDef.line``) and each problem the line
of the key it is about; the data is then constructed from those nodes (safe tags
only). A key written twice in one mapping, which YAML would silently resolve to the
last, is a problem; two steps with one id under ``steps:`` both stay, for
``validate`` to report as ``duplicate_step``.

Building is forgiving so that one run reports everything: a step, parameter or key
that does not validate is reported (``bad_field``, ``bad_handler``, ``bad_arg``,
``bad_gate``) and left out, and the rest of the graph is still built and validated.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from phasegate.domain.errors import PhasegateError
from phasegate.domain.gates import GateDefinition, load_gate
from phasegate.domain.graph.model import GRAPH_ID, MAX_STEPS, Arg, Graph, Handler, StepDef
from phasegate.domain.graph.validate import GraphProblem, ProblemCode

__all__ = ["Built", "Lines", "build_graph", "compose_yaml"]

_GRAPH_KEYS = tuple(k for k in Graph.model_fields if k != "source")
_FIELD_CODE: dict[str, ProblemCode] = {
    "handler": "bad_handler",
    "gate": "bad_gate",
    "params": "bad_arg",
    "state": "bad_arg",
}
_ID_HINT = "names are 1-64 lowercase letters, digits, _ and -, starting with a letter"


class Lines:
    """Line numbers (1-based) of a YAML node tree, looked up by key path."""

    def __init__(self, node: Node | None, line: int | None = None) -> None:
        self.node = node
        self.line = line if line is not None else _line(node)

    def at(self, *path: str | int) -> int | None:
        """The line of the deepest node ``path`` reaches (a mapping key's own line)."""
        node, line = self.node, self.line
        for part in path:
            child = _child(node, part)
            if child is None:
                break
            line, node = child
        return line

    def sub(self, *path: str | int) -> Lines:
        node = self.node
        for part in path:
            child = _child(node, part)
            node = child[1] if child else None
        return Lines(node)


def _line(node: Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


def _child(node: Node | None, part: str | int) -> tuple[int | None, Node] | None:
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value == str(part):
                return _line(key), value
    if isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        item = node.value[part]
        return _line(item), item
    return None


@dataclass
class Built:
    """What building found: the graph (None when nothing can be built) and the problems."""

    path: Path
    graph: Graph | None = None
    problems: list[GraphProblem] = field(default_factory=list)
    lines: Lines = field(default_factory=lambda: Lines(None))
    step_lines: dict[int, Lines] = field(default_factory=dict)  # by the line a step starts on

    def locate(self, problem: GraphProblem) -> GraphProblem:
        """``problem`` (from ``validate``) pointed at the line of the key it is about:
        an edge's outcome, a parameter, the entry."""
        head, _, line = problem.where.rpartition(":")
        step = self.step_lines.get(int(line)) if line.isdigit() else None
        at: int | None = None
        if step is not None and problem.outcome:
            at = step.at("next", problem.outcome)
        elif problem.field and problem.step is None:
            at = self.lines.at(*problem.field.split("."))
        elif problem.code == "entry_missing":
            at = self.lines.at("entry")
        if not at or self.lines.node is None:
            return problem
        return problem.model_copy(update={"where": f"{head if step else problem.where}:{at}"})

    def add(
        self,
        code: ProblemCode,
        message: str,
        line: int | None = None,
        *,
        hint: str = "",
        step: str | None = None,
        key: str | None = None,
    ) -> None:
        where = f"{self.path}:{line}" if line else str(self.path)
        name = self.graph.name if self.graph else self.path.stem
        self.problems.append(
            GraphProblem(
                code=code, message=message, graph=name, step=step, field=key, where=where, hint=hint
            )
        )


def compose_yaml(text: str, built: Built) -> tuple[Any, Lines]:
    """The data and node tree of a YAML graph file; a syntax error or a key written
    twice is a problem in ``built`` (data None after a syntax error)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "not valid YAML"
        context = f" ({exc.context})" if exc.context else ""
        built.add(
            "syntax_error",
            f"{problem}{context}",
            mark.line + 1 if mark else None,
            hint="fix the YAML syntax: indent with spaces, quote text holding ': ' or ' #'",
        )
        return None, Lines(None)
    except yaml.YAMLError as exc:
        built.add("syntax_error", str(exc), hint="fix the YAML syntax")
        return None, Lines(None)
    finally:
        loader.dispose()
    _twice(node, built, steps=_child(node, "steps"))
    try:
        return SafeConstructor().construct_document(node) if node else None, Lines(node)
    except yaml.YAMLError as exc:  # e.g. an unhashable key: tell it like a syntax error
        mark = getattr(exc, "problem_mark", None)
        built.add(
            "syntax_error", str(getattr(exc, "problem", exc)), mark.line + 1 if mark else None
        )
        return None, Lines(None)


def _twice(node: Node | None, built: Built, steps: tuple[int | None, Node] | None) -> None:
    """Report every key written twice in one mapping (YAML keeps the last, silently)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, MappingNode):
            seen: set[str] = set()
            for key, value in current.value:
                stack.append(value)
                if not isinstance(key, ScalarNode):
                    continue
                if key.value in seen and not (steps and current is steps[1]):
                    built.add(
                        "bad_field",
                        f"key {key.value!r} is written twice in one mapping; "
                        "YAML would keep only the last",
                        _line(key),
                        hint="delete one of them",
                    )
                seen.add(key.value)
        elif isinstance(current, SequenceNode):
            stack.extend(current.value)


def build_graph(data: Any, lines: Lines, built: Built, *, gate_dir: Path | None = None) -> None:
    """Build ``built.graph`` from a graph file's ``data``, adding every problem found."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        built.add(
            "unreadable",
            f"a graph file holds a mapping (name, entry, steps), not {got}",
            lines.at(),
            hint="see docs: a graph has entry: and steps:",
        )
        return
    raw_steps = _step_items(data.get("steps"), lines, built)
    if raw_steps is None:
        return
    built.lines = lines
    built.step_lines = {n: item[1] for item in raw_steps if (n := item[1].at()) is not None}
    steps = [s for s in (_build_step(*item, built, gate_dir) for item in raw_steps) if s]
    top = {k: v for k, v in data.items() if k != "steps"}
    for key in [k for k in top if k not in _GRAPH_KEYS]:
        close = difflib.get_close_matches(str(key), _GRAPH_KEYS, n=1)
        built.add(
            "bad_field",
            f"unknown key {key!r}",
            lines.at(key),
            hint=f"did you mean {close[0]!r}?"
            if close
            else f"the keys are {', '.join(_GRAPH_KEYS)}",
            key=str(key),
        )
        del top[key]
    name = top.setdefault("name", built.path.stem)
    if name != built.path.stem and built.path.suffix != ".py":
        built.add(
            "bad_field",
            f"name {name!r} differs from the file name {built.path.name!r}",
            lines.at("name"),
            hint=f"graphs are found by file name: rename the file to {name}.yaml, or the name",
            key="name",
        )
    if not steps:
        built.add("bad_field", "the graph has no step that can be built", lines.at("steps"))
        return
    top = _valid_top(top, lines, built)
    top.setdefault("entry", "")
    for _attempt in range(2):  # a key that fails is reported and left out, once
        try:
            built.graph = Graph.model_validate({**top, "steps": steps, "source": str(built.path)})
            return
        except ValidationError as exc:  # other keys, or what no single part shows
            for err in exc.errors():
                message, hint = _friendly(err, Graph)
                loc = [str(p) for p in err["loc"]]
                built.add("bad_field", f"{'.'.join(loc)}: {message}", lines.at(*loc), hint=hint)
                top.pop(loc[0] if loc else "", None)


def _step_items(raw: Any, lines: Lines, built: Built) -> list[tuple[Any, Lines, str | None]] | None:
    """(step data, its lines, id from a mapping key) per step; steps may be a list of
    mappings with ``id:`` or a mapping id → step (the YAML nodes keep both duplicates)."""
    if raw is None:
        built.add("bad_field", "the graph has no steps:", lines.at(), hint="add steps: [...]")
        return None
    node = lines.sub("steps").node
    items: list[tuple[Any, Lines, str | None]] = []
    if isinstance(raw, list):
        items = [(r, lines.sub("steps", i), None) for i, r in enumerate(raw)]
    elif isinstance(raw, dict) and isinstance(node, MappingNode):
        for key, value in node.value:
            data = SafeConstructor().construct_document(value)
            items.append((data, Lines(value, _line(key)), str(key.value)))
    else:
        built.add(
            "bad_field",
            "steps: must be a list of steps (or a mapping of step id to step)",
            lines.at("steps"),
            key="steps",
        )
        return None
    if len(items) > MAX_STEPS:
        built.add(
            "too_large",
            f"the graph has {len(items)} steps; at most {MAX_STEPS} are allowed",
            lines.at("steps"),
            hint="split it: a step can run another graph ({graph: NAME})",
        )
        return None
    return items


def _build_step(
    raw: Any, lines: Lines, key_id: str | None, built: Built, gate_dir: Path | None
) -> StepDef | None:
    line = lines.at()
    if not isinstance(raw, dict):
        built.add("bad_field", "a step is a mapping (id, title, handler, next)", line)
        return None
    raw = dict(raw)
    if key_id is not None:
        raw.setdefault("id", key_id)
    sid = str(raw.get("id", "?"))
    raw.setdefault("title", sid)
    if line is not None or "line" in raw:  # a .py graph's lines come from its source
        raw["line"] = line if line is not None else raw["line"]
    if "gate" in raw:
        raw["gate"] = _gate(raw["gate"], lines, built, sid, gate_dir)
        if raw["gate"] is None:
            del raw["gate"]
    for _attempt in range(3):
        try:
            return StepDef.model_validate(raw)
        except ValidationError as exc:
            raw = _drop_invalid(exc, raw, lines, built, sid)
            if raw is None:
                return None
    return None


def _gate(raw: Any, lines: Lines, built: Built, sid: str, gate_dir: Path | None) -> Any:
    """A step's gate in ``gate-definition.yaml`` format (inline, or a file next to the
    graph), loaded the way a phase's gate is; None after a problem."""
    if isinstance(raw, GateDefinition):  # a .py graph's Graph(...) holds it built
        return raw
    line = lines.at("gate")
    source = f"{built.path}:{line}"
    if isinstance(raw, str) and gate_dir is not None:
        from phasegate.activities.library import load_gate_file, present

        path = (gate_dir / raw).resolve()
        if not path.is_relative_to(gate_dir.parent.resolve()):
            hint = "keep gate files in the graph's library, e.g. graphs/gates/NAME.yaml"
            built.add(
                "bad_gate",
                f"gate file {raw!r} is outside the library",
                line,
                step=sid,
                hint=hint,
                key="gate",
            )
            return None
        if not present(path):
            hint = f"a gate file's path is relative to {gate_dir}"
            built.add(
                "bad_gate", f"gate file {raw!r} not found", line, step=sid, hint=hint, key="gate"
            )
            return None
        try:
            return load_gate_file(path)
        except PhasegateError as exc:
            built.add("bad_gate", exc.message, line, step=sid, hint=exc.hint or "", key="gate")
            return None
    try:
        return load_gate(raw, source=source)
    except PhasegateError as exc:
        where = (exc.where or "").removeprefix(source).strip(": ")
        key = where.split("[")[0]
        at = lines.sub("gate").at(*key.split(".")) if key else line
        msg = f"{where}: {exc.message}" if where else exc.message
        built.add("bad_gate", msg, at, step=sid, hint=exc.hint or "", key="gate")
        return None


def _drop_invalid(
    exc: ValidationError, raw: dict[str, Any], lines: Lines, built: Built, sid: str
) -> dict[str, Any] | None:
    """Report each error of a step and drop what it is about: a single edge or outcome,
    else the key; None when the step cannot be kept (its id is wrong)."""
    raw = dict(raw)
    for err in exc.errors():
        loc = [p for p in err["loc"] if not isinstance(p, str) or not p.startswith("function-")]
        top = str(loc[0]) if loc else ""
        at = lines.at(*loc) if loc else lines.at()
        message, hint = _friendly(err, Handler if top == "handler" else StepDef)
        code = _FIELD_CODE.get(top, "bad_field")
        path = ".".join(map(str, loc))
        built.add(code, f"step {sid!r}: {path}: {message}", at, hint=hint, step=sid, key=path)
        if top == "id":
            return None
        container = raw.get(top)
        if top in ("next", "outcomes") and len(loc) > 1 and isinstance(container, (dict, list)):
            if isinstance(container, dict):
                raw[top] = {k: v for k, v in container.items() if k != loc[1]}
            else:
                raw[top] = [v for i, v in enumerate(container) if i != loc[1]]
        else:
            raw.pop(top, None)
            if top == "title":
                raw["title"] = sid
    return raw


def _valid_top(top: dict[str, Any], lines: Lines, built: Built) -> dict[str, Any]:
    """The graph-wide keys that validate: a bad parameter or state field is reported
    and left out, a bad name or entry reported and replaced."""
    out = dict(top)
    for section in ("params", "state"):
        args = out.get(section)
        if args is None:
            continue
        if not isinstance(args, dict):
            built.add(
                "bad_arg", f"{section}: must be a mapping of name to metadata", lines.at(section)
            )
            out.pop(section)
            continue
        good = {}
        for name, raw in args.items():
            try:
                good[str(name)] = Arg.model_validate({} if raw is None else raw)
            except ValidationError as exc:
                for err in exc.errors():
                    message, hint = _friendly(err, Arg)
                    loc = [section, name, *err["loc"]]
                    built.add(
                        "bad_arg",
                        f"{'.'.join(map(str, loc))}: {message}",
                        lines.at(*loc),
                        hint=hint,
                        key=f"{section}.{name}",
                    )
        out[section] = good
    for key, fallback in (("name", "graph"), ("entry", ""), ("description", "")):
        if key in out and not _valid(key, out[key]):
            hint = _ID_HINT if key != "description" else "at most 2000 characters of text"
            built.add("bad_field", f"{key}: {out[key]!r} is not valid", lines.at(key), hint=hint)
            out[key] = fallback
    return out


def _valid(key: str, value: Any) -> bool:
    if key == "description":
        return isinstance(value, str) and len(value) <= 2000
    return isinstance(value, str) and bool(re.match(GRAPH_ID, value))


def _friendly(err: Any, model: type[BaseModel]) -> tuple[str, str]:
    """A pydantic error as (message, hint) a person acts on."""
    kind, last = err["type"], err["loc"][-1] if err["loc"] else ""
    if kind == "extra_forbidden":
        known = list(model.model_fields)
        close = difflib.get_close_matches(str(last), known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(known)}"
        return f"unknown key {last!r}", hint
    if kind == "missing":
        return f"missing required key {last!r}", f"add {last}:"
    if kind == "string_pattern_mismatch":
        return f"{err['input']!r} is not a valid name", _ID_HINT
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"{message} (got {str(err.get('input'))[:60]!r})", "fix the value"
