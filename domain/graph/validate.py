"""Validation of a step graph at load: every problem at once, each with a stable code.

:func:`validate` is what ``phasegate graph check`` and graph loading run; there is no
switch that turns it off. Each :class:`GraphProblem` names the graph, the step and
the outcome it is about, where it is (``file:line`` when the graph came from a file)
and what to do. The codes are stable (tools branch on them); :data:`CODES` lists
them with what each means. Codes the loader adds (a file it cannot read, YAML it
cannot parse, a key the format does not have) are listed there too.

Resolving a handler (does the function, the agent, its prompt file, the child
workflow type or graph exist?) needs the library and the worker: a :class:`Resolver`
answers those questions, so this module stays pure. Without one, references are
checked for their shape only.

:func:`check_params` checks a run's parameters against the graph's ``params``.

Pure: no I/O.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from phasegate.domain.graph.model import DEFAULT, Arg, Graph, Handler, StepDef

__all__ = [
    "CODES",
    "GraphProblem",
    "ProblemCode",
    "Resolver",
    "check_params",
    "outcome_values",
    "possible_outcomes",
    "validate",
]

ProblemCode = Literal[
    "duplicate_step",
    "entry_missing",
    "unknown_target",
    "no_terminal",
    "unreachable_step",
    "no_way_out",
    "uncapped_iterate",
    "useless_default",
    "impossible_outcome",
    "bad_handler",
    "unresolved_handler",
    "unknown_output_field",
    "bad_arg",
    "bad_gate",
    "bad_param",
    "bad_field",
    "syntax_error",
    "unreadable",
    "too_large",
]

CODES: dict[str, str] = {
    "duplicate_step": "two steps share an id",
    "entry_missing": "the entry names no step (or the graph has no entry)",
    "unknown_target": "an edge goes to no step",
    "no_terminal": "no step ends the run (none without edges, no edge to null)",
    "unreachable_step": "a step the entry never leads to",
    "no_way_out": "a step from which no end of the run can be reached",
    "uncapped_iterate": "an iterate edge on a step without max_iterations or max_visits",
    "useless_default": "a _default edge where every possible outcome has its own edge",
    "impossible_outcome": "an edge for an outcome the step's handler cannot end with",
    "bad_handler": "a handler reference that is not well formed",
    "unresolved_handler": "a function, agent, prompt, workflow type or graph that does not exist",
    "unknown_output_field": "an agent's outcome_field its output schema does not have",
    "bad_arg": "a parameter or state field whose metadata contradicts itself",
    "bad_gate": "a step's evidence gate that cannot work as written",
    "bad_param": "a run parameter the graph's params refuse (check_params)",
    "bad_field": "a key the graph format does not have, or a value of the wrong type (loader)",
    "syntax_error": "the file is not valid YAML or Python (loader)",
    "unreadable": "the file cannot be read or is not a graph (loader)",
    "too_large": "a graph file over the size or step limit (loader)",
}  # fmt: skip

#: Values an outcome field may take, as the resolver reports them: None is any value.
AllowedValues = list[Any] | None


class GraphProblem(BaseModel):
    """One problem of a graph: what, where and what to do."""

    code: ProblemCode
    message: str = Field(max_length=2000)
    graph: str = Field("", max_length=200)
    step: str | None = None
    outcome: str | None = None
    field: str | None = Field(None, description="the key it is about, e.g. params.depth")
    where: str = Field("", description="file:line when known, else the file, else empty")
    hint: str = ""

    def __str__(self) -> str:
        """``file:line: code: message (hint)``, the line ``graph check`` prints."""
        head = self.where or self.graph or "graph"
        text = f"{head}: {self.code}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class Resolver(Protocol):
    """What validation asks of the world: the library, the worker's functions."""

    def handler_problem(self, handler: Handler) -> str | None:
        """Why ``handler``'s target does not resolve (a well-formed reference), or None."""
        ...

    def output_fields(self, agent: str) -> dict[str, AllowedValues] | None:
        """The agent's output fields, each with the values it allows (None: any), or
        None when the agent is unknown (``handler_problem`` says why)."""
        ...


def outcome_values(allowed: Iterable[Any]) -> list[str]:
    """The outcome names an output field's values become: strings as written, booleans
    ``true``/``false``, numbers as written."""
    out = []
    for value in allowed:
        if isinstance(value, bool):
            out.append("true" if value else "false")
        elif value is not None:
            out.append(str(value))
    return list(dict.fromkeys(out))


