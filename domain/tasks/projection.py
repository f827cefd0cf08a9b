"""The ``.workflow/WFS-<slug>/`` files of a session's task board, rendered (pure).

Claude-Code-Workflow's folder layout (``tests/fixtures/workflow_folders/FORMAT.md``
quotes its docs; real folders sit next to it), written from durable state, never read
back as truth (``activities/task_files.py`` writes them)::

    .workflow/
    ├── .active-WFS-<slug>            the session the CLI uses by default (client side)
    └── WFS-<slug>/
        ├── workflow-session.json     session state + a ``phasegate`` object (its id)
        ├── IMPL_PLAN.md              the plan: phases, task structure, dependencies
        ├── TODO_LIST.md              ``▸`` containers, ``- [ ]``/``- [x]`` leaves, links
        ├── .task/<ID>.json           one per task (the 6-field schema, or the file it
        │                             was imported from with its status brought up to date)
        └── .summaries/<ID>-summary.md  completed tasks: summary, criteria, checks, evidence

:func:`render_files` maps each path (relative to the WFS folder) to its text. The
output is a function of the source alone: objects phasegate defines are written with
sorted keys, the documented task fields in the documented order, tasks in board order;
JSON is indented by 2 with non-ASCII kept, every file ends with a newline. Nothing
here reads a file or a clock.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from phasegate.domain.tasks.board import TaskBoard
from phasegate.domain.tasks.files import PhaseLine, TaskFilesSource
from phasegate.domain.tasks.messages import TaskState
from phasegate.domain.tasks.naming import MAX_FOLDER_CHARS, agent_for, classify

__all__ = [
    "MARKER_PREFIX",
    "PLAN_FILE",
    "SESSION_FILE",
    "SUMMARY_DIR",
    "TASK_DIR",
    "TODO_FILE",
    "WORKFLOW_DIR",
    "check_folder",
    "corrupt",
    "digest",
    "is_view_path",
    "render_files",
    "session_id_of",
]

WORKFLOW_DIR = ".workflow"
MARKER_PREFIX = ".active-"
"""``.workflow/.active-WFS-<slug>``: the marker naming the active session."""
SESSION_FILE = "workflow-session.json"
PLAN_FILE = "IMPL_PLAN.md"
TODO_FILE = "TODO_LIST.md"
TASK_DIR = ".task"
SUMMARY_DIR = ".summaries"

_WFS_NAME = re.compile(r"WFS-[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?")
_STEM = r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}"
_VIEW_PATH = re.compile(
    rf"(?:{re.escape(SESSION_FILE)}|{PLAN_FILE}|{TODO_FILE}"
    rf"|\.task/{_STEM}\.json|\.summaries/{_STEM}-summary\.md)"
)
_CCW_STATUS = {"completed": "completed", "paused": "paused", "abandoned": "abandoned"}
_LEGEND = (
    "## Status Legend\n"
    "- `▸` = Container task (has subtasks)\n"
    "- `- [ ]` = Pending leaf task\n"
    "- `- [x]` = Completed leaf task\n"
    "- `— active (...)` / `— blocked: ...` = Leaf task being worked on / blocked, and why\n"
    "- Maximum 2 levels: Main tasks and subtasks only\n"
)


def check_folder(folder: str) -> str | None:
    """Why ``folder`` is not a task folder phasegate writes (``.workflow/WFS-<slug>``,
    at most 50 characters from ``WFS-``, letters, digits, ``-`` and ``_``), or None."""
    head, _, name = folder.partition("/")
    if head != WORKFLOW_DIR or not _WFS_NAME.fullmatch(name) or len(name) > MAX_FOLDER_CHARS:
        return (
            f"{folder!r} is not a task folder: it must be {WORKFLOW_DIR}/WFS-<slug> (letters, "
            f"digits, '-' and '_'; at most {MAX_FOLDER_CHARS} characters from WFS-)"
        )
    return None


def is_view_path(rel: str) -> bool:
    """Whether ``rel`` (relative to the WFS folder) is a file a projection writes."""
    return _VIEW_PATH.fullmatch(rel) is not None and ".." not in rel


def digest(data: bytes) -> str:
    """The sha256 of a view file's bytes, as recorded in ``Projection.hashes``."""
    return hashlib.sha256(data).hexdigest()


