"""The ``demo`` models: offline, deterministic, canned answers per agent. Not an LLM.

Production code (the worker resolves the model id ``demo`` to them, see
:mod:`phasegate.activities.model_providers`); ``phasegate.testing`` re-exports them.

``make demo`` and first runs with no API key use it: every agent answers at once, with
text built from keywords of the prompt (the issue and earlier outputs) and marked
``[demo model]`` so nobody mistakes it for a model's judgement. The same prompt always
gets the same answer. Confidence is 0.9, above the default escalation threshold, so a
demo orchestration runs through without waiting for a person.

Routing mirrors the rules planner's guidelines: typo/docs/config -> developer,
reviewer; a bug -> analyst, developer, reviewer; a complex change -> all four; any
other feature -> architect, developer, reviewer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = ["DEMO_LABEL", "DEMO_MODEL_ID", "demo_model"]

DEMO_MODEL_ID = "demo"
DEMO_LABEL = "[demo model: offline canned text, no LLM was called]"
_CONFIDENCE = 0.9

_TRIVIAL = re.compile(r"\b(typo|spelling|docs?|readme|config|rename|wording)\b")
_BUG = re.compile(r"\b(bug|error|crash\w*|fails?|failing|broken|regression|exception)\b")
_COMPLEX = re.compile(r"\b(complex|epic|architecture|redesign|migrat\w*|rewrite)\b")


def _prompt_text(messages: list[ModelMessage]) -> str:
    """The user prompt of the run (the first request's text parts)."""
    for message in messages:
        if isinstance(message, ModelRequest):
            parts = [p.content for p in message.parts if isinstance(p, UserPromptPart)]
            text = "\n".join(c for c in parts if isinstance(c, str))
            if text:
                return text
    return ""


def _subject(text: str) -> str:
    """The first heading (else the first line) of the prompt, as the thing worked on."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    headings = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
    subject = (headings or lines or ["the issue"])[0]
    return subject[:120]


def _kind(text: str) -> str:
    lowered = text.lower()
    if _COMPLEX.search(lowered):
        return "complex"
    if _TRIVIAL.search(lowered):
        return "trivial"
    if _BUG.search(lowered):
        return "bug"
    return "feature"


_STEPS = {
    "trivial": ["developer", "reviewer"],
    "bug": ["analyst", "developer", "reviewer"],
    "feature": ["architect", "developer", "reviewer"],
    "complex": ["analyst", "architect", "developer", "reviewer"],
}
_SCOPE = {"trivial": "trivial", "bug": "moderate", "feature": "simple", "complex": "complex"}


def _planner(text: str) -> dict[str, Any]:
    kind = _kind(text)
    return {
        "reasoning": f"{DEMO_LABEL} Keyword routing for {_subject(text)!r}: looks like a "
        f"{kind} change, so: {', '.join(_STEPS[kind])}.",
        "steps": [{"agent": a, "reason": f"{DEMO_LABEL} {a} step"} for a in _STEPS[kind]],
        "scope": _SCOPE[kind],
    }


def _analyst(text: str) -> dict[str, Any]:
    kind = _kind(text)
    return {
        "findings": [
            f"{DEMO_LABEL} The issue {_subject(text)!r} reads as a {kind} change.",
            f"{DEMO_LABEL} A real model would read the code; this answer only matched keywords.",
        ],
        "scope": _SCOPE[kind],
        "recommended_agents": [a for a in _STEPS[kind] if a != "analyst"],
        "relevant_files": [],
        "confidence": _CONFIDENCE,
        "uncertainty_factors": ["demo model: nothing was analysed"],
        "replan_request": None,
    }


def _architect(text: str) -> dict[str, Any]:
    subject = _subject(text)
    plan = (
        f"# Tasks: {subject}\n\n"
        f"{DEMO_LABEL}\n\n"
        "## Phase 1: Implement\n\n"
        f"- [ ] 1.1 Make the change the issue asks for: {subject}\n"
        "- [ ] 1.2 Add or update a test that shows it works\n\n"
        "## Phase 2: Verify\n\n"
        "- [ ] 2.1 Run the test suite and fix what fails\n"
        "- [ ] 2.2 Update the documentation the change touches\n"
    )
    return {
        "goal": f"{DEMO_LABEL} {subject}"[:1000],
        "plan_markdown": plan,
        "confidence": _CONFIDENCE,
        "replan_request": None,
    }


def _reviewer(text: str) -> dict[str, Any]:
    return {
        "approved": True,
        "comments": [f"{DEMO_LABEL} Approved without reading the change: {_subject(text)!r}."],
        "severity": "none",
        "confidence": _CONFIDENCE,
        "replan_request": None,
    }


_ANSWERS: dict[str, Callable[[str], dict[str, Any]]] = {
    "planner": _planner,
    "analyst": _analyst,
    "architect": _architect,
    "reviewer": _reviewer,
}


def demo_model(agent: str) -> FunctionModel:
    """The demo model of one LLM agent (``planner``, ``analyst``, ``architect``, ``reviewer``)."""
    answer = _ANSWERS[agent]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        args = answer(_prompt_text(messages))
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    return FunctionModel(respond, model_name=DEMO_MODEL_ID)
