"""Where a session's task board is projected: its ``.workflow/WFS-<slug>`` folder.

A session imported from a task folder writes back into that folder (the files become
views of the session); a session started with ``task_files`` on gets a new folder
named from the workflow's title (``domain.tasks.naming.folder_name``: ``-NNN`` when the
name is taken). Decided once, when the session starts, by the definition activity
(it sees the target); the workflow keeps it.
"""

from __future__ import annotations

import os
from pathlib import Path

from phasegate.domain.tasks.naming import folder_name

__all__ = ["task_folder_for"]


def _is_task_folder(path: Path) -> bool:
    return path.is_dir() and (
        (path / ".task").is_dir() or (path / "workflow-session.json").is_file()
    )


def task_folder_for(
    target: str, spec_source: str | None, option: bool | None, title: str
) -> str | None:
    """The folder relative to ``target``, or None (no task files: no target, the option
    off, or neither an imported folder nor the option)."""
    if not target or option is False:
        return None
    root = Path(os.path.realpath(target))
    if spec_source:
        source = Path(os.path.realpath(spec_source))
        if _is_task_folder(source) and source.is_relative_to(root / ".workflow"):
            return source.relative_to(root).as_posix()
    if not option:
        return None
    workflow_dir = root / ".workflow"
    taken: set[str] = set()
    for parent in (workflow_dir, workflow_dir / "active", workflow_dir / "archives"):
        if parent.is_dir():
            taken |= {p.name for p in parent.iterdir()}
    return ".workflow/" + folder_name(title, taken)
