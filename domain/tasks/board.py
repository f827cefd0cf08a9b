"""The task board of a gated session: one durable writer for task state.

A session's tasks join the board when their phase is entered (a task JSON folder's
tasks, a tasks.md phase's tasks, a library phase's task files), and agents change
them only through messages the session checks first: ``start_task`` (an atomic claim:
check and change run in one workflow task, so of two agents claiming one task
exactly one wins), ``complete_task`` (its checkable acceptance criteria run against
the workspace first), ``block_task``, ``add_subtask``. Pure, like every domain
state: ``check_<message>`` says why a message is refused (the update's validator),
``apply_<message>`` changes the state; nothing here reads a clock or a file.

The rules the files-as-truth tools keep breaking (ISSUES: lost updates, parents
done over unfinished children, subtasks handed out early) are the board's:

- a task with subtasks is a *container*: its status derives from its subtasks and it
  never runs; it is complete when every subtask is;
- a task starts only once every task it depends on is complete, and its parent's
  dependencies too (a subtask is never handed out before its parent could start);
  a task of an earlier, completed phase counts as complete;
- subtasks are two levels at most; dependencies name tasks that exist and never
  form a cycle (``domain.tasks.rules`` checks a definition when it loads).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from phasegate.domain.commands import SessionCommands
from phasegate.domain.errors import PayloadTooLarge, SessionError, TaskRefused
from phasegate.domain.gates import Problem
from phasegate.domain.tasks import bounds as task_bounds
from phasegate.domain.tasks import criteria as task_criteria
from phasegate.domain.tasks.messages import (
    MAX_TASK_EVIDENCE_BYTES,
    AddSubtask,
    BlockTask,
    BoardQuery,
    BoardView,
    CompleteTask,
    CriterionResult,
    StartTask,
    StepOutput,
    TaskLine,
    TaskResult,
    TaskState,
)
from phasegate.domain.tasks.model import MAX_TASKS, TaskSpec, TaskStatus
from phasegate.domain.tasks.naming import Complexity, classify, upgrade
from phasegate.domain.verify import VerifyCheck, VerifyResult

__all__ = ["MAX_SUBTASKS", "Projection", "TaskBoard"]

MAX_SUBTASKS = 50
"""Most subtasks one task is split into."""
_LIST_HINT = "`phasegate task list` shows every task, its status and what it waits for"


def _refused(message: str, hint: str = _LIST_HINT, where: str = "task") -> TaskRefused:
    return TaskRefused(message, where=where, hint=hint)


class Projection(BaseModel):
    """What the last projection of the board to ``.workflow/`` wrote (the files are views:
    a hash that no longer matches is a hand edit, reported and overwritten)."""

    folder: str = Field("", description="The WFS folder, relative to the target.")
    version: int = -1
    hashes: dict[str, str] = Field(default_factory=dict, description="file -> sha256 written")
    edits: list[str] = Field(default_factory=list, description="Hand edits found (latest).")
    error: str = ""
    projected_at: datetime | None = None


class TaskBoard(BaseModel):
    """Every task of the session, in definition order, with its live status."""

    tasks: dict[str, TaskState] = Field(default_factory=dict)
    version: int = Field(0, description="Bumped by every change (the projection follows).")
    complexity: Complexity | None = None
    projection: Projection = Field(default_factory=Projection)

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
        return "completed" if all(s.status == "completed" for s in subtasks) else "container"

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
            raise _refused(f"there is no task {query.task} in this session (yet)")
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

    # ---- loading -------------------------------------------------------

    def enter_phase(self, phase: int, specs: Iterable[TaskSpec], now: datetime | None) -> None:
        """Put a phase's tasks on the board (once: a phase entered again after a rollback
        keeps its tasks' state). Ids already taken by another phase's task are kept
        apart as ``P<phase>:<id>``."""
        added = False
        for spec in specs:
            key = spec.id
            if key in self.tasks:
                if self.tasks[key].phase == phase:
                    continue
                key = f"P{phase}:{spec.id}"[:64]
                if key in self.tasks:
                    continue
                spec = spec.model_copy(update={"id": key})
            if len(self.tasks) >= MAX_TASKS:
                break
            self.tasks[key] = TaskState(
                spec=spec,
                phase=phase,
                status=spec.status,
                updated_at=now,
                completed_at=now if spec.status == "completed" else None,
            )
            added = True
        if added:
            self._changed()

    def _changed(self) -> None:
        self.version += 1
        self.complexity = upgrade(self.complexity, classify(len(self.tasks)))

    # ---- start ---------------------------------------------------------

    def pick(self, msg: StartTask, current_phase: int) -> str | None:
        """The task a start claims: the one named, or the next ready one."""
        return msg.task if msg.task is not None else self.next_task(current_phase)

    def check_start(self, msg: StartTask, current_phase: int) -> TaskRefused | None:
        task_id = self.pick(msg, current_phase)
        if task_id is None:
            unfinished = self.unfinished(current_phase)
            if not unfinished:
                return _refused(
                    f"every task of phase {current_phase} is complete",
                    hint="submit the phase's checkpoint (`phasegate submit`)",
                )
            return _refused(
                "no task of this phase is ready to start: "
                + ", ".join(f"{t.spec.id} ({t.status})" for t in unfinished[:8]),
            )
        problem = self._findable(task_id, current_phase)
        if problem is not None:
            return problem
        task, kids = self.tasks[task_id], self._children_map()
        if task_id in kids:
            return _refused(
                f"{task_id} is split into subtasks ({', '.join(k.spec.id for k in kids[task_id][:8])}); "
                "a container never runs",
                hint="start one of its subtasks, or `phasegate task next` for the next ready one",
            )
        if task.status == "active":
            if task.claimed_by == msg.agent:
                return None  # a repeat: the claim stands
            return _refused(
                f"{task_id} is claimed by {task.claimed_by}",
                hint="take another: `phasegate task next` claims the next ready task",
            )
        if task.status == "completed":
            return _refused(f"{task_id} is already completed", hint="`phasegate task next`")
        if task.needs_person:
            return _refused(
                f"{task_id} is blocked until a person unblocks it: {task.blocked_reason}",
                hint="once it is resolved, a person reopens the phase's blocked steps with "
                "`phasegate control SESSION retry_phase --reason ...`; meanwhile "
                "`phasegate task next`",
            )
        waiting = self.waiting_for(task_id, current_phase, kids)
        if waiting:
            return _refused(
                f"{task_id} depends on {', '.join(waiting)}, not complete yet",
                hint="finish those first, or `phasegate task next` for a task that is ready",
            )
        return None

    def apply_start(
        self, msg: StartTask, current_phase: int, now: datetime, context: list[StepOutput]
    ) -> TaskResult:
        task_id = self.pick(msg, current_phase)
        assert task_id is not None
        task = self.tasks[task_id]
        if not (task.status == "active" and task.claimed_by == msg.agent):
            task.status, task.claimed_by, task.started_at = "active", msg.agent, now
            task.blocked_reason = task.blocked_by = ""
            task.context = context
            task.updated_at = now
            self._changed()
        return self._result(task_id, current_phase, ok=True, context=task.context)

    # ---- complete ------------------------------------------------------

    def check_complete(self, msg: CompleteTask, current_phase: int) -> SessionError | None:
        problem = self._findable(msg.task, current_phase)
        if problem is not None:
            return problem
        task = self.tasks[msg.task]
        if msg.task in self._children_map():
            return _refused(
                f"{msg.task} is a container: it completes when its subtasks do",
                hint="complete its subtasks",
            )
        if task.status == "completed":
            return None  # a repeat: answered with the completion
        if task.status != "active":
            return _refused(
                f"{msg.task} is {task.status}; start it first",
                hint=f"`phasegate task start SESSION {msg.task}` claims it",
            )
        if task.claimed_by != msg.agent:
            return _refused(
                f"{msg.task} is claimed by {task.claimed_by}, not {msg.agent}",
                hint="complete the task you claimed (`phasegate task list` shows claims)",
            )
        size = len(json.dumps(msg.evidence, separators=(",", ":"), default=str).encode())
        if size > MAX_TASK_EVIDENCE_BYTES:
            return PayloadTooLarge(
                f"the task's evidence is {size} bytes; the limit is {MAX_TASK_EVIDENCE_BYTES}",
                where="evidence",
                hint="record paths and short summaries, not file contents",
            )
        return None

    def completion_checks(
        self, msg: CompleteTask, commands: SessionCommands | None
    ) -> tuple[list[VerifyCheck], list[CriterionResult]]:
        """The checks a completion runs (empty for a repeat) and its criteria lines."""
        task = self.tasks[msg.task]
        if task.status == "completed":
            return [], task.criteria
        return task_criteria.criteria_checks(task.spec.id, list(task.spec.acceptance), commands)

    def apply_complete(
        self,
        msg: CompleteTask,
        current_phase: int,
        now: datetime,
        lines: list[CriterionResult],
        verify: list[VerifyResult],
    ) -> TaskResult:
        """Record a checked completion: every check passed completes the task, else it
        stays active with the failures (the agent fixes the work and completes again)."""
        task = self.tasks[msg.task]
        if task.status == "completed":
            return self._result(msg.task, current_phase, ok=True, note="already completed")
        judged = task_criteria.judge(lines, verify)
        failed = [r for r in verify if not r.passed]
        task.attempts += 1
        task.updated_at = now
        task.verify, task.criteria = verify, judged
        if failed:
            task.problems = [
                Problem(field=r.name, message=r.message, rule=f"verify:{r.kind}") for r in failed
            ]
            self._changed()
            return self._result(
                msg.task,
                current_phase,
                ok=False,
                problems=task.problems,
                criteria=judged,
                verify=verify,
                note="not completed: fix what failed, then complete it again",
            )
        task.status, task.completed_at = "completed", now
        task.summary, task.evidence, task.problems = msg.summary, dict(msg.evidence), []
        self._changed()
        return self._result(msg.task, current_phase, ok=True, criteria=judged, verify=verify)

    # ---- block ---------------------------------------------------------

    def check_block(self, msg: BlockTask, current_phase: int) -> TaskRefused | None:
        problem = self._findable(msg.task, current_phase)
        if problem is not None:
            return problem
        task = self.tasks[msg.task]
        if msg.task in self._children_map():
            return _refused(f"{msg.task} is a container; block one of its subtasks")
        if task.status == "completed":
            return _refused(f"{msg.task} is already completed")
        return None

    def apply_block(
        self, msg: BlockTask, current_phase: int, now: datetime, *, needs_person: bool = False
    ) -> TaskResult:
        task = self.tasks[msg.task]
        task.status, task.claimed_by = "blocked", ""
        task.blocked_reason, task.blocked_by = msg.reason, msg.agent
        task.needs_person = needs_person
        task.updated_at = now
        self._changed()
        return self._result(msg.task, current_phase, ok=True)

    def close_phase(self, phase: int, label: str, now: datetime) -> None:
        """The phase passed a gate that does not track its tasks (no ``tasks_complete``):
        its open leaf tasks are closed with it, saying so, so the files never show a
        passed phase's tasks as still to do."""
        kids = self._children_map()
        closed = False
        for task in self.tasks.values():
            if task.phase == phase and task.status != "completed" and task.spec.id not in kids:
                task.status, task.completed_at, task.updated_at = "completed", now, now
                task.summary = (
                    f"closed with phase {label}'s checkpoint (its gate does not track tasks)"
                )
                closed = True
        if closed:
            self._changed()

    def release_person_blocks(self, phase: int, now: datetime) -> list[str]:
        """A person's signed ``retry_phase``: tasks of ``phase`` a pre-analysis step
        blocked for a person are pending again (their steps run at the next start)."""
        released = []
        for task in self.tasks.values():
            if task.phase == phase and task.status == "blocked" and task.needs_person:
                task.status, task.needs_person, task.context = "pending", False, []
                task.blocked_reason = task.blocked_by = ""
                task.updated_at = now
                released.append(task.spec.id)
        if released:
            self._changed()
        return released

    # ---- split ---------------------------------------------------------

    def subtask_id(self, parent: str) -> str:
        numbers = [
            int(t.spec.id.rsplit(".", 1)[1])
            for t in self.children(parent)
            if t.spec.id.rsplit(".", 1)[-1].isdigit() and "." in t.spec.id
        ]
        return f"{parent}.{max(numbers, default=0) + 1}"

    def check_add_subtask(
        self, msg: AddSubtask, current_phase: int, commands: SessionCommands | None
    ) -> TaskRefused | None:
        problem = self._findable(msg.parent, current_phase)
        if problem is not None:
            return problem
        parent = self.tasks[msg.parent]
        if parent.spec.parent is not None:
            return _refused(
                f"{msg.parent} is itself a subtask (of {parent.spec.parent}); tasks split two "
                "levels at most",
                hint=f"add the subtask to {parent.spec.parent}",
            )
        if self.status(msg.parent) == "completed":
            return _refused(f"{msg.parent} is already completed; it takes no new subtask")
        if len(self.children(msg.parent)) >= MAX_SUBTASKS:
            return _refused(f"{msg.parent} already has {MAX_SUBTASKS} subtasks, the most")
        if len(self.tasks) >= MAX_TASKS:
            return _refused(f"the session holds {MAX_TASKS} tasks, the most")
        if len(self.subtask_id(msg.parent)) > 64:
            return _refused(f"{msg.parent}'s subtask ids would exceed 64 characters")
        for dep in msg.depends_on:
            if dep not in self.tasks:
                return _refused(
                    f"depends_on names {dep}, which is no task of this session", where="depends_on"
                )
            if dep == msg.parent:
                return _refused(
                    f"a subtask cannot depend on its own parent {dep} (the parent completes "
                    "when its subtasks do: a cycle)",
                    where="depends_on",
                )
        for n, text in enumerate(msg.acceptance):
            argv = task_criteria.command_of(text)
            if argv is not None and not any(
                c.argv == argv for c in (commands.all() if commands else [])
            ):
                listed = "; ".join(c.text for c in commands.all()) if commands else ""
                return _refused(
                    f"acceptance[{n}] runs `{' '.join(argv)}`, which is not one of the commands "
                    "this session was started with: commands are fixed when a session starts",
                    where=f"acceptance[{n}]",
                    hint=f"name one of: {listed}"
                    if listed
                    else "write the criterion as prose "
                    "(a claim), or a file check: `path` contains `text`",
                )
        return None

    def apply_add_subtask(self, msg: AddSubtask, current_phase: int, now: datetime) -> TaskResult:
        parent = self.tasks[msg.parent]
        new_id = self.subtask_id(msg.parent)
        spec = TaskSpec(
            id=new_id,
            title=msg.title,
            description=msg.description,
            type=parent.spec.type,
            agent=parent.spec.agent,
            acceptance=list(msg.acceptance),
            depends_on=list(msg.depends_on),
            focus_paths=list(msg.focus_paths) or list(parent.spec.focus_paths),
            parent=msg.parent,
            source=f"add_subtask by {msg.agent}",
        )
        if parent.status == "active":  # a container never runs: the claim goes
            parent.claimed_by = ""
        parent.status = "pending" if parent.status != "blocked" else parent.status
        self.tasks[new_id] = TaskState(spec=spec, phase=parent.phase, updated_at=now)
        self._changed()
        return self._result(new_id, current_phase, ok=True)

    # ---- shared --------------------------------------------------------

    def _findable(self, task_id: str, current_phase: int) -> TaskRefused | None:
        task = self.tasks.get(task_id)
        if task is None:
            return _refused(f"there is no task {task_id} in this session's phases so far")
        if task.phase != current_phase:
            when = "an earlier" if task.phase < current_phase else "a later"
            return _refused(
                f"{task_id} belongs to {when} phase ({task.phase}); the session is on phase "
                f"{current_phase}",
                hint="work on the current phase's tasks: `phasegate task list`",
            )
        return None

    def _result(
        self,
        task_id: str,
        current_phase: int,
        *,
        ok: bool,
        **fields: Any,
    ) -> TaskResult:
        kids = self._children_map()
        unfinished = self.unfinished(current_phase)
        return TaskResult(
            ok=ok,
            task=self.line(task_id, current_phase, kids),
            next_task=self.next_task(current_phase),
            phase_ready=not unfinished and bool(self.leaves(current_phase)),
            **fields,
        )

    def gate_problems(self, phase: int) -> list[Problem]:
        """What a gate that requires the phase's tasks complete says (nothing when done)."""
        left = self.unfinished(phase)
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

    # ---- bounds (domain.tasks.bounds) -----------------------------------

    def compact(self, evidence_budget: int) -> None:
        task_bounds.compact(self, evidence_budget)

    def drop_raw(self) -> None:
        task_bounds.drop_raw(self)

    def step_outputs(self, task_id: str) -> list[StepOutput]:
        return list(self.tasks[task_id].context)

    def status_of(self, task_id: str) -> Literal["pending", "active", "completed", "blocked"]:
        return self.tasks[task_id].status
