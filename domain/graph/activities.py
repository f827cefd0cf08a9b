"""The input models of a step graph run's activities (``activities/step_handlers.py``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from phasegate.domain.graph.model import Graph

__all__ = ["FunctionRequest", "GraphPrepare", "RenderStepRequest", "StepContext"]


class GraphPrepare(BaseModel):
    """The graph a run is about to start (what the worker checks it may run)."""

    graph: Graph
    sha256: str = ""


class RenderStepRequest(BaseModel):
    actions: str = Field(max_length=20_000)
    step_id: str
    visit: int
    params: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    answers: dict[str, str] = Field(default_factory=dict)


class StepContext(BaseModel):
    """What a function handler is called with."""

    graph: str
    step_id: str
    visit: int
    params: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    answers: dict[str, str] = Field(default_factory=dict)
    workspace: str = ""


class FunctionRequest(BaseModel):
    target: str = Field(max_length=200)
    context: StepContext