def possible_outcomes(step: StepDef, resolver: Resolver | None = None) -> list[str] | None:
    """What ``step``'s handler can end with, or None when any value can come (an agent's
    outcome field without a closed set of values): for an agent with an
    ``outcome_field``, the values its output schema allows, else
    :meth:`StepDef.possible_outcomes`."""
    h = step.handler
    if h.kind == "agent" and h.outcome_field:
        fields = resolver.output_fields(h.target) if resolver else None
        if fields is None or h.outcome_field not in fields:
            return step.possible_outcomes() if step.outcomes else None
        allowed = fields[h.outcome_field]
        if allowed is None:
            return step.possible_outcomes() if h.outcome_map or step.outcomes else None
        # Through outcome_map, as the run maps them (Handler.outcome_of).
        return list(dict.fromkeys(h.outcome_map.get(v, v) for v in outcome_values(allowed)))
    return step.possible_outcomes()


def validate(graph: Graph, resolver: Resolver | None = None) -> list[GraphProblem]:
    """Every problem of ``graph``, in file order (graph-wide ones first).

    Args:
        graph: The graph as loaded.
        resolver: Answers whether handlers resolve and what agents output; without one
            only the shape of references is checked.

    Returns:
        The problems; empty when the graph can run.
    """
    v = _Validator(graph, resolver)
    v.structure()
    for step in graph.steps:
        v.step(step)
    v.args("params", graph.params)
    v.args("state", graph.state)
    for name in sorted(set(graph.params) & set(graph.state)):
        v.add(
            "bad_arg",
            f"{name!r} is both a parameter and a state field",
            field=f"state.{name}",
            hint="templates see both under one name: rename one",
        )
    return v.problems


