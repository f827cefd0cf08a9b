"""Exhaustive tests of a step graph, on a real dev server.

From a graph's parameter declarations, :func:`domains` gives every parameter a finite
domain (:class:`BoundedInt`, :class:`ChoiceSet`, :class:`Constant`) and
:func:`combinations` every combination of them; from its edges, :func:`covering_paths`
a set of paths from the entry to an end that together take every edge of every step
(bounded by the caps). :func:`explore` drives each path under each combination
through a real ``StepGraph`` run, with every handler scripted (the path says which
outcome each step ends with), and reports every run that did not take the path it
was sent down or did not end where it should.

In a pytest test, one line::

    async def test_my_graph_exhaustively(tmp_path):
        (await explore(load_graph("graphs/review.yaml"))).assert_ok()

(``explore`` starts its own dev server and worker unless given a client.)
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client

from phasegate.client.graphs import GraphClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.graph.messages import StepReport
from phasegate.domain.graph.model import DEFAULT, Arg, Graph, Handler, StepDef

__all__ = [
    "BoundedInt",
    "ChoiceSet",
    "Constant",
    "Exploration",
    "Move",
    "combinations",
    "covering_paths",
    "domains",
    "explore",
    "scripted",
]

MAX_COMBINATIONS = 256
MAX_PATH_STEPS = 200


@dataclass(frozen=True)
class BoundedInt:
    """Every integer from ``low`` to ``high`` (by ``step``)."""

    low: int
    high: int
    step: int = 1

    def values(self) -> list[Any]:
        return list(range(self.low, self.high + 1, self.step))


@dataclass(frozen=True)
class ChoiceSet:
    choices: tuple[Any, ...]

    def values(self) -> list[Any]:
        return list(self.choices)


@dataclass(frozen=True)
class Constant:
    value: Any

    def values(self) -> list[Any]:
        return [self.value]


Domain = BoundedInt | ChoiceSet | Constant


def domains(graph: Graph, *, max_range: int = 5) -> dict[str, Domain]:
    """A finite domain per parameter: its choices; a bool's two values; an int range of
    at most ``max_range`` values (wider: the ends and the default); else its default."""
    out: dict[str, Domain] = {}
    for name, arg in graph.params.items():
        out[name] = _domain(arg, max_range)
    return out


def _domain(arg: Arg, max_range: int) -> Domain:
    if arg.choices:
        return ChoiceSet(tuple(arg.choices))
    if arg.type == "bool":
        return ChoiceSet((False, True))
    if arg.type == "int" and arg.min is not None and arg.max is not None:
        low, high = int(arg.min), int(arg.max)
        if high - low + 1 <= max_range:
            return BoundedInt(low, high)
        picks = dict.fromkeys(v for v in (low, arg.default, high) if v is not None)
        return ChoiceSet(tuple(picks))
    return Constant(arg.default)


def combinations(doms: Mapping[str, Domain]) -> list[dict[str, Any]]:
    """Every combination of the domains' values (refused past MAX_COMBINATIONS)."""
    names = list(doms)
    pools = [doms[n].values() for n in names]
    count = 1
    for pool in pools:
        count *= max(len(pool), 1)
    if count > MAX_COMBINATIONS:
        raise PhasegateError(
            f"{count} parameter combinations; at most {MAX_COMBINATIONS} are run",
            hint="pass narrower domains to explore(domains=...)",
        )
    return [
        {n: v for n, v in zip(names, values, strict=True) if v is not None}
        for values in itertools.product(*pools)
    ]


@dataclass(frozen=True)
class Move:
    """One step of a path: end ``step`` with ``outcome`` (which leads to ``to``)."""

    step: str
    outcome: str
    to: str | None


def _edges(step: StepDef) -> Iterator[Move]:
    if step.terminal:
        yield Move(step.id, step.possible_outcomes()[0], None)
        return
    explicit = [o for o in step.next if o != DEFAULT]
    for outcome in explicit:
        yield Move(step.id, outcome, step.next[outcome])
    if DEFAULT in step.next:  # the fallback, taken by a possible outcome with no edge
        spare = [o for o in step.possible_outcomes() if o not in explicit]
        if spare:
            yield Move(step.id, spare[0], step.next[DEFAULT])


def covering_paths(graph: Graph) -> list[list[Move]]:
    """Paths from the entry to an end that together take every edge once at least:
    for each edge not yet taken, the shortest way to its step, the edge, and the
    shortest way from its target to an end. Edges of unreachable steps, or from which
    no end is reachable, are left out (``phasegate graph check`` reports them)."""
    moves = {sid: list(_edges(s)) for sid, s in graph.by_id().items()}
    paths: list[list[Move]] = []
    taken: set[Move] = set()
    for edge in [m for ms in moves.values() for m in ms]:
        if edge in taken:
            continue
        head = _path_to(moves, graph.entry, edge.step)
        tail = [] if edge.to is None else _path_out(moves, edge.to)
        if head is None or tail is None:
            continue
        path = [*head, edge, *tail]
        if len(path) <= MAX_PATH_STEPS:
            paths.append(path)
            taken.update(path)
    return paths


