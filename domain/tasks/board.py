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

import hashlib
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
from phasegate.domain.tasks._reading import BoardReading
from phasegate.domain.tasks.messages import (
    MAX_TASK_EVIDENCE_BYTES,
    AddSubtask,
    BlockTask,
    CompleteTask,
    CriterionResult,
    StartTask,
    StepOutput,
    TaskResult,
    TaskState,
)
from phasegate.domain.tasks.model import MAX_TASKS, TaskSpec
from phasegate.domain.tasks.naming import Complexity, classify, upgrade
from phasegate.domain.verify import VerifyCheck, VerifyResult

__all__ = ["MAX_SUBTASKS", "Projection", "TaskBoard"]

MAX_SUBTASKS = 50
"""Most subtasks one task is split into."""
MAX_ADDED = 300
"""Most subtasks agents add to one session (a definition's own tasks come first)."""
EVIDENCE_BUDGET = 256 * 1024
"""Completions' evidence a board keeps whole; past it the oldest keep their digest (the
evidence stays in the history of the update that took it, and in its summary file):
every query, carry and projection stays small however many tasks complete."""
MAX_ADDED_BYTES = 200_000
"""Most text (as JSON) the subtasks agents add may hold together: the board must fit
the carry of a continue-as-new whatever an agent sends."""
_LIST_HINT = "`phasegate task list` shows every task, its status and what it waits for"


def _renamed(task_id: str, phase: int) -> str:
    """A later phase's task whose id an earlier phase's task has: ``P<phase>-<id>`` (a
    valid task id; a digest keeps it unique and short when the id is long)."""
    key = f"P{phase}-{task_id}"
    if len(key) <= 64:
        return key
    return f"P{phase}-{task_id[:40]}-{hashlib.sha256(task_id.encode()).hexdigest()[:12]}"


def _checkable(spec: TaskSpec) -> bool:
    """Whether a machine checks any of the task's acceptance criteria."""
    return any(task_criteria.parse_criterion(c).kind != "claim" for c in spec.acceptance)


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


class TaskBoard(BoardReading, BaseModel):
    """Every task of the session, in definition order, with its live status."""

    tasks: dict[str, TaskState] = Field(default_factory=dict)
    version: int = Field(0, description="Bumped by every change (the projection follows).")
    complexity: Complexity | None = None
    projection: Projection = Field(default_factory=Projection)
    evidence_bytes: int = Field(0, description="Completions' evidence kept, as JSON bytes.")
    overflow: list[int] = Field(
        default_factory=list, description="Phases with more tasks than the board holds."
    )

    # ---- loading -------------------------------------------------------

    def enter_phase(self, phase: int, specs: Iterable[TaskSpec], now: datetime | None) -> None:
        """Put a phase's tasks on the board (once: a phase entered again after a rollback
        keeps its tasks' state). Ids already taken by another phase's task are kept
        apart as ``P<phase>-<id>``. Past :data:`MAX_TASKS` the phase is marked
        overflowing (its gate then says so) instead of losing tasks without a word."""
        added = False
        for spec in specs:
            key = spec.id
            if key in self.tasks:
                if self.tasks[key].phase == phase:
                    continue
                key = _renamed(spec.id, phase)
                if key in self.tasks:
                    continue
                spec = spec.model_copy(update={"id": key})
            if len(self.tasks) >= MAX_TASKS:
                if phase not in self.overflow:
                    self.overflow.append(phase)
                break
            self.tasks[key] = TaskState(
                spec=spec,
                phase=phase,
                status=spec.status,
                updated_at=now,
                completed_at=now if spec.status == "completed" else None,
                has_checks=_checkable(spec),
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
            if task.preparing:
                return _refused(
                    f"{task_id}'s pre-analysis is still running (claimed by {task.claimed_by})",
                    hint="wait for the start's answer; `phasegate task show` shows the task",
                )
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
            if self.container_due(msg.task):
                return None  # its own criteria run now that every subtask is complete
            return _refused(
                f"{msg.task} is a container: it completes when its subtasks do"
                + (" and its own criteria pass" if task.has_checks else ""),
                hint="complete its subtasks",
            )
        if task.status == "completed":
            return None  # a repeat: answered with the completion
        if task.preparing:
            return _refused(
                f"{msg.task}'s pre-analysis is still running",
                hint="wait for the start's answer, then complete it",
            )
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
        self.evidence_bytes += task_bounds.spec_bytes(task.evidence)
        if self.evidence_bytes > EVIDENCE_BUDGET:  # older completions keep a digest
            self.evidence_bytes = task_bounds.elide_oldest(self, EVIDENCE_BUDGET // 2)
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
        if task.needs_person:
            return _refused(
                f"{msg.task} is blocked until a person reopens it: {task.blocked_reason}",
                hint="a person runs `phasegate control SESSION retry_phase --reason ...`",
            )
        if task.status == "active" and task.claimed_by != msg.agent:
            return _refused(
                f"{msg.task} is claimed by {task.claimed_by}; only they block it",
                hint="block a task you claimed, or one nobody has started",
            )
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
        if parent.status == "blocked" or parent.needs_person or parent.preparing:
            why = "being prepared (pre-analysis)" if parent.preparing else "blocked"
            return _refused(
                f"{msg.parent} is {why}: {parent.blocked_reason or 'wait for it'}",
                hint="split it once it is started or pending again",
            )
        if len([t for t in self.tasks.values() if t.spec.source.startswith("add_subtask")]) >= (
            MAX_ADDED
        ):
            return _refused(f"agents have added {MAX_ADDED} subtasks to this session, the most")
        added = sum(
            task_bounds.spec_bytes(t.spec)
            for t in self.tasks.values()
            if t.spec.source.startswith("add_subtask")
        )
        if added + task_bounds.spec_bytes(msg) > MAX_ADDED_BYTES:
            return _refused(
                f"the subtasks agents added hold {added // 1024} KB of text, the most a "
                "session carries",
                hint="write shorter subtasks (a title and a few criteria)",
            )
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
            if msg.parent in self.reaches(dep):
                return _refused(
                    f"{dep} waits (through its dependencies) for {msg.parent}, which completes "
                    "only when this subtask does: a cycle",
                    where="depends_on",
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
        self.tasks[new_id] = TaskState(
            spec=spec, phase=parent.phase, updated_at=now, has_checks=_checkable(spec)
        )
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

    # ---- bounds (domain.tasks.bounds) -----------------------------------

    def compact(self, evidence_budget: int) -> None:
        task_bounds.compact(self, evidence_budget)

    def drop_raw(self) -> None:
        task_bounds.drop_raw(self)

    def clip_text(self) -> None:
        task_bounds.clip_text(self)

    def step_outputs(self, task_id: str) -> list[StepOutput]:
        return list(self.tasks[task_id].context)

    def status_of(self, task_id: str) -> Literal["pending", "active", "completed", "blocked"]:
        return self.tasks[task_id].status
