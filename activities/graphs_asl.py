"""An AWS States Language state machine as a phasegate graph (``phasegate graph
import-asl``): the states become steps and their transitions outcome edges.

========================  ==========================================================
ASL                       phasegate
========================  ==========================================================
``StartAt``               ``entry``
``Task``/``Pass``/``Wait``  a step: ``Next`` is ``ok``'s edge, ``End: true`` ends the run
``Catch``                 ``fail`` (``States.ALL``) or ``error_N`` edges
``Retry``                 written in the step's actions (a retry is not an edge)
``Choice``                outcomes ``choice_1``.. (conditions in the actions) and
                          ``otherwise`` for ``Default``
``Succeed``/``Fail``      steps with no edges (the run ends)
``Parallel``/``Map``      a step with ``ok`` → ``Next``; its branches are not converted
                          (noted in the actions and returned as notes)
========================  ==========================================================

State names become step ids (``FirstState`` → ``first_state``). The result is data for
a YAML file; :func:`~phasegate.domain.graph.validate.validate` then judges it like any
graph. No I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from phasegate.domain.errors import DefinitionError

__all__ = ["asl_to_graph", "step_id", "to_yaml"]

_WORK = ("Task", "Pass", "Wait", "Parallel", "Map")
_COMPARATORS = re.compile(r"^(String|Numeric|Boolean|Timestamp)|^Is")


def step_id(state: str, taken: set[str]) -> str:
    """A step id for an ASL state name, unique among ``taken``."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", state)
    snake = re.sub(r"[^a-z0-9]+", "_", snake.lower()).strip("_") or "state"
    if not snake[0].isalpha():
        snake = f"s_{snake}"
    base, n = snake[:60], 2
    out = base
    while out in taken:
        out, n = f"{base}_{n}", n + 1
    taken.add(out)
    return out


def asl_to_graph(asl: Any, name: str) -> tuple[dict[str, Any], list[str]]:
    """The graph data for the state machine ``asl`` (parsed JSON) and notes on what
    was not converted.

    Raises:
        DefinitionError: ``asl`` is not a state machine (no ``StartAt`` and ``States``).
    """
    if not isinstance(asl, dict) or not isinstance(asl.get("States"), dict):
        raise DefinitionError(
            "not a state machine: it needs StartAt and States",
            hint="give an Amazon States Language definition (JSON)",
        )
    states: dict[str, Any] = asl["States"]
    taken: set[str] = set()
    ids = {state: step_id(state, taken) for state in states}
    notes: list[str] = []
    steps = []
    for state, body in states.items():
        if not isinstance(body, dict):
            notes.append(f"{state}: not an object; left out")
            continue
        steps.append(_step(state, body, ids, notes))
    start = asl.get("StartAt")
    data = {
        "name": name,
        "description": str(asl.get("Comment", ""))[:2000],
        "entry": ids.get(str(start), str(start or "")),
        "steps": steps,
    }
    return data, notes


def _step(
    state: str, body: dict[str, Any], ids: dict[str, str], notes: list[str]
) -> dict[str, Any]:
    kind = str(body.get("Type", "?"))
    step: dict[str, Any] = {"id": ids[state], "title": f"{state} ({kind})"}
    actions = [str(body["Comment"])] if body.get("Comment") else []
    if body.get("Resource"):
        actions.append(f"Resource: {body['Resource']}")

    def to(target: Any) -> str | None:
        return ids.get(target, str(target)) if target is not None else None

    nxt: dict[str, str | None] = {}
    if kind in _WORK:
        if kind in ("Parallel", "Map"):
            notes.append(f"{state}: {kind} branches are not converted; the step stands for them")
            actions.append(f"Run the {kind} state's branches (not converted from ASL).")
        for retry in body.get("Retry") or []:
            errors = ", ".join(retry.get("ErrorEquals", []))
            actions.append(f"Retried up to {retry.get('MaxAttempts', 3)} times on {errors}.")
        if body.get("End"):
            nxt["ok"] = None
        elif "Next" in body:
            nxt["ok"] = to(body["Next"])
        outcomes = ["ok"]
        for i, catch in enumerate(body.get("Catch") or [], start=1):
            outcome = "fail" if catch.get("ErrorEquals") == ["States.ALL"] else f"error_{i}"
            outcomes.append(outcome)
            nxt[outcome] = to(catch.get("Next"))
            if outcome != "fail":
                actions.append(f"End {outcome} on {', '.join(catch.get('ErrorEquals', []))}.")
        if any(o.startswith("error_") for o in outcomes):
            step["outcomes"] = list(dict.fromkeys([*outcomes, "fail"]))
        if nxt == {"ok": None}:
            nxt = {}  # End and nothing caught: the step ends the run whatever it ends with
    elif kind == "Choice":
        outcomes = []
        for i, choice in enumerate(body.get("Choices") or [], start=1):
            outcomes.append(f"choice_{i}")
            nxt[f"choice_{i}"] = to(choice.get("Next"))
            actions.append(f"End choice_{i} when {_condition(choice)}.")
        if "Default" in body:
            outcomes.append("otherwise")
            nxt["otherwise"] = to(body["Default"])
            actions.append("End otherwise when no choice matches.")
        step["outcomes"] = outcomes
    elif kind == "Fail":
        actions.append(f"The run fails: {body.get('Error', '')} {body.get('Cause', '')}".strip())
    elif kind != "Succeed":
        notes.append(f"{state}: unknown state type {kind!r}; converted as a step that ends the run")
    if actions:
        step["actions"] = "\n".join(actions)
    if nxt:
        step["next"] = nxt
    return step


def _condition(choice: dict[str, Any]) -> str:
    """A Choice rule as text: ``$.foo NumericEquals 1``, with And/Or/Not spelt out."""
    for combinator in ("And", "Or"):
        if combinator in choice:
            parts = [_condition(c) for c in choice[combinator] if isinstance(c, dict)]
            return f" {combinator.lower()} ".join(f"({p})" for p in parts)
    if "Not" in choice and isinstance(choice["Not"], dict):
        return f"not ({_condition(choice['Not'])})"
    if "Condition" in choice:  # JSONata
        return str(choice["Condition"])
    tests = [(k, v) for k, v in choice.items() if _COMPARATORS.match(k)]
    variable = choice.get("Variable", "?")
    return " and ".join(f"{variable} {k} {json.dumps(v)}" for k, v in tests) or "?"


class _Dumper(yaml.SafeDumper):
    """Multi-line text as a literal block, as a person writes a step's actions."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    ),
)


def to_yaml(data: dict[str, Any]) -> str:
    """A graph's data as the YAML of a graph file."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
