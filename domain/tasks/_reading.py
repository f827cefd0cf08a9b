"""The task board's reading side: statuses (a container's derived), what a task waits
for, the next task, the lines and views queries answer, and what a phase's gate says.
Mixed into :class:`~phasegate.domain.tasks.board.TaskBoard`; reads only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from phasegate.domain.errors import TaskRefused
from phasegate.domain.gates import Problem
from phasegate.domain.tasks.messages import BoardQuery, BoardView, TaskLine, TaskState
from phasegate.domain.tasks.model import MAX_TASKS, TaskStatus

if TYPE_CHECKING:
    from phasegate.domain.tasks.naming import Complexity

__all__ = ["BoardReading"]

_LIST_HINT = "`phasegate task list` shows every task, its status and what it waits for"


class BoardReading:
    """What the board answers (``tasks``, ``overflow`` and ``complexity`` are its fields)."""

    tasks: dict[str, TaskState]
    overflow: list[int]
    complexity: Complexity | None

    # ---- reading -------------------------------------------------------

    def children(self, task_id: str) -> list[TaskState]:
        return [t for t in self.tasks.values() if t.spec.parent == task_id]

    def _children_map(self) -> dict[str, list[TaskState]]:
        found: dict[str, list[TaskState]] = {}
        for t in self.tasks.values():
            if t.spec.parent is not None:
                found.setdefault(t.spec.parent, []).append(t)
        return found

    def status(self, task_id: str, kids: dict[str, list[TaskState]] | None = None) -> TaskStatus:
        """The task's status; a container's derives from its subtasks."""
        task = self.tasks[task_id]
        subtasks = (kids if kids is not None else self._children_map()).get(task_id, [])
        if not subtasks:
            return task.status
        if all(s.status == "completed" for s in subtasks):
            # A container with criteria a machine checks is complete once they passed.
            return "completed" if not task.has_checks or task.status == "completed" else "container"
        return "container"

    def container_due(self, task_id: str) -> bool:
        """Every subtask is complete and the container's own checks have yet to pass."""
        task, subtasks = self.tasks[task_id], self.children(task_id)
        return (
            bool(subtasks)
            and task.has_checks
            and task.status != "completed"
            and all(s.status == "completed" for s in subtasks)
        )

    def done(self, task_id: str, current_phase: int, kids: dict[str, list[TaskState]]) -> bool:
        """Complete for a dependency: completed, or of a phase the session has completed."""
        task = self.tasks.get(task_id)
        if task is None:
            return False
        return task.phase < current_phase or self.status(task_id, kids) == "completed"

    def waiting_for(
        self, task_id: str, current_phase: int, kids: dict[str, list[TaskState]] | None = None
    ) -> list[str]:
        """The dependencies (the task's and its parent's) not complete yet."""
        kids = kids if kids is not None else self._children_map()
        task = self.tasks[task_id]
        deps = list(task.spec.depends_on)
        if task.spec.parent is not None and task.spec.parent in self.tasks:
            deps += self.tasks[task.spec.parent].spec.depends_on
        return [d for d in dict.fromkeys(deps) if not self.done(d, current_phase, kids)]

    def leaves(self, phase: int) -> list[TaskState]:
        kids = self._children_map()
        return [t for t in self.tasks.values() if t.phase == phase and t.spec.id not in kids]

    def unfinished(self, phase: int) -> list[TaskState]:
        """The phase's leaf tasks not complete (optional ones left out)."""
        return [t for t in self.leaves(phase) if t.status != "completed" and not t.spec.optional]

    def next_task(self, current_phase: int) -> str | None:
        """The task to work on next: a ready subtask of a container already under way,
        else the first dependency-ready task in definition order."""
        kids = self._children_map()
        ready = [
            t
            for t in self.tasks.values()
            if t.phase == current_phase
            and t.status == "pending"
            and t.spec.id not in kids
            and not self.waiting_for(t.spec.id, current_phase, kids)
        ]
        if not ready:
            return None

        def under_way(t: TaskState) -> bool:
            siblings = kids.get(t.spec.parent or "", [])
            return any(s.status in ("active", "completed") for s in siblings)

        started = [t for t in ready if t.spec.parent is not None and under_way(t)]
        return (started or ready)[0].spec.id

    def line(self, task_id: str, current_phase: int, kids: dict[str, list[TaskState]]) -> TaskLine:
        t = self.tasks[task_id]
        subtasks = kids.get(task_id, [])
        done = sum(s.status == "completed" for s in subtasks)
        return TaskLine(
            id=t.spec.id,
            title=t.spec.title,
            status=self.status(task_id, kids),
            phase=t.phase,
            parent=t.spec.parent,
            depends_on=list(t.spec.depends_on),
            waiting_for=[] if subtasks else self.waiting_for(task_id, current_phase, kids),
            claimed_by=t.claimed_by,
            progress=f"{done}/{len(subtasks)}" if subtasks else "",
            blocked_reason=t.blocked_reason,
            optional=t.spec.optional,
        )

    def counts(self) -> dict[str, int]:
        kids = self._children_map()
        found: dict[str, int] = {}
        for task_id in self.tasks:
            status = self.status(task_id, kids)
            found[status] = found.get(status, 0) + 1
        return found

    def view(self, query: BoardQuery, current_phase: int, session_id: str = "") -> BoardView:
        """What the ``tasks`` query answers; only phases the session has reached are on
        the board at all, so nothing here can show a future phase's task."""
        kids = self._children_map()
        phase = current_phase if query.phase is None else query.phase
        chosen = [t for t in self.tasks.values() if phase == -1 or t.phase == phase]
        page = chosen[query.offset : query.offset + query.limit]
        task = self.tasks.get(query.task) if query.task else None
        if query.task and task is None:
            raise TaskRefused(
                f"there is no task {query.task} in this session (yet)",
                where="task",
                hint=_LIST_HINT,
            )
        return BoardView(
            session_id=session_id,
            current_phase=current_phase,
            lines=[self.line(t.spec.id, current_phase, kids) for t in page],
            total=len(chosen),
            offset=query.offset,
            next_task=self.next_task(current_phase),
            counts=self.counts(),
            complexity=self.complexity or "",
            task=task,
        )

    def reaches(self, task_id: str) -> set[str]:
        """Every task ``task_id`` waits for: its dependencies, its parent's, its
        subtasks (a container waits for them), transitively."""
        kids = self._children_map()
        seen: set[str] = set()
        todo = [task_id]
        while todo:
            current = self.tasks.get(todo.pop())
            if current is None:
                continue
            nxt = list(current.spec.depends_on) + [k.spec.id for k in kids.get(current.spec.id, [])]
            if current.spec.parent is not None and current.spec.parent in self.tasks:
                nxt += self.tasks[current.spec.parent].spec.depends_on
            for dep in nxt:
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    def gate_problems(self, phase: int) -> list[Problem]:
        """What a gate that requires the phase's tasks complete says (nothing when done)."""
        if phase in self.overflow:
            return [
                Problem(
                    field="tasks",
                    message=f"this phase has more tasks than a session tracks ({MAX_TASKS}); "
                    "they cannot all be checked",
                    expected=f"at most {MAX_TASKS} tasks in a session",
                    got="more",
                    rule="tasks_complete",
                )
            ]
        left = self.unfinished(phase)
        left += [
            self.tasks[k]
            for k in self.tasks
            if self.container_due(k) and self.tasks[k].phase == phase
        ]
        if not left:
            return []
        shown = ", ".join(
            f"{t.spec.id} ({t.status}{', ' + t.claimed_by if t.claimed_by else ''})"
            for t in left[:10]
        )
        more = f" and {len(left) - 10} more" if len(left) > 10 else ""
        return [
            Problem(
                field="tasks",
                message=f"{len(left)} task(s) of this phase are not complete: {shown}{more}",
                expected="every leaf task completed (`phasegate task done`)",
                got=f"{len(left)} open",
                rule="tasks_complete",
            )
        ]