class _Validator:
    """Collects problems of one graph; each method checks one concern."""

    def __init__(self, graph: Graph, resolver: Resolver | None) -> None:
        self.graph = graph
        self.resolver = resolver
        self.ids = graph.by_id()
        self.problems: list[GraphProblem] = []

    def add(
        self,
        code: ProblemCode,
        message: str,
        *,
        step: StepDef | None = None,
        outcome: str | None = None,
        field: str | None = None,
        hint: str = "",
    ) -> None:
        src = self.graph.source
        where = f"{src}:{step.line}" if src and step and step.line else src
        self.problems.append(
            GraphProblem(
                code=code,
                message=message,
                graph=self.graph.name,
                step=step.id if step else None,
                outcome=outcome,
                field=field,
                where=where,
                hint=hint,
            )
        )

    def _closest(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.ids), n=1)
        return f"did you mean {close[0]!r}? " if close else ""

    def _steps_text(self) -> str:
        ids = list(self.ids)
        return ", ".join(ids[:8]) + (", ..." if len(ids) > 8 else "")

    # ------------------------------------------------------------ graph-wide

    def structure(self) -> None:
        seen: set[str] = set()
        for step in self.graph.steps:
            if step.id in seen:
                first = self.ids[step.id]
                at = f" (line {first.line})" if first.line else ""
                self.add(
                    "duplicate_step",
                    f"step id {step.id!r} is used by an earlier step{at}",
                    step=step,
                    hint="give each step its own id; edges cannot tell the two apart",
                )
            seen.add(step.id)
        entry = self.graph.entry
        if entry not in self.ids:
            what = f"entry {entry!r} is no step" if entry else "the graph has no entry"
            self.add(
                "entry_missing",
                what,
                hint=f"{self._closest(entry) if entry else ''}set entry: to the first step's id "
                f"(steps: {self._steps_text()})",
            )
        ends = [s for s in self.graph.steps if s.terminal or None in s.next.values()]
        if not ends:
            self.add(
                "no_terminal",
                "no step ends the run: every step has edges and none goes to null",
                hint="give the last step no next:, or map an outcome to null: e.g. ok: null",
            )
            return  # every step would also have no way out: one problem says it
        self._reachability()

    def _targets(self, step: StepDef) -> list[str]:
        return [t for t in step.next.values() if t is not None and t in self.ids]

    def _reachability(self) -> None:
        steps = list(self.ids.values())
        if self.graph.entry in self.ids:
            reached = _closure([self.graph.entry], lambda s: self._targets(self.ids[s]))
            for step in steps:
                if step.id not in reached:
                    self.add(
                        "unreachable_step",
                        f"step {step.id!r} is never reached from the entry {self.graph.entry!r}",
                        step=step,
                        hint="add an edge to it from a step that runs, or delete it",
                    )
        into: dict[str, list[str]] = {s.id: [] for s in steps}
        for step in steps:
            for target in self._targets(step):
                into[target].append(step.id)
        ends = [s.id for s in steps if s.terminal or None in s.next.values()]
        can_end = _closure(ends, lambda s: into[s])
        for step in steps:
            if step.id not in can_end:
                self.add(
                    "no_way_out",
                    f"from step {step.id!r} no step that ends the run can be reached: "
                    "a run that gets here never finishes",
                    step=step,
                    hint="add an edge out of its loop to a step that ends the run, "
                    "or to null: e.g. fail: null",
                )

    # ------------------------------------------------------------ one step

    def step(self, step: StepDef) -> None:
        self._handler(step)
        possible = possible_outcomes(step, self.resolver)
        for outcome, target in step.next.items():
            if target is not None and target not in self.ids:
                self.add(
                    "unknown_target",
                    f"outcome {outcome!r} of step {step.id!r} goes to {target!r}, which is no step",
                    step=step,
                    outcome=outcome,
                    hint=f"{self._closest(target)}use a step id, or null to end the run; "
                    f"steps: {self._steps_text()}",
                )
            if outcome != DEFAULT and possible is not None and outcome not in possible:
                self.add(
                    "impossible_outcome",
                    f"step {step.id!r} has an edge for {outcome!r}, which its "
                    f"{step.handler.kind} handler cannot end with "
                    f"(it ends with {', '.join(possible)})",
                    step=step,
                    outcome=outcome,
                    hint=_impossible_hint(step),
                )
        if "iterate" in step.next and step.max_iterations is None and step.max_visits is None:
            self.add(
                "uncapped_iterate",
                f"step {step.id!r} has an iterate edge but no cap: the loop could run forever",
                step=step,
                outcome="iterate",
                hint="set max_iterations: N on the step, or max_visits: N",
            )
        if DEFAULT in step.next and possible is not None and set(possible) <= set(step.next):
            self.add(
                "useless_default",
                f"step {step.id!r}'s _default edge is never taken: every outcome it can end "
                f"with ({', '.join(possible)}) has its own edge",
                step=step,
                outcome=DEFAULT,
                hint="delete the _default edge, or the edges it should stand for",
            )
        self._gate(step)

    def _handler(self, step: StepDef) -> None:
        h = step.handler
        shape = h.shape_problem()
        if shape is None and h.outcome_field and h.kind != "agent":
            shape = f"outcome_field is for agent handlers, not {h.kind}"
        if shape is None and h.kind == "graph" and h.target == self.graph.name:
            shape = f"graph {h.target!r} runs itself as a child: it would never end"
        if shape:
            self.add("bad_handler", shape, step=step, hint=_HANDLER_HINT)
            return
        if self.resolver is None or h.kind == "outside":
            return
        unresolved = self.resolver.handler_problem(h)
        if unresolved:
            self.add(
                "unresolved_handler",
                f"step {step.id!r}: {unresolved}",
                step=step,
                hint=_RESOLVE_HINT[h.kind],
            )
            return
        if h.kind == "agent" and h.outcome_field:
            fields = self.resolver.output_fields(h.target)
            if fields is not None and h.outcome_field not in fields:
                known = ", ".join(
                    f"{name} ({'/'.join(outcome_values(vals))})" if vals else name
                    for name, vals in fields.items()
                )
                self.add(
                    "unknown_output_field",
                    f"step {step.id!r} maps the {h.target} agent's {h.outcome_field!r} "
                    "to an outcome, but its output has no such field",
                    step=step,
                    hint=f"use one of its fields: {known}",
                )

    def _gate(self, step: StepDef) -> None:
        gate = step.gate
        if gate is None:
            return
        if step.handler.kind in ("session", "graph"):
            self.add(
                "bad_gate",
                f"step {step.id!r} runs a child {step.handler.kind}: a gate here is never "
                "checked (the child's own gates decide)",
                step=step,
                hint="move the gate into the child, or delete it",
            )
        elif not (gate.fields or gate.rules or gate.verify or gate.approval.required):
            self.add(
                "bad_gate",
                f"step {step.id!r}'s gate checks nothing: every report passes it",
                step=step,
                hint="declare evidence_schema fields, rules or verify checks, or delete gate:",
            )

    # ------------------------------------------------------------ parameters

    def args(self, section: str, args: Mapping[str, Arg]) -> None:
        for name, arg in args.items():
            for message, hint in arg_problems(name, arg, section):
                self.add(
                    "bad_arg", f"{section}.{name}: {message}", field=f"{section}.{name}", hint=hint
                )


_HANDLER_HINT = (
    "write handler: outside, handler: package.module:function, or one of "
    "{agent: NAME, outcome_field: FIELD}, {session: WORKFLOW_TYPE}, {graph: NAME}"
)
_RESOLVE_HINT = {
    "function": "define the function at module level in a module on the worker's "
    "Python path, or fix the name",
    "agent": "use an LLM agent whose prompt file agents/NAME.md is in a library "
    "on PHASEGATE_LIBRARY or the shipped one",
    "session": "use a workflow type `phasegate library list` shows, or add it to a "
    "library on PHASEGATE_LIBRARY",
    "graph": "use a graph in the same graphs/ folder or one `phasegate graph list` shows",
}


