"""Temporal workflow classes (deterministic, thin, one per module)."""

from phasegate.workflows.gated_session import GatedSession

__all__ = ["GatedSession"]
