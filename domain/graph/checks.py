"""Whether what a report, a handler or a person sent fits the step it is for: the
outcome is one the step has, the step state fits the graph's declarations (and the
whole state stays bounded), questions are 1–3 with 2–3 options each (or free text
where the step allows), answers pick an offered option. Pure; ``GraphState`` asks."""

from __future__ import annotations

import json
from typing import Any

from phasegate.domain.errors import PhasegateError, SessionError
from phasegate.domain.graph.args import arg_problem
from phasegate.domain.graph.messages import MAX_STATE_BYTES, Question
from phasegate.domain.graph.model import NEEDS_INPUT, Graph, StepDef

__all__ = ["MAX_TOTAL_STATE_BYTES", "answers_problem", "outcome_problem", "state_problem"]

MAX_TOTAL_STATE_BYTES = 4 * MAX_STATE_BYTES  # the whole step state, as compact JSON


def outcome_problem(
    graph: Graph,
    current: dict[str, Any],
    step: StepDef,
    outcome: str,
    values: dict[str, Any],
    questions: list[Question],
) -> PhasegateError | None:
    """Why ``step`` cannot end with ``outcome`` (setting ``values``, asking ``questions``)."""
    if outcome == NEEDS_INPUT:
        # Its state changes are kept too: held to the same declarations.
        return questions_problem(step, questions) or state_problem(graph, current, values)
    if questions:
        return SessionError("questions go with the needs_input outcome only", where="questions")
    allowed = step.possible_outcomes()
    if outcome not in allowed:
        return SessionError(
            f"step {step.id!r} has no outcome {outcome!r}",
            where="outcome",
            hint=f"report one of: {', '.join(allowed)}",
        )
    return state_problem(graph, current, values)


def state_problem(
    graph: Graph, current: dict[str, Any], values: dict[str, Any]
) -> PhasegateError | None:
    """Why ``values`` cannot be set on the step state ``current``, or None."""
    declared = graph.state
    for key, value in values.items():
        arg = declared.get(key)
        if declared and arg is None:
            return SessionError(
                f"the graph has no state field {key!r}",
                where=f"state.{key}",
                hint=f"its state fields: {', '.join(declared)}",
            )
        if arg is not None and (reason := arg_problem(arg, value)):
            return SessionError(reason, where=f"state.{key}")
    if values and _json_size({**current, **values}) > MAX_TOTAL_STATE_BYTES:
        # Each report is bounded, but new keys add up (a graph without declarations
        # takes any): the whole state travels in every activity input, query answer
        # and continue-as-new, all under Temporal's payload limit.
        return SessionError(
            f"the step state would grow past {MAX_TOTAL_STATE_BYTES} bytes as JSON",
            where="state",
            hint="replace earlier values instead of adding new keys",
        )
    return None


def questions_problem(step: StepDef, questions: list[Question]) -> PhasegateError | None:
    """Why ``step`` may not ask ``questions``, or None."""
    if not step.ask:
        return SessionError(
            f"step {step.id!r} may not ask questions (its graph does not say `ask: true`)",
            where="outcome",
        )
    if not questions:
        return SessionError("needs_input needs 1 to 3 questions", where="questions")
    if len({q.id for q in questions}) != len(questions):
        return SessionError("question ids must differ", where="questions")
    for q in questions:
        if not (2 <= len(q.options) <= 3) and not (step.free_text and not q.options):
            rule = "2 or 3 options" + (", or none for free text" if step.free_text else "")
            return SessionError(f"question {q.id!r} needs {rule}", where=f"questions.{q.id}")
    return None


def answers_problem(asked_list: list[Question], answers: dict[str, str]) -> PhasegateError | None:
    """Why ``answers`` do not answer the questions asked (each, and only those, with an
    offered option or, for free text, something), or None."""
    asked = {q.id: q for q in asked_list}
    if set(answers) != set(asked):
        return SessionError(
            f"answer every question, and only those: {', '.join(asked)}", where="answers"
        )
    for qid, value in answers.items():
        q = asked[qid]
        if q.options and value not in q.options:
            return SessionError(
                f"{value!r} is not an option of question {qid!r}",
                where=f"answers.{qid}",
                hint=f"pick one of: {', '.join(q.options)}",
            )
        if not q.options and not value.strip():
            return SessionError(f"question {qid!r} needs an answer", where=f"answers.{qid}")
    return None


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())
