"""The ``.workflow/`` files a session's task board is projected to: the messages.

The files are views, written by one activity (``activities/task_files.py``) from the
session's durable state, never read back as truth. The activity is handed only the
session id and what it last wrote (:class:`ProjectRequest`: the board could be
thousands of tasks, and history would keep a copy per projection); it reads the state
with the session's ``task_files`` query (:class:`TaskFilesSource`), renders
(``domain.tasks.projection``), reports hand edits (a file whose hash is not what it
last wrote) and writes every file atomically.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from phasegate.domain.tasks.board import TaskBoard

__all__ = ["PhaseLine", "ProjectRequest", "ProjectResult", "TaskFilesSource"]


class PhaseLine(BaseModel):
    index: int
    label: str
    name: str
    status: str = Field(description="completed, current or (a later phase) pending.")


class TaskFilesSource(BaseModel):
    """What the ``task_files`` query answers: everything the files show."""

    session_id: str
    workflow_type: str
    name: str = ""
    description: str = ""
    target: str = ""
    folder: str = Field(description="The WFS folder, relative to the target.")
    status: str
    current_phase: int
    total_phases: int
    phases: list[PhaseLine] = Field(default_factory=list)
    board: TaskBoard
    started_at: datetime | None = None
    updated_at: datetime | None = None


class ProjectRequest(BaseModel):
    """Input of ``project_task_files``."""

    session_id: str
    target: str
    folder: str
    version: int = Field(description="The board version that asked for this projection.")
    hashes: dict[str, str] = Field(
        default_factory=dict, description="What the last projection wrote: file -> sha256."
    )


class ProjectResult(BaseModel):
    """What a projection wrote and found."""

    folder: str
    version: int = Field(description="The board version the files show.")
    hashes: dict[str, str] = Field(default_factory=dict)
    edits: list[str] = Field(
        default_factory=list, description="Files changed by hand since the last projection."
    )
    rebuilt: list[str] = Field(
        default_factory=list, description="Files found missing or unreadable, written again."
    )
    written: int = 0
    projected_at: datetime | None = None
