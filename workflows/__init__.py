"""Temporal workflow classes (deterministic, thin, one per module)."""

from phasegate.workflows.gated_session import GatedSession
from phasegate.workflows.orchestration import Orchestration
from phasegate.workflows.step_graph import StepGraph

__all__ = ["GatedSession", "Orchestration", "StepGraph"]