def _path_to(moves: Mapping[str, list[Move]], start: str, goal: str) -> list[Move] | None:
    """The fewest moves from step ``start`` to stand on step ``goal``."""
    queue: deque[tuple[str, list[Move]]] = deque([(start, [])])
    seen = {start}
    while queue:
        at, path = queue.popleft()
        if at == goal:
            return path
        for move in moves.get(at, []):
            if move.to is not None and move.to not in seen:
                seen.add(move.to)
                queue.append((move.to, [*path, move]))
    return None


def _path_out(moves: Mapping[str, list[Move]], start: str) -> list[Move] | None:
    """The fewest moves from step ``start`` through an edge that ends the run."""
    queue: deque[tuple[str, list[Move]]] = deque([(start, [])])
    seen = {start}
    while queue:
        at, path = queue.popleft()
        for move in moves.get(at, []):
            if move.to is None:
                return [*path, move]
            if move.to not in seen:
                seen.add(move.to)
                queue.append((move.to, [*path, move]))
    return None


def scripted(graph: Graph) -> Graph:
    """The graph with every step worked from outside and without evidence gates or
    review schedules, so a driver chooses each outcome and the run takes it (the
    structure is what is under test: edges, fallbacks, caps; handlers, gates and
    reviews have their own tests). Its digest is its own."""
    steps = [
        s.model_copy(update={"handler": Handler(kind="outside"), "gate": None, "review": None})
        for s in graph.steps
    ]
    return graph.model_copy(update={"steps": steps})


@dataclass
class Exploration:
    """What :func:`explore` ran and what went wrong."""

    graph: str
    runs: int = 0
    paths: int = 0
    combinations: int = 0
    failures: list[str] = field(default_factory=list)

    def assert_ok(self) -> None:
        assert not self.failures, f"{self.graph}: {len(self.failures)} of {self.runs} runs " + (
            "went wrong:\n- " + "\n- ".join(self.failures[:20])
        )
        assert self.runs > 0, f"{self.graph}: nothing was run"


async def explore(
    graph: Graph,
    *,
    client: Client | None = None,
    task_queue: str | None = None,
    doms: Mapping[str, Domain] | None = None,
) -> Exploration:
    """Drive every covering path under every parameter combination through a real run."""
    test_graph = scripted(graph)
    paths = covering_paths(graph)
    combos = combinations(doms if doms is not None else domains(graph))
    result = Exploration(graph.name, paths=len(paths), combinations=len(combos))
    async with _graphs(client, task_queue) as graphs:
        for params, path in itertools.product(combos, paths):
            result.runs += 1
            problem = await _drive(graphs, test_graph, params, path)
            if problem:
                steps = " → ".join(f"{m.step}:{m.outcome}" for m in path)
                result.failures.append(f"{params} {steps}: {problem}")
    return result


async def _drive(
    graphs: GraphClient, graph: Graph, params: dict[str, Any], path: Sequence[Move]
) -> str | None:
    rid = await graphs.start(graph, params=params, approvers=None)
    for move in path:
        step = await graphs.step(rid)
        if step is None:
            view = await graphs.status(rid)
            return f"expected step {move.step}; the run is {view.status}: {view.failure}"
        if step.step_id != move.step:
            return f"expected step {move.step}, the run is on {step.step_id}"
        try:
            await graphs.report(rid, StepReport(step_id=move.step, outcome=move.outcome))
        except PhasegateError as exc:
            return f"step {move.step} refused {move.outcome}: {exc}"
    try:
        summary = await graphs.result(rid)
    except PhasegateError as exc:
        return f"the run failed: {exc}"
    taken = [(p.step, p.outcome) for p in summary.path]
    expected = [(m.step, m.outcome) for m in path]
    return None if taken == expected else f"took {taken}"


@contextlib.asynccontextmanager
async def _graphs(client: Client | None, task_queue: str | None) -> AsyncIterator[GraphClient]:
    if client is not None:
        yield GraphClient(client, task_queue or "phasegate")
        return
    from phasegate.testing._server import dev_server, make_settings, running_worker

    with tempfile.TemporaryDirectory(prefix="phasegate-explore-") as home:
        async with dev_server() as env:
            settings = make_settings(home, allow_unsigned_approvals=True)
            async with running_worker(env.client, settings):
                yield GraphClient(env.client, settings.task_queue)
