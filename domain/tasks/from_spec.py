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

__all__ = ["dependency_cycle", "known_through", "spec_task", "task_ids"]

_ID = re.compile(ID_PATTERN)
_STATUS = {"done": "completed", "skipped": "completed"}


def task_ids(spec: ParsedSpec) -> set[str]:
    return {t.id for p in spec.phases for t in p.tasks}


def known_through(spec: ParsedSpec, index: int) -> set[str]:
    """The ids of the tasks of phases ``0..index``: what a task of phase ``index`` may
    depend on (a task of a later phase can never be complete before it starts)."""
    return {t.id for p in spec.phases[: index + 1] for t in p.tasks}


def dependency_cycle(spec: ParsedSpec) -> list[SpecTask] | None:
    """Tasks whose dependencies (on tasks of their own or earlier phases) form a cycle,
    in cycle order, or None."""
    deps: dict[str, list[str]] = {}
    where: dict[str, SpecTask] = {}
    for index, phase in enumerate(spec.phases):
        known = known_through(spec, index)
        for task in phase.tasks:
            where.setdefault(task.id, task)
            deps.setdefault(task.id, []).extend(d for d in task.dependencies if d in known)
    state: dict[str, int] = {}
    for start, first in deps.items():
        if state.get(start):
            continue
        path: list[str] = []
        stack = [(start, iter(first))]
        state[start] = 1
        path.append(start)
        while stack:
            node, children = stack[-1]
            nxt = next(children, None)
            if nxt is None:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            if state.get(nxt) == 1:
                return [where[t] for t in path[path.index(nxt) :]]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(deps.get(nxt, []))))
    return None


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
