"""Temporal workflow classes (deterministic, thin, one per module)."""

from phasegate.workflows.gated_session import GatedSession
from phasegate.workflows.orchestration import Orchestration

__all__ = ["GatedSession", "Orchestration"]