def session_id_of(session_json: object) -> str | None:
    """The session a parsed ``workflow-session.json`` names: ``phasegate.session_id``
    when phasegate wrote it, else its own ``session_id`` (Claude-Code-Workflow's)."""
    if not isinstance(session_json, dict):
        return None
    ours = session_json.get("phasegate")
    if isinstance(ours, dict) and isinstance(ours.get("session_id"), str) and ours["session_id"]:
        return str(ours["session_id"])
    theirs = session_json.get("session_id")
    return theirs if isinstance(theirs, str) and theirs else None


# --------------------------------------------------------------------------- the board


class _Board:
    """The board as the files show it: children, derived statuses, file names."""

    def __init__(self, src: TaskFilesSource) -> None:
        self.src = src
        self.board: TaskBoard = src.board
        self.tasks = list(src.board.tasks.values())
        self.kids: dict[str, list[TaskState]] = {}
        for t in self.tasks:
            if t.spec.parent is not None and t.spec.parent in src.board.tasks:
                self.kids.setdefault(t.spec.parent, []).append(t)
        self.stems = _stems(t.spec.id for t in self.tasks)

    def status(self, t: TaskState) -> str:
        return self.board.status(t.spec.id, self.kids)

    def top_level(self, phase: int | None = None) -> list[TaskState]:
        return [
            t
            for t in self.tasks
            if (t.spec.parent is None or t.spec.parent not in self.board.tasks)
            and (phase is None or t.phase == phase)
        ]

    def ordered(self) -> list[TaskState]:
        """Tree order: each top-level task (board order) followed by its subtasks."""
        tree = [x for t in self.top_level() for x in (t, *self.kids.get(t.spec.id, []))]
        seen = {t.spec.id for t in tree}
        return tree + [t for t in self.tasks if t.spec.id not in seen]  # deeper than two

    def task_file(self, t: TaskState) -> str:
        return f"{TASK_DIR}/{self.stems[t.spec.id]}.json"

    def summary_file(self, t: TaskState) -> str:
        return f"{SUMMARY_DIR}/{self.stems[t.spec.id]}-summary.md"

    def has_summary(self, t: TaskState) -> bool:
        """A leaf completed through ``complete_task`` (a task imported as completed has
        no summary: its own ``.summaries`` file, if any, is left alone)."""
        if t.spec.id in self.kids or t.status != "completed":
            return False
        return bool(t.summary or t.evidence or t.criteria or t.verify)

    def phase_title(self, index: int) -> str:
        for p in self.src.phases:
            if p.index == index:
                return _phase_title(p)
        return f"Phase {index}"


def _stems(ids: Iterable[str]) -> dict[str, str]:
    """A file name stem per task id: the id itself, or (a renamed ``P<n>:<id>``) with
    every other character as ``_`` and ``-2``, ``-3`` added on a clash."""
    stems: dict[str, str] = {}
    used: set[str] = set()
    for task_id in ids:
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)[:72].strip(".") or "task"
        if not stem[0].isalnum():
            stem = "T" + stem
        base, n = stem, 2
        while stem.lower() in used:
            stem, n = f"{base}-{n}", n + 1
        used.add(stem.lower())
        stems[task_id] = stem
    return stems


def _phase_title(p: PhaseLine) -> str:
    if p.name and p.label and p.name != p.label:
        return f"{p.label}: {p.name}"
    return p.label or p.name or f"Phase {p.index}"


