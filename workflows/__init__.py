"""Temporal workflow classes (deterministic, thin, one per module)."""

from workflows.gated_session import GatedSession

__all__ = ["GatedSession"]
