"""Activities: every piece of I/O phasegate does (definitions, templates, parsing)."""

from activities.definitions import DefinitionActivities

__all__ = ["DefinitionActivities"]