def _when(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _line(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _sorted(value: Any) -> Any:
    """``value`` with the keys of every object sorted (objects phasegate defines)."""
    if isinstance(value, dict):
        return {str(k): _sorted(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_sorted(v) for v in value]
    return value


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"


def _fence(text: str, lang: str = "") -> str:
    """``text`` in a code fence longer than any run of backticks inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}\n"


# --------------------------------------------------------------------------- entry point


def render_files(src: TaskFilesSource) -> dict[str, str]:
    """Every file of the session's WFS folder: path relative to it -> text.

    Args:
        src: What the session's ``task_files`` query answered.

    Returns:
        ``workflow-session.json``, ``IMPL_PLAN.md``, ``TODO_LIST.md``, one
        ``.task/<ID>.json`` per task and one ``.summaries/<ID>-summary.md`` per task
        completed with a summary; task files in board order.
    """
    b = _Board(src)
    files: dict[str, str] = {}
    for t in b.tasks:
        files[b.task_file(t)] = _json(_task_json(b, t))
    for t in b.tasks:
        if b.has_summary(t):
            files[b.summary_file(t)] = _summary_md(b, t)
    files[PLAN_FILE] = _plan_md(b)
    files[TODO_FILE] = _todo_md(b)
    files[SESSION_FILE] = _json(_session_json(b))
    return files


# --------------------------------------------------------------------------- JSON files


def _live(b: _Board, t: TaskState) -> dict[str, Any]:
    """What phasegate knows of the task beyond the format (the ``phasegate`` object)."""
    kids = b.kids.get(t.spec.id, [])
    live: dict[str, Any] = {
        "phase": t.phase,
        "claimed_by": t.claimed_by,
        "started_at": _when(t.started_at),
        "completed_at": _when(t.completed_at),
        "updated_at": _when(t.updated_at),
        "blocked_reason": t.blocked_reason,
        "blocked_by": t.blocked_by,
        "needs_person": t.needs_person,
        "attempts": t.attempts,
        "optional": t.spec.optional,
        "on_error": t.spec.on_error if t.spec.on_error != "fail" else None,
        "source": t.spec.source,
        "progress": f"{sum(k.status == 'completed' for k in kids)}/{len(kids)}" if kids else None,
        "subtasks": [k.spec.id for k in kids],
    }
    if not kids and t.status == "pending":
        live["waiting_for"] = b.board.waiting_for(t.spec.id, b.src.current_phase, b.kids)
    return _sorted(
        {k: v for k, v in live.items() if v not in (None, "", False, [], 0)} | {"phase": t.phase}
    )


def _task_json(b: _Board, t: TaskState) -> dict[str, Any]:
    """The task file: its imported object brought up to date, or the 6-field schema."""
    spec, status = t.spec, b.status(t)
    if spec.raw is not None:
        data = copy.deepcopy(spec.raw)
        data["task_id" if "task_id" in data and "id" not in data else "id"] = spec.id
        data["status"] = status
        data["phasegate"] = _live(b, t)
        return data
    context: dict[str, Any] = {
        "requirements": list(spec.requirements),
        "focus_paths": list(spec.focus_paths),
        "acceptance": list(spec.acceptance),
    }
    if spec.parent is not None:
        context["parent"] = spec.parent
    context["depends_on"] = list(spec.depends_on)
    if spec.description:
        context["description"] = spec.description
    return {
        "id": spec.id,
        "title": spec.title,
        "status": status,
        "meta": {
            "type": spec.type or "feature",
            "agent": agent_for(spec.type, spec.title, spec.agent),
        },
        "context": context,
        "flow_control": {
            "pre_analysis": [_step(s.model_dump()) for s in spec.pre_analysis],
            "implementation_approach": [
                {
                    "step": n,
                    "title": _line(text, 120),
                    "description": text,
                    "modification_points": [],
                    "logic_flow": [],
                    "depends_on": [],
                    "output": "",
                }
                for n, text in enumerate(spec.implementation_approach, 1)
            ],
            "target_files": list(spec.target_files),
        },
        "phasegate": _live(b, t),
    }


def _step(step: dict[str, Any]) -> dict[str, Any]:
    """A pre-analysis step in the documented field order, empty fields left out."""
    order = ("step", "action", "command", "output_to", "on_error")
    return {k: step[k] for k in order if step.get(k) or k in ("step", "on_error")}


def _session_json(b: _Board) -> dict[str, Any]:
    src = b.src
    name = src.folder.rsplit("/", 1)[-1]
    phases = src.phases or [
        PhaseLine(index=i, label=f"Phase {i}", name="", status="")
        for i in sorted({t.phase for t in b.tasks})
    ]
    data: dict[str, Any] = {
        "session_id": name,
        "project": src.name or src.description or name,
        "description": src.description,
        "type": b.board.complexity or classify(len(b.tasks)),
        "current_phase": b.phase_title(src.current_phase),
        "status": _CCW_STATUS.get(src.status, "active"),
        "created_at": _when(src.started_at),
        "updated_at": _when(src.updated_at),
        "progress": {
            "completed_phases": [_phase_title(p) for p in phases if p.status == "completed"],
            "current_tasks": [
                t.spec.id for t in b.tasks if t.status == "active" and t.spec.id not in b.kids
            ],
        },
        "task_count": len(b.tasks),
        "phases": [
            {
                "id": f"phase-{p.index}",
                "name": _phase_title(p),
                "status": p.status,
                "tasks": [t.spec.id for t in b.ordered() if t.phase == p.index],
            }
            for p in phases
        ],
        "phasegate": _sorted(
            {
                "session_id": src.session_id,
                "workflow_type": src.workflow_type,
                "status": src.status,
                "current_phase": src.current_phase,
                "total_phases": src.total_phases,
                "version": b.board.version,
            }
        ),
    }
    return {k: v for k, v in data.items() if v not in (None, "")}


# --------------------------------------------------------------------------- TODO_LIST.md


def _todo_md(b: _Board) -> str:
    title = b.src.name or b.src.folder.rsplit("/", 1)[-1]
    out = [f"# Tasks: {_line(title)}", "", "## Task Progress"]
    phases = sorted({t.phase for t in b.tasks})
    if not b.tasks:
        out.append("_No tasks yet._")
    for phase in phases:
        if len(phases) > 1:
            out += ["", f"### {_line(b.phase_title(phase))}", ""]
        group: list[str] = []
        for t in b.top_level(phase):
            kids = b.kids.get(t.spec.id, [])
            if kids and group:
                group.append("")
            group.append(_todo_line(b, t))
            group += ["  " + _todo_line(b, k) for k in kids]
            if kids:
                group.append("")
        while group and not group[-1]:
            group.pop()
        out += group
    out += ["", _LEGEND.rstrip("\n"), "", _generated(b)]
    return "\n".join(out) + "\n"


def _todo_line(b: _Board, t: TaskState) -> str:
    head = f"**{t.spec.id}**: {_line(t.spec.title)} → [📋](./{b.task_file(t)})"
    kids = b.kids.get(t.spec.id, [])
    if kids:
        done = sum(k.status == "completed" for k in kids)
        return f"▸ {head} ({done}/{len(kids)} done)"
    box = "x" if t.status == "completed" else " "
    line = f"- [{box}] {head}"
    if b.has_summary(t):
        line += f" | [✅](./{b.summary_file(t)})"
    if t.status == "active":
        line += f" — active ({t.claimed_by})" if t.claimed_by else " — active"
    elif t.status == "blocked":
        line += f" — blocked: {_line(t.blocked_reason, 120)}"
    if t.spec.optional:
        line += " _(optional)_"
    return line


def _generated(b: _Board) -> str:
    return (
        f"<!-- generated by phasegate from session {b.src.session_id}: edits here are "
        "overwritten; change tasks with `phasegate task ...` -->"
    )


# --------------------------------------------------------------------------- IMPL_PLAN.md


def _plan_md(b: _Board) -> str:
    src = b.src
    name = src.folder.rsplit("/", 1)[-1]
    title = _line(src.name or name)
    where = f"{src.status}, on {b.phase_title(src.current_phase)}"
    size = f"{b.board.complexity or classify(len(b.tasks))} ({_count(len(b.tasks), 'task')})"
    out = [
        "---",
        f"identifier: {name}",
        f'source: "phasegate session {src.session_id}"',
        f'workflow_type: "{src.workflow_type}"',
        "---",
        "",
        f"# Implementation Plan: {title}",
        "",
        "## 1. Summary",
        src.description.strip() or "_No description._",
        "",
        f"**Session**: `{src.session_id}` ({src.workflow_type}), {where}",
        f"**Complexity**: {size}",
        "",
        "## 2. Phases",
        "",
        "| # | Phase | Status | Tasks |",
        "|---|---|---|---|",
    ]
    for p in src.phases:
        count = sum(t.phase == p.index for t in b.tasks)
        out.append(f"| {p.index} | {_cell(_phase_title(p))} | {p.status} | {count} |")
    if not src.phases:
        out[-2:] = ["_No phases._"]
    out += ["", *_breakdown(b), "", "## 4. Tasks"]
    for t in b.ordered():
        out += ["", *_plan_task(b, t)]
    out += ["", _generated(b)]
    return "\n".join(out) + "\n"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _cell(text: str) -> str:
    return _line(text).replace("|", "\\|")


def _breakdown(b: _Board) -> list[str]:
    containers = sum(1 for t in b.tasks if t.spec.id in b.kids)
    shape = "two-level hierarchy" if containers else "flat"
    leaves = _count(len(b.tasks) - containers, "leaf task")
    out = [
        "## 3. Task Breakdown Summary",
        "",
        "### Task Count",
        f"**{_count(len(b.tasks), 'task')}** ({shape}: {_count(containers, 'container')}, {leaves})",
        "",
        "### Task Structure",
    ]
    for t in b.top_level():
        out.append(f"- **{t.spec.id}**: {_line(t.spec.title)} ({b.status(t)})")
        out += [
            f"  - **{k.spec.id}**: {_line(k.spec.title)} ({b.status(k)})"
            for k in b.kids.get(t.spec.id, [])
        ]
    deps = [t for t in b.ordered() if t.spec.depends_on]
    out += ["", "### Dependencies"]
    out += [f"- **{t.spec.id}** depends on {', '.join(t.spec.depends_on)}" for t in deps]
    if not deps:
        out.append("None.")
    return out


def _plan_task(b: _Board, t: TaskState) -> list[str]:
    spec = t.spec
    meta = (
        f"**Status**: {b.status(t)} · **Type**: {spec.type or 'feature'} · **Agent**: "
        f"{agent_for(spec.type, spec.title, spec.agent)} · **Phase**: {b.phase_title(t.phase)}"
    )
    out = [f"### {spec.id}: {_line(spec.title)}", meta]
    if spec.parent:
        out.append(f"**Parent**: {spec.parent}")
    if spec.depends_on:
        out.append(f"**Depends on**: {', '.join(spec.depends_on)}")
    if spec.description:
        out += ["", spec.description.strip()]
    for label, items in (
        ("Requirements", spec.requirements),
        ("Acceptance Criteria", spec.acceptance),
        ("Focus Paths", [f"`{p}`" for p in spec.focus_paths]),
        ("Target Files", [f"`{p}`" for p in spec.target_files]),
    ):
        if items:
            out += ["", f"**{label}**:", *(f"- {_line(i, 1000)}" for i in items)]
    return out


# --------------------------------------------------------------------------- summaries


def _summary_md(b: _Board, t: TaskState) -> str:
    out = [
        f"# Task: {t.spec.id} {_line(t.spec.title)}",
        "",
        "## Implementation Summary",
        "",
        t.summary.strip() or "_No summary given._",
    ]
    if t.criteria:
        out += ["", "### Acceptance Criteria", ""]
        for c in t.criteria:
            if c.passed is None:
                out.append(f"- [x] {_line(c.criterion, 1000)} _(claimed, not checked)_")
            else:
                mark, word = ("x", "checked") if c.passed else (" ", "failed")
                how = f" by `{c.check}`" if c.check else ""
                out.append(f"- [{mark}] {_line(c.criterion, 1000)} _({word}{how})_")
    if t.verify:
        out += [
            "",
            "### Verification",
            "",
            "| Check | Kind | Result | Detail |",
            "|---|---|---|---|",
        ]
        for r in t.verify:
            result = "passed" if r.passed else "failed"
            out.append(f"| {_cell(r.name)} | {r.kind} | {result} | {_cell(r.message)} |")
    if t.evidence:
        evidence = json.dumps(_sorted(t.evidence), indent=2, ensure_ascii=False, default=str)
        out += ["", "### Evidence", "", _fence(evidence, "json").rstrip("\n")]
    by = f" by {t.claimed_by}" if t.claimed_by else ""
    out += [
        "",
        "## Status: ✅ Complete",
        "",
        f"**Completed**: {_when(t.completed_at) or 'unknown'}{by}"
        + (f" (attempt {t.attempts})" if t.attempts > 1 else ""),
    ]
    return "\n".join(out) + "\n"


def corrupt(rel: str, data: bytes) -> bool:
    """A view file that is not UTF-8 text, or (a ``.json`` file) not JSON: rebuilt."""
    try:
        text = data.decode("utf-8")
        if rel.endswith(".json"):
            json.loads(text)
    except ValueError:
        return True
    return False
