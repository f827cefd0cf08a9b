"""A step graph as data: steps, the outcome each can end with, and the edge each
outcome takes (an outcome → next-step map, not if-chains), so a graph can be
validated at load (``validate``), drawn (``views.mermaid``), tested exhaustively
(``phasegate.testing.graphs``) and run durably (``workflows/step_graph.py``).

A graph arrives as YAML (a library's ``graphs/`` folder) or as a Python module's
``GRAPH`` constant; both become the same :class:`Graph`, which travels whole in
the run's start input with its SHA-256, so an edit never changes a running graph.

Pure: no I/O; loading and resolving handlers are activities' work.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from phasegate.domain.gates import GateDefinition

__all__ = [
    "DEFAULT",
    "GRAPH_ID",
    "MAX_STEPS",
    "MAX_VISITS",
    "NEEDS_INPUT",
    "STANDARD_OUTCOMES",
    "Arg",
    "Finding",
    "Graph",
    "Handler",
    "OutcomeName",
    "ReviewSchedule",
    "StepDef",
    "StepId",
]

MAX_STEPS = 200
STEPS_BEFORE_CONTINUE = 200  # a graph's continue_as_new_after, unless it says otherwise
MAX_VISITS = 1000  # a step's visit cap, at most (a loop runs continue-as-new past a few)
MAX_ACTIONS_CHARS = 20_000
MAX_ARGS = 50
MAX_OUTCOMES = 20
GRAPH_ID = r"^[a-z][a-z0-9_-]{0,63}$"

#: What every handler may end a step with; a step may declare others (``outcomes``).
STANDARD_OUTCOMES = ("ok", "fail", "skip", "iterate")
#: The fallback edge: taken by an outcome the step's ``next`` names no edge for.
DEFAULT = "_default"
#: Not an edge: the step asks a person (question relay) and runs again with the answers.
NEEDS_INPUT = "needs_input"

StepId = Annotated[str, StringConstraints(pattern=GRAPH_ID)]
OutcomeName = Annotated[str, StringConstraints(pattern=r"^(_default|[a-z][a-z0-9_]{0,39})$")]
_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class Arg(BaseModel):
    """One parameter of a graph (fixed for a run) or one field of its step state
    (changed by the steps), with what a person, a tool and the exhaustive tests need
    to know about it."""

    model_config = ConfigDict(extra="forbid")

    description: str = Field("", max_length=500)
    type: Literal["int", "float", "str", "bool"] = "str"
    default: int | float | str | bool | None = None
    min: float | None = None
    max: float | None = None
    choices: list[int | float | str | bool] | None = Field(None, max_length=50)
    required: bool = False


class Handler(BaseModel):
    """Who works a step. Exactly one kind:

    - ``outside``: an outside agent reads the step and reports it (``report_step``);
    - ``function``: ``module:function``, run as an activity on the worker;
    - ``agent``: an LLM agent of the library's ``agents/``, its typed output mapped
      to an outcome through ``outcome_field``;
    - ``session``: a child ``GatedSession`` of that workflow type (completed → ``ok``,
      abandoned or failed → ``fail``);
    - ``graph``: a child ``StepGraph`` (its final outcome is this step's).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["outside", "function", "agent", "session", "graph"] = "outside"
    target: str = Field("", max_length=200, description="function, agent, type or graph name")
    outcome_field: str | None = Field(
        None,
        max_length=64,
        description="agent: the output field whose value is the outcome (default: ok)",
    )
    outcome_map: dict[Annotated[str, StringConstraints(max_length=64)], OutcomeName] = Field(
        default_factory=dict,
        max_length=MAX_OUTCOMES,
        description="agent: the outcome_field's value (as text, lowercase) → outcome",
    )
    model: str | None = Field(
        None, max_length=200, description="agent: a model id (default: the worker's for it)"
    )

    def outcome_of(self, value: object) -> str:
        """The outcome an agent's ``outcome_field`` value means (through ``outcome_map``)."""
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return self.outcome_map.get(text, text)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """``handler: outside``, ``handler: pkg.mod:fn``, ``{agent: name}``, ``{session:
        type}``, ``{graph: name}``: the forms a graph file writes."""
        if data is None:
            return {"kind": "outside"}
        if isinstance(data, str):
            if data == "outside":
                return {"kind": "outside"}
            return {"kind": "function", "target": data}
        if isinstance(data, dict) and "kind" not in data:
            for kind in ("agent", "session", "graph", "function"):
                if kind in data:
                    rest = {k: v for k, v in data.items() if k != kind}
                    return {"kind": kind, "target": data[kind], **rest}
        return data

    def shape_problem(self) -> str | None:
        """What is wrong with the reference as written (resolving it is a check that
        needs the library and the worker), or None."""
        if self.kind == "outside":
            return "an outside step names no target" if self.target else None
        if not self.target:
            return f"a {self.kind} handler needs a target"
        if self.kind == "function" and not _FUNCTION.match(self.target):
            return f"{self.target!r} is not module:function"
        if self.kind != "function" and not re.match(GRAPH_ID, self.target):
            return f"{self.target!r} is not a {self.kind} name (lowercase, digits, _ and -)"
        return None


class Finding(BaseModel):
    """One finding of a quality review."""

    model_config = ConfigDict(extra="forbid")

    severity: Literal["must", "should", "could"]
    text: str = Field(min_length=1, max_length=2000)


class ReviewSchedule(BaseModel):
    """Which findings of a quality review block, by iteration of the dispatch loop: at
    first every finding; then MUST and SHOULD; later only MUST (so a loop converges)."""

    model_config = ConfigDict(extra="forbid")

    all_until: int = Field(2, ge=0, le=100, description="iterations 1..N: every finding blocks")
    must_should_until: int = Field(4, ge=0, le=100, description="then MUST and SHOULD")

    def blocking(self, iteration: int) -> tuple[str, ...]:
        """The severities that block at ``iteration`` (1-based)."""
        if iteration <= self.all_until:
            return ("must", "should", "could")
        if iteration <= self.must_should_until:
            return ("must", "should")
        return ("must",)

    def outcome(self, iteration: int, findings: list[Finding]) -> tuple[str, list[Finding]]:
        """``iterate`` with the blocking findings while any block at ``iteration``, else
        ``ok`` (the rest are advice)."""
        blocking = [f for f in findings if f.severity in self.blocking(iteration)]
        return ("iterate" if blocking else "ok"), blocking


class StepDef(BaseModel):
    """One step: what to do (``actions``, markdown rendered with Jinja2 sandboxed
    against the run's params and state), who does it, and where each outcome goes."""

    model_config = ConfigDict(extra="forbid")

    id: StepId
    title: str = Field(min_length=1, max_length=200)
    actions: str = Field("", max_length=MAX_ACTIONS_CHARS)
    handler: Handler = Field(default_factory=Handler)
    outcomes: list[OutcomeName] = Field(
        default_factory=list,
        max_length=MAX_OUTCOMES,
        description="what the handler may end with besides the standard ok/fail/skip/iterate",
    )
    next: dict[OutcomeName, StepId | None] = Field(
        default_factory=dict, description="outcome → next step id, or null: the run ends"
    )
    max_visits: int | None = Field(None, ge=1, le=MAX_VISITS)
    max_iterations: int | None = Field(
        None, ge=1, le=MAX_VISITS, description="cap of the iterate edge (required when it exists)"
    )
    gate: GateDefinition | None = Field(None, description="evidence a report must pass")
    ask: bool = Field(False, description="the step may end with needs_input (question relay)")
    free_text: bool = Field(False, description="questions may take a free-text answer")
    review: ReviewSchedule | None = None
    line: int | None = Field(None, ge=1, description="where the step starts in its file")

    def possible_outcomes(self) -> list[str]:
        """What the handler can end this step with (``_default`` is an edge, not one):
        the declared ``outcomes``, else by kind: a child session or an agent without an
        ``outcome_field`` ends ``ok`` or ``fail``; the others any standard outcome. An
        agent's ``outcome_field`` values come from its output schema (``validate``)."""
        declared = [o for o in self.outcomes if o != DEFAULT]
        if declared:
            return list(dict.fromkeys(declared))
        if self.handler.kind == "agent" and self.handler.outcome_map:
            return list(dict.fromkeys(self.handler.outcome_map.values()))
        if self.handler.kind == "session" or (
            self.handler.kind == "agent" and not self.handler.outcome_field
        ):
            return ["ok", "fail"]
        return list(STANDARD_OUTCOMES)

    @property
    def terminal(self) -> bool:
        """A step with no edges ends the run, whatever its outcome."""
        return not self.next

    def edge(self, outcome: str) -> tuple[bool, str | None]:
        """(found, target) of ``outcome``: its own edge, else ``_default``; a step with no
        edges ends the run (True, None); (False, None) when there is no edge for it (the
        run fails, saying so)."""
        if not self.next:
            return True, None
        if outcome in self.next:
            return True, self.next[outcome]
        if DEFAULT in self.next:
            return True, self.next[DEFAULT]
        return False, None


class Graph(BaseModel):
    """A whole graph: its steps in file order, the entry, and its parameters."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(pattern=GRAPH_ID)]
    description: str = Field("", max_length=2000)
    entry: str = Field(max_length=64)
    steps: list[StepDef] = Field(min_length=1, max_length=MAX_STEPS)
    params: dict[str, Arg] = Field(default_factory=dict, max_length=MAX_ARGS)
    state: dict[str, Arg] = Field(
        default_factory=dict, max_length=MAX_ARGS, description="step state the steps change"
    )
    continue_as_new_after: int = Field(
        STEPS_BEFORE_CONTINUE,
        ge=2,
        le=10_000,
        description="steps one run takes before it continues as new",
    )
    source: str = Field("", max_length=4096, description="the file it was read from")

    def step(self, step_id: str) -> StepDef | None:
        return next((s for s in self.steps if s.id == step_id), None)

    def by_id(self) -> dict[str, StepDef]:
        """Steps by id (the first of duplicates: ``validate`` reports the rest)."""
        out: dict[str, StepDef] = {}
        for s in self.steps:
            out.setdefault(s.id, s)
        return out

    def sha256(self) -> str:
        """The digest of the graph as canonical JSON (what a run is pinned to): what it
        says, not where it was read from (``source``, steps' ``line``), and without
        defaults, so a field phasegate adds later leaves existing graphs' digests alone."""
        data = self.model_dump(
            mode="json",
            exclude={"source": True, "steps": {"__all__": {"line"}}},
            exclude_defaults=True,
        )
        raw = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(raw.encode()).hexdigest()

    def initial_state(self) -> dict[str, Any]:
        return {k: a.default for k, a in self.state.items() if a.default is not None}

    def run_params(self, given: dict[str, Any]) -> dict[str, Any]:
        """The run's parameters: defaults, overridden by ``given`` (checked by
        ``validate.check_params``)."""
        out = {k: a.default for k, a in self.params.items() if a.default is not None}
        return {**out, **given}
