"""metadata.json of a workflow directory (prAxIs OS compatible), as pydantic models.

Unknown keys are kept (``extra="allow"``) so a prAxIs OS directory loads
unchanged and round-trips.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DynamicConfig", "PhaseMetadata", "TaskMetadata", "WorkflowMetadata"]


class TaskMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    task_number: int
    name: str = ""
    file: str = ""
    purpose: str = ""


class PhaseMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    phase_number: int | str = Field(description='An int, or a range such as "1-N" (dynamic).')
    phase_name: str = ""
    purpose: str = ""
    estimated_effort: str = ""
    requires_approval: bool = False
    approvers: list[str] = Field(default_factory=list)
    tasks: list[TaskMetadata] = Field(default_factory=list)

    @property
    def is_static(self) -> bool:
        return isinstance(self.phase_number, int)


class DynamicConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    source_type: str = "spec_tasks_md"
    source_path_key: str = "spec_path"
    templates: dict[str, str] = Field(
        default_factory=lambda: {
            "phase": "phases/dynamic/phase-template.md",
            "task": "phases/dynamic/task-template.md",
        }
    )
    parser: str = "spec_tasks_parser"


class WorkflowMetadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    workflow_type: str
    version: str = ""
    name: str = ""
    description: str = ""
    phases: list[PhaseMetadata] = Field(default_factory=list)
    dynamic_phases: bool = False
    dynamic_config: DynamicConfig | None = None

    @property
    def static_phases(self) -> list[PhaseMetadata]:
        """Phases with an integer number, in order of that number."""
        return sorted((p for p in self.phases if p.is_static), key=lambda p: int(p.phase_number))
