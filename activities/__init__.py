"""Activities: every piece of I/O phasegate does (definitions, templates, parsing)."""

from phasegate.activities.definitions import DefinitionActivities

__all__ = ["DefinitionActivities"]
