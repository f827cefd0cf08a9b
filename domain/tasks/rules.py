"""The rules of a ``.workflow/WFS-*`` task folder (pure: its task files come in parsed).

Claude-Code-Workflow's nine validation rules (``workflow-architecture.md`` @ ``4cf66b41``,
quoted in ``tests/fixtures/workflow_folders/FORMAT.md``) and task-core's "No circular
dependencies". Real folders break the docs in recurring ways: each rule separates what
imports faithfully (a known variant, normalized, with a warning) from what cannot run
(an error). Every problem is reported at once, a :class:`TaskIssue` with a stable code
(:data:`MESSAGES`): ``<file>: <task id>: <field>: what is wrong``, and what to write.

====================================  =========================================================
rule                                  errors / warnings
====================================  =========================================================
1 ID Uniqueness                       ``duplicate_id`` / ``id_from_task_id``,
                                      ``id_from_file_name``, ``id_file_mismatch``
2 Hierarchical Format                 ``id_missing``, ``id_invalid``, ``too_deep`` (3 levels) /
                                      ``id_format`` (not IMPL-N[.M], e.g. ``ANALYSIS-001``)
3 Parent References                   ``parent_unknown``, ``parent_mismatch`` /
                                      ``container_created`` (``IMPL-1.1`` without
                                      ``IMPL-1.json``: the container is made from the id)
4 Status Consistency                  ``status_unknown`` / ``status_variant`` (``active``,
                                      ``in_progress``, ``blocked``, ``failed``, ``skipped``),
                                      ``container_without_subtasks``
5 Required Fields                     ``not_an_object`` / ``fields_missing``, ``title_missing``,
                                      ``field_elsewhere`` (``context.acceptance_criteria``...)
6 Focus Paths Structure               ``focus_path_form`` (wildcards, ``./``, absolute)
7 Flow Control Format                 ``pre_analysis_form`` (strings or an object: kept as
                                      instructions), ``pre_analysis_step`` (a field missing)
8 Dependency Integrity                ``depends_unknown``, ``too_many_dependencies`` /
                                      ``depends_elsewhere`` (seven other places),
                                      ``depends_from_blocks``, ``blocks_unknown``
9 Artifacts Structure                 ``artifact_form``
no circular dependencies (task-core)  ``cycle`` (through containers too: see ``_cycles``)
====================================  =========================================================

Both schemas are read: the 6-field one (``context.*``, ``flow_control.*``, ids
``IMPL-N[.M]``) and the unified flat one (``convergence`` present: any id prefix, no
subtasks, ``depends_on`` at the top). :func:`resolve_tasks` reads each task's identity,
status, parent and dependencies; ``activities/task_folders.py`` maps the rest to a
``TaskSpec`` and reports its own issues (a field clipped, a step that cannot run).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from phasegate.domain.tasks.model import ID_PATTERN, MAX_DEPENDENCIES

__all__ = [
    "BLOCK_PLACES",
    "DEPENDENCY_PLACES",
    "ERRORS",
    "FIELD_PLACES",
    "MESSAGES",
    "FolderTask",
    "RawTask",
    "TaskIssue",
    "check_tasks",
    "get",
    "issue",
    "natural_key",
    "resolve_tasks",
]

_ID = re.compile(ID_PATTERN)
_IMPL_ID = re.compile(r"^IMPL-\d+(?:\.\d+)?$")
_DOTTED = re.compile(r"^(.+)\.(\d+)$")
_OLD_REQUIRED = ("id", "title", "status", "meta", "context", "flow_control")
_NEW_REQUIRED = ("id", "title", "description", "depends_on", "convergence")
_PRIORITIES = ("highest", "high", "medium", "low")
_CANONICAL_DEPS = ("context.depends_on", "depends_on")

DEPENDENCY_PLACES = (
    "context.depends_on", "depends_on", "meta.depends_on", "meta.dependencies",
    "dependencies.depends_on", "dependencies", "flow_control.requires", "blocked_by",
    "meta.blocked_by",
)  # fmt: skip
"""Where real task files write a task's dependencies (the first two are the format's)."""
BLOCK_PLACES = ("blocks", "dependencies.blocks", "flow_control.blocks", "meta.blocks")
"""Where real files write the tasks a task blocks (they then depend on it)."""
FIELD_PLACES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "acceptance": (
        ("context.acceptance", "convergence.criteria"),
        ("context.acceptance_criteria", "acceptance_criteria", "acceptance"),
    ),
    "requirements": (("context.requirements",), ("requirements",)),
    "focus_paths": (("context.focus_paths", "focus_paths"), ("meta.focus_paths",)),
    "target_files": (("flow_control.target_files", "files"), ("target_files",)),
    "implementation_approach": (
        ("flow_control.implementation_approach", "implementation"),
        ("context.implementation_approach", "flow_control.implementation",
         "flow_control.implementation_steps"),
    ),
    "pre_analysis": (("flow_control.pre_analysis", "pre_analysis"), ("context.pre_analysis",)),
}  # fmt: skip
"""TaskSpec field -> (the format's places: 6-field, unified; places real files use)."""

# written status -> (the status the task starts with, why it changed)
_STATUSES: dict[str, tuple[Literal["pending", "completed"], str]] = {
    "pending": ("pending", ""),
    "completed": ("completed", ""),
    "container": ("pending", ""),  # derived from the subtasks on the board
    "active": ("pending", "nobody holds it in this session, so it is pending"),
    "in_progress": ("pending", "nobody holds it in this session, so it is pending"),
    "blocked": ("pending", "blocked means waiting for dependencies, which the board tracks"),
    "failed": ("pending", "it is pending, to be done again"),
    "skipped": ("completed", "it counts as completed"),
}


# code -> "severity | what is wrong | what to write" (str.format templates, {task} and {field} known)
MESSAGES: dict[str, str] = {
    "duplicate_id": "error | {task} is also the id of {other} | give every task its own id and file",
    "id_from_task_id": 'warning | the id is written as task_id | write "id": "{task}" instead of "task_id"',
    "id_from_file_name": 'warning | no id; the file name gives it | write "id": "{task}"',
    "id_file_mismatch": "warning | the file is named {stem}.json | rename the file {task}.json, or write the id {stem}",
    "id_missing": 'error | no id, and the file name is not one | write "id": "IMPL-1" and name the file IMPL-1.json',
    "id_invalid": "error | {value!r} cannot be a task id (letters, digits, '.', '_', '-'; at most 64 characters) | write an id such as \"IMPL-1\" or \"IMPL-1.2\"",
    "id_format": "warning | not the format's IMPL-N or IMPL-N.M | name tasks IMPL-N (subtasks IMPL-N.M), each file after its id",
    "too_deep": "error | a subtask of {parent}, itself a subtask of {grand}: at most 2 levels (IMPL-N.M) | make it a subtask of {grand}, or a task of its own",
    "parent_unknown": "error | names {parent}, which no task file defines | add .task/{parent}.json, or correct {field}",
    "parent_mismatch": "error | names {parent}, but the id makes it a subtask of {dotted} | write {dotted} in {field}, or renumber the task {parent}.N",
    "container_created": "warning | its container {parent} has no task file; {parent} is created as the container of {kids} | add .task/{parent}.json with the container's title",
    "status_unknown": "error | {value!r} is not a status | write one of pending, active, completed, blocked, container",
    "status_variant": 'warning | {value!r}: {why} | write "status": "{kept}"',
    "container_without_subtasks": 'warning | a container with no subtasks; it is imported as a task to do | add {task}.1, or write "status": "pending"',
    "not_an_object": 'error | the file holds a JSON {kind}, not a task object | write one object: {{"id": "IMPL-1", "title": "...", ...}}',
    "fields_missing": "warning | the {schema} schema requires {required}; this task has no {missing} | add {missing} to the task object",
    "title_missing": 'warning | no title; the id stands in for it | write "title": "what the task does"',
    "field_elsewhere": "warning | read from where the format does not write it: {moved} | move each to its documented place ({documented})",
    "focus_path_form": "warning | {value!r} is not a concrete path from the project root | write paths such as src/auth: no wildcards, ./ or leading /",
    "pre_analysis_form": 'warning | {what}; {kept} | write a list of {{"step": "name", "action": "what", "command": "bash(...)"}}',
    "pre_analysis_step": 'warning | step(s) {steps} have no {missing} (a step has step, action and command) | write {{"step": "name", "action": "what", "command": "bash(...)"}}',
    "depends_unknown": "error | depends on {dep}, which no task file defines | add .task/{dep}.json, or remove {dep} from {field}",
    "depends_elsewhere": "warning | dependencies read from {places} (the format writes context.depends_on; the unified schema depends_on) | write the ids in {canonical}",
    "depends_from_blocks": "warning | also waits for {dep}, whose blocks names {task} | write {dep} in {field}",
    "blocks_unknown": "warning | blocks {dep}, which no task file defines; ignored | remove {dep} from {field}",
    "too_many_dependencies": "error | {count} dependencies; at most {limit} | depend on a container instead of each of its subtasks",
    "artifact_form": 'warning | not an artifact with a path and a priority ({priorities}) | write {{"type": "...", "path": "...", "priority": "high"}}',
    "cycle": "error | circular dependency: {path} ({steps}) | remove one of these dependencies",
}
"""Every rule's issue code, its severity (an error stops the import) and its words."""
ERRORS = frozenset(code for code, text in MESSAGES.items() if text.startswith("error"))


class RawTask(BaseModel):
    """One task file as read: its path in the folder (``.task/IMPL-1.json``) and its
    parsed JSON (whatever it holds: the rules say what is wrong with it)."""

    file: str
    data: Any


class TaskIssue(BaseModel):
    """One problem: an error stops the import, a warning says what was normalized."""

    code: str
    severity: Literal["error", "warning"]
    file: str
    task: str
    field: str
    message: str
    hint: str

    @property
    def detail(self) -> str:
        """The message without its ``file: task: field:`` prefix."""
        return self.message.removeprefix(f"{self.file}: {self.task}: {self.field}: ")


def issue(
    code: str, file: str, task: str, where: str, *, table: dict[str, str] = MESSAGES, **values: Any
) -> TaskIssue:
    """The issue ``code`` of ``task`` in ``file`` at field ``where``, worded by ``table``
    (:data:`MESSAGES`, or the importer's own) with ``values``."""
    severity, what, hint = table[code].split(" | ", 2)
    names = {"task": task, "field": where, **values}
    return TaskIssue(
        code=code,
        severity="error" if severity == "error" else "warning",
        file=file,
        task=task or "?",
        field=where,
        message=f"{file}: {task or '?'}: {where}: {what.format(**names)}",
        hint=hint.format(**names),
    )


@dataclass
class FolderTask:
    """A task as the rules read it: identity, start status, parent, dependencies.

    ``data`` is the file's object (empty for a container created from its subtasks'
    ids); ``created`` lists the subtasks of such a container."""

    id: str
    file: str
    data: dict[str, Any]
    unified: bool = False
    title: str = ""
    status: Literal["pending", "completed"] = "pending"
    parent: str | None = None
    parent_field: str = ""
    deps: list[str] = field(default_factory=list)
    deps_field: str = "context.depends_on"
    blocks: list[str] = field(default_factory=list)
    blocks_field: str = "blocks"
    created: list[str] = field(default_factory=list)


class _Found(list[TaskIssue]):
    def add(self, code: str, t: FolderTask | tuple[str, str], where: str, **values: Any) -> None:
        file, task = (t.file, t.id) if isinstance(t, FolderTask) else t
        self.append(issue(code, file, task, where, **values))


def natural_key(task_id: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting ``IMPL-2`` before ``IMPL-10`` and ``IMPL-1.2`` before ``IMPL-1.10``."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", task_id) if p)