def _impossible_hint(step: StepDef) -> str:
    h = step.handler
    if h.kind == "agent" and h.outcome_field:
        return f"map the values {h.target}'s {h.outcome_field!r} can take, or delete the edge"
    if h.kind in ("session", "agent"):
        return (
            f"a {h.kind} step ends ok or fail: delete the edge, or declare the step's "
            "outcomes: [...] if its handler really ends with others"
        )
    if step.outcomes:
        return "add it to the step's outcomes: [...], or delete the edge"
    return "outcomes are ok, fail, skip and iterate unless the step lists its own outcomes: [...]"


def _closure(start: list[str], step: Any) -> set[str]:
    """Every node reachable from ``start`` following ``step(node)``."""
    seen = set(start)
    todo = list(start)
    while todo:
        for nxt in step(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


# ---------------------------------------------------------------- argument metadata

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
}


def _is_type(value: Any, type_name: str) -> bool:
    if isinstance(value, bool):
        return type_name == "bool"
    return isinstance(value, _PY_TYPES[type_name])


def arg_problems(name: str, arg: Arg, section: str = "params") -> list[tuple[str, str]]:
    """(message, hint) for each contradiction in ``arg``'s metadata."""
    out: list[tuple[str, str]] = []
    if not _NAME.match(name):
        out.append((f"{name!r} is not a name templates can use", "use letters, digits and _"))
    numeric = arg.type in ("int", "float")
    if not numeric and (arg.min is not None or arg.max is not None):
        out.append((f"min/max bound numbers, but the type is {arg.type}", "delete min and max"))
    if arg.min is not None and arg.max is not None and arg.min > arg.max:
        out.append((f"min {arg.min:g} is greater than max {arg.max:g}", "swap them"))
    if arg.choices is not None:
        out += _choice_problems(arg)
    if arg.default is not None:
        out += _value_problems(arg, arg.default, "default")
    if arg.required and arg.default is not None:
        out.append(
            (
                "is required and has a default: a default is never used",
                "delete the default, or required: true",
            )
        )
    if arg.required and section == "state":
        out.append(("state is set by the steps, not the starter", "delete required: true"))
    return out


def _choice_problems(arg: Arg) -> list[tuple[str, str]]:
    choices = arg.choices or []
    if not choices:
        return [("choices is empty: no value is allowed", "list the values, or delete choices")]
    out = []
    wrong = [c for c in choices if not _is_type(c, arg.type)]
    if wrong:
        out.append(
            (
                f"choices {wrong!r} are not of type {arg.type}",
                f"write them as {arg.type} values, or change the type",
            )
        )
    if len(set(map(repr, choices))) != len(choices):
        out.append(("choices lists a value twice", "list each value once"))
    out += [
        (f"choice {c!r} is {why}", "make min/max and choices agree")
        for c in choices
        if (why := _bound_problem(arg, c))
    ]
    return out


def _bound_problem(arg: Arg, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if arg.min is not None and value < arg.min:
        return f"below min {arg.min:g}"
    if arg.max is not None and value > arg.max:
        return f"above max {arg.max:g}"
    return None


def _value_problems(arg: Arg, value: Any, what: str) -> list[tuple[str, str]]:
    if not _is_type(value, arg.type):
        return [
            (
                f"{what} {value!r} is not of type {arg.type}",
                f"write it as {_TYPE_WORDS[arg.type]}, or change the type",
            )
        ]
    why = _bound_problem(arg, value)
    if why:
        return [(f"{what} {value!r} is {why}", "change the value or the bound")]
    if arg.choices is not None and value not in arg.choices:
        shown = ", ".join(map(repr, arg.choices))
        return [(f"{what} {value!r} is not one of the choices", f"use one of {shown}")]
    return []


def check_params(graph: Graph, given: Mapping[str, Any]) -> list[GraphProblem]:
    """Problems of a run's parameters: unknown names, required ones missing, values of
    the wrong type, outside min/max or not among the choices (code ``bad_param``)."""
    out: list[GraphProblem] = []

    def add(message: str, hint: str, name: str) -> None:
        out.append(
            GraphProblem(code="bad_param", message=message, graph=graph.name, field=name, hint=hint)
        )

    for name in given:
        if name not in graph.params:
            close = difflib.get_close_matches(name, list(graph.params), n=1)
            known = ", ".join(graph.params) or "none"
            add(
                f"{graph.name} has no parameter {name!r}",
                f"did you mean {close[0]!r}?" if close else f"its parameters: {known}",
                name,
            )
    for name, arg in graph.params.items():
        if name not in given:
            if arg.required:
                what = f" ({arg.description})" if arg.description else ""
                add(f"parameter {name!r}{what} is required", f"pass {name}=VALUE", name)
            continue
        for message, hint in _value_problems(arg, given[name], "value"):
            add(f"parameter {name!r}: {message}", hint, name)
    return out
