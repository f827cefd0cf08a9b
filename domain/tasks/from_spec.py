"""A tasks.md task as the task board keeps it (``domain.tasks.model.TaskSpec``).

A task folder's task carries its own :class:`TaskSpec` (``SpecTask.task``); a tasks.md
task is built from what the parser read: its id, name, checkbox, optional mark,
dependencies (only those naming a task of the spec: prose such as "after the API is
up" names none), acceptance criteria and requirements.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from phasegate.domain.spec import ParsedSpec, SpecTask
from phasegate.domain.tasks.model import ID_PATTERN, MAX_CRITERIA, MAX_DEPENDENCIES, TaskSpec

__all__ = ["spec_task", "task_ids"]

_ID = re.compile(ID_PATTERN)
_STATUS = {"done": "completed", "skipped": "completed"}


def task_ids(spec: ParsedSpec) -> set[str]:
    return {t.id for p in spec.phases for t in p.tasks}


def spec_task(task: SpecTask, known: Collection[str], source: str) -> TaskSpec | None:
    """The board's task for ``task`` (None when its id is not one a task id may be)."""
    if task.task is not None:
        return task.task
    if not _ID.match(task.id):
        return None
    deps = [d for d in dict.fromkeys(task.dependencies) if d in known and d != task.id]
    return TaskSpec(
        id=task.id,
        title=(task.name or task.id)[:300],
        status="completed" if task.status in _STATUS else "pending",
        optional=task.optional,
        description=task.description[:4000],
        depends_on=deps[:MAX_DEPENDENCIES],
        acceptance=[a[:1000] for a in task.acceptance_criteria[:MAX_CRITERIA]],
        requirements=[r[:1000] for r in task.requirements[:64]],
        source=f"{source}:{task.line}"[:600],
    )