def get(data: Any, path: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"``; None where a level is missing or not an object."""
    for part in path.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def check_tasks(tasks: list[RawTask]) -> list[TaskIssue]:
    """Every problem of a folder's task files, errors and warnings, at once."""
    return resolve_tasks(tasks)[1]


def resolve_tasks(tasks: list[RawTask]) -> tuple[list[FolderTask], list[TaskIssue]]:
    """The tasks as the rules read them, in id order (containers the folder lacks
    created), and every issue. With errors, the tasks are what could be read."""
    found = _Found()
    read = [t for t in (_read(raw, found) for raw in tasks) if t is not None]
    by_id: dict[str, FolderTask] = {}
    for t in read:
        first = by_id.setdefault(t.id, t)
        if first is not t:
            found.add("duplicate_id", t, "id", other=first.file)
    _hierarchy(by_id, found)
    _dependencies(by_id, found)
    _cycles(by_id, found)
    return sorted(by_id.values(), key=lambda t: natural_key(t.id)), list(found)


# ---------------------------------------------------------------- one task file


def _read(raw: RawTask, found: _Found) -> FolderTask | None:
    data = raw.data
    if not isinstance(data, dict):
        name = type(data).__name__
        kind = {"list": "array", "str": "string", "NoneType": "null"}.get(name, name)
        found.add("not_an_object", (raw.file, ""), "(file)", kind=kind)
        return None
    task_id = _identify(raw.file, data, found)
    if task_id is None:
        return None
    t = FolderTask(id=task_id, file=raw.file, data=data, unified="convergence" in data)
    required = _NEW_REQUIRED if t.unified else _OLD_REQUIRED
    missing = [k for k in required if k != "id" and k not in data]
    if missing:
        schema = "unified" if t.unified else "6-field"
        found.add(
            "fields_missing",
            t,
            missing[0],
            schema=schema,
            required=", ".join(required),
            missing=", ".join(missing),
        )
    if not t.unified and not _IMPL_ID.match(t.id):
        found.add("id_format", t, "id")
    title = data.get("title")
    if not isinstance(title, str) or not title.strip():
        found.add("title_missing", t, "title")
    t.title = title.strip() if isinstance(title, str) and title.strip() else t.id
    t.status = _status(t, found)
    _places(t, found)
    _parent(t, found)
    t.deps, t.deps_field = _ids(t, DEPENDENCY_PLACES, found, depends=True)
    t.blocks, t.blocks_field = _ids(t, BLOCK_PLACES, found, depends=False)
    _artifacts(t, found)
    return t


def _identify(file: str, data: dict[str, Any], found: _Found) -> str | None:
    stem = file.rsplit("/", 1)[-1].removesuffix(".json")
    key = "id" if "id" in data else "task_id" if "task_id" in data else ""
    value = data.get(key) if key else None
    if value is None:
        if not _ID.match(stem):
            found.add("id_missing", (file, ""), "id")
            return None
        found.add("id_from_file_name", (file, stem), "id")
        return stem
    text = str(value).strip()
    if not isinstance(value, (str, int)) or not _ID.match(text):
        found.add("id_invalid", (file, ""), key, value=text[:80])
        return None
    if key == "task_id":
        found.add("id_from_task_id", (file, text), "task_id")
    if text != stem:
        found.add("id_file_mismatch", (file, text), "id", stem=stem)
    return text


def _status(t: FolderTask, found: _Found) -> Literal["pending", "completed"]:
    written = t.data.get("status", "pending")
    key = written.strip().lower().replace("-", "_") if isinstance(written, str) else ""
    if key not in _STATUSES:
        found.add("status_unknown", t, "status", value=written)
        return "pending"
    kept, why = _STATUSES[key]
    if why or key != written:
        found.add(
            "status_variant", t, "status", value=written, why=why or f"read as {key}", kept=kept
        )
    return kept


def _places(t: FolderTask, found: _Found) -> None:
    """Fields found where the format does not write them (rule 5), focus paths (rule 6)
    and the pre-analysis steps' shape (rule 7)."""
    moved, documented = [], []
    for name, (canonical, other) in FIELD_PLACES.items():
        place = next((p for p in (*canonical, *other) if get(t.data, p) is not None), None)
        if place in other:
            moved.append(place if place.endswith(name) else f"{place} as {name}")
            documented.append(canonical[1] if t.unified else canonical[0])
        if name == "focus_paths" and isinstance(get(t.data, place or ""), list):
            for path in get(t.data, place or ""):
                if isinstance(path, str) and (
                    any(c in path for c in "*?[") or path.startswith(("/", "./", "~"))
                ):
                    found.add("focus_path_form", t, place or "", value=path)
        if name == "pre_analysis" and place is not None:
            _steps_shape(t, place, get(t.data, place), found)
    if moved:
        found.add(
            "field_elsewhere",
            t,
            moved[0].split(" as ")[0],
            moved=", ".join(moved),
            documented=", ".join(documented),
        )


def _steps_shape(t: FolderTask, place: str, value: Any, found: _Found) -> None:
    if isinstance(value, dict):
        keys = ", ".join(list(value)[:5])
        found.add(
            "pre_analysis_form",
            t,
            place,
            what=f"an object ({keys}), not a list of steps",
            kept="each entry is kept as an instruction for the agent",
        )
        return
    if not isinstance(value, list):
        found.add(
            "pre_analysis_form",
            t,
            place,
            what=f"a {type(value).__name__}, not a list of steps",
            kept="it is ignored",
        )
        return
    texts = sum(isinstance(v, str) for v in value)
    if texts:
        found.add(
            "pre_analysis_form",
            t,
            place,
            what=f"{texts} step(s) are plain text",
            kept="each is kept as an instruction for the agent",
        )
    lacking: dict[str, list[str]] = {}
    for n, step in enumerate(value):
        if isinstance(step, dict):
            command = step.get("command") or step.get("commands")
            has = {"step": step.get("step"), "action": step.get("action"), "command": command}
            missing = ", ".join(k for k, v in has.items() if not v)
            if missing:
                lacking.setdefault(missing, []).append(str(n))
    for missing, steps in lacking.items():
        found.add("pre_analysis_step", t, place, steps=", ".join(steps), missing=missing)


def _parent(t: FolderTask, found: _Found) -> None:
    for place in ("context.parent", "parent"):
        value = get(t.data, place)
        if value:
            t.parent, t.parent_field = str(value).strip(), place
            break
    dotted = None if t.unified else _DOTTED.match(t.id)
    if dotted and t.parent is not None and t.parent != dotted.group(1):
        found.add("parent_mismatch", t, t.parent_field, parent=t.parent, dotted=dotted.group(1))
    elif dotted and t.parent is None:
        t.parent, t.parent_field = dotted.group(1), "id"


def _ids(
    t: FolderTask, places: Iterable[str], found: _Found, *, depends: bool
) -> tuple[list[str], str]:
    ids: list[str] = []
    used: list[str] = []
    for place in places:
        value = get(t.data, place)
        if isinstance(value, str):
            value = [v for v in re.split(r"[,\s]+", value) if v]
        if isinstance(value, list):
            used.append(place)
            ids += [str(v).strip() for v in value if str(v).strip()]
    other = [p for p in used if p not in _CANONICAL_DEPS]
    canonical = _CANONICAL_DEPS[1] if t.unified else _CANONICAL_DEPS[0]
    if depends and other:
        found.add("depends_elsewhere", t, other[0], places=", ".join(other), canonical=canonical)
    return list(dict.fromkeys(ids)), used[0] if used else canonical


def _artifacts(t: FolderTask, found: _Found) -> None:
    place = "context.artifacts" if get(t.data, "context.artifacts") is not None else "artifacts"
    value = get(t.data, place)
    for n, item in enumerate(
        value if isinstance(value, list) else [] if value is None else [value]
    ):
        path = item.get("path") if isinstance(item, dict) else None
        priority = item.get("priority", "medium") if isinstance(item, dict) else None
        if not isinstance(path, str) or not path or priority not in _PRIORITIES:
            found.add("artifact_form", t, f"{place}[{n}]", priorities=", ".join(_PRIORITIES))


# ---------------------------------------------------------------- across tasks


def _hierarchy(by_id: dict[str, FolderTask], found: _Found) -> None:
    """Parents exist (for an ``IMPL-N.M`` id the container is created when its file is
    missing), containers have subtasks, and there are at most 2 levels."""
    for t in sorted(by_id.values(), key=lambda t: natural_key(t.id)):
        if t.parent is None or t.parent in by_id:
            continue
        if t.parent_field != "id" and not t.id.startswith(t.parent + "."):
            found.add("parent_unknown", t, t.parent_field, parent=t.parent)
            t.parent = None
            continue
        kids = sorted(
            (k for k in by_id.values() if k.parent == t.parent), key=lambda k: natural_key(k.id)
        )
        phases = {str(get(k.data, "meta.phase") or "") for k in kids}
        title = phases.pop() if len(phases) == 1 and "" not in phases else t.parent
        dotted = _DOTTED.match(t.parent)
        by_id[t.parent] = FolderTask(
            id=t.parent,
            file=t.file,
            data={},
            title=title,
            parent=dotted.group(1) if dotted else None,
            parent_field="id",
            created=[k.id for k in kids],
        )
        found.add("container_created", t, "id", parent=t.parent, kids=", ".join(k.id for k in kids))
    for t in by_id.values():
        has_kids = any(k.parent == t.id for k in by_id.values())
        if not has_kids and str(t.data.get("status", "")).lower() == "container":
            found.add("container_without_subtasks", t, "status")
        parent = by_id.get(t.parent or "")
        if parent is not None and parent.parent is not None:
            found.add("too_deep", t, t.parent_field, parent=parent.id, grand=parent.parent)


def _dependencies(by_id: dict[str, FolderTask], found: _Found) -> None:
    for t in list(by_id.values()):
        for dep in t.deps:
            if dep not in by_id:
                found.add("depends_unknown", t, t.deps_field, dep=dep)
        for blocked in t.blocks:
            other = by_id.get(blocked)
            if other is None:
                found.add("blocks_unknown", t, t.blocks_field, dep=blocked)
            elif t.id not in other.deps:
                other.deps.append(t.id)
                found.add("depends_from_blocks", other, other.deps_field, dep=t.id)
    for t in by_id.values():
        if len(t.deps) > MAX_DEPENDENCIES:
            found.add(
                "too_many_dependencies", t, t.deps_field, count=len(t.deps), limit=MAX_DEPENDENCIES
            )


def _cycles(by_id: dict[str, FolderTask], found: _Found) -> None:
    """Circular waits: a task waits for its dependencies, a container for its subtasks,
    a subtask for its container's dependencies (so a task depending on its own
    container, or a container on its own subtask, is a cycle too)."""
    why: dict[tuple[str, str], str] = {}
    for t in by_id.values():
        for dep in (d for d in t.deps if d in by_id):
            why.setdefault((t.id, dep), f"{t.id} depends on {dep}")
        parent = by_id.get(t.parent or "")
        if parent is None:
            continue
        why.setdefault((parent.id, t.id), f"{parent.id} is complete when its subtask {t.id} is")
        for dep in (d for d in parent.deps if d in by_id):
            why.setdefault(
                (t.id, dep), f"{t.id} waits for {dep}, which its container {parent.id} depends on"
            )
    succ: dict[str, list[str]] = {k: [] for k in by_id}
    for a, b in why:
        succ[a].append(b)
    for nodes in _sccs(sorted(by_id, key=natural_key), succ):
        if len(nodes) == 1 and (nodes[0], nodes[0]) not in why:
            continue
        path = _cycle(min(nodes, key=natural_key), set(nodes), succ)
        pairs = list(itertools.pairwise(path))
        culprit = next((by_id[a] for a, b in pairs if b in by_id[a].deps), by_id[path[0]])
        found.add(
            "cycle",
            culprit,
            culprit.deps_field,
            path=" → ".join(path),
            steps="; ".join(why[p] for p in pairs),
        )


def _sccs(nodes: Iterable[str], succ: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of ``succ`` (Tarjan's, without recursion: a folder
    may hold a thousand tasks), each in the order found."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        work = [(root, iter(sorted(succ[root], key=natural_key)))]
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(succ[nxt], key=natural_key))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    cut = stack.index(node)
                    out.append(stack[cut:])
                    on.difference_update(stack[cut:])
                    del stack[cut:]
    return out


def _cycle(start: str, within: set[str], succ: dict[str, list[str]]) -> list[str]:
    """A shortest path from ``start`` back to itself inside one component."""
    back: dict[str, str] = {}
    frontier = [start]
    while frontier:
        later: list[str] = []
        for node in frontier:
            for nxt in sorted(succ[node], key=natural_key):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(back[path[-1]])
                    return [*reversed(path), start]
                if nxt in within and nxt not in back:
                    back[nxt] = node
                    later.append(nxt)
        frontier = later
    return [start, start]
