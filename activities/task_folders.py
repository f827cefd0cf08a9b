"""Import a ``.workflow/WFS-*`` folder (Claude-Code-Workflow's task folder) as a spec.

A session whose ``spec_path`` names such a folder (it holds ``.task/`` or
``workflow-session.json``) runs its tasks: :func:`read_source` is how a session reads
its spec, a task folder through :func:`read_task_folder`, anything else through
``activities.tasks_md.read_spec``. What is read:

* ``workflow-session.json``: the session's title (``project``, else ``topic``, else
  ``session_id``, else the folder's name);
* ``.task/*.json``: each task, in either schema, checked by ``domain.tasks.rules`` (every
  error at once in one ``TaskFileInvalid``; warnings become the spec's warnings) and
  mapped to a ``TaskSpec`` (``activities._task_folder_specs``). Statuses are kept: a
  completed task starts completed.

``IMPL_PLAN.md``, ``TODO_LIST.md`` and ``.summaries/`` are views of the task files (the
format says so) and are not read. The phases, by ``layout``:

* ``per_task``: one phase per top-level task, in dependency order (ties in id order),
  holding the task, or the container followed by its subtasks;
* ``stages``: the format's PLAN / IMPLEMENT (every task) / REVIEW.

Reads are held to the same folders and bounds as a tasks.md (the target and the
worker's spec roots, regular files, symlinks checked on the file opened): at most
``MAX_TASKS`` task files, each at most 256 KiB, all together at most ``limit``.
``sha256`` is over the files read (sorted relative path and bytes; and the layout, when
it is ``stages``): the snapshot id, so a changed file is a different spec.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import phasegate.activities._safe_read as safe_read
from phasegate.activities._task_folder_specs import IMPORT_MESSAGES, RAW_BUDGET, task_spec
from phasegate.activities.tasks_md import SPEC_LIMIT, read_spec
from phasegate.activities.tasks_md._input import _contain, _contained_hint
from phasegate.domain.errors import DefinitionError, SpecParseError, TaskFileInvalid
from phasegate.domain.spec import ParsedSpec, ParseWarning, SpecPhase, SpecTask
from phasegate.domain.tasks.from_spec import dependency_cycle
from phasegate.domain.tasks.model import MAX_TASKS, TaskSpec
from phasegate.domain.tasks.rules import (
    RawTask,
    TaskIssue,
    issue,
    natural_key,
    resolve_tasks,
)

__all__ = [
    "LAYOUTS",
    "TASK_FILE_LIMIT",
    "Layout",
    "is_task_folder",
    "read_source",
    "read_task_folder",
]

TASK_FILE_LIMIT = 256 * safe_read.KiB
"""Largest task file (or workflow-session.json) read."""
SESSION_FILE = "workflow-session.json"
Layout = Literal["per_task", "stages"]
LAYOUTS: tuple[Layout, ...] = ("per_task", "stages")
_ANYWHERE_HINT = "pass --spec (MCP: spec_path) with the .workflow/WFS-* folder"
_MAX_ERRORS_SHOWN = 20
_MAX_WARNINGS = 100
_STAGES = (
    ("PLAN", "Plan", "Read the plan (IMPL_PLAN.md) and every task file; confirm the order and the approach before any code is written."),
    ("IMPLEMENT", "Implement", "Every task of the folder: each container with its subtasks, in dependency order."),
    ("REVIEW", "Review", "Review what the tasks changed against the plan and the acceptance criteria; fix what the review finds."),
)  # fmt: skip


def is_task_folder(path: str | Path) -> bool:
    """Whether ``path`` is a task folder (a directory holding ``.task/`` or
    ``workflow-session.json``), or that folder's ``workflow-session.json``."""
    p = Path(path)
    if p.name == SESSION_FILE and p.is_file():
        return True
    return p.is_dir() and ((p / ".task").is_dir() or (p / SESSION_FILE).is_file())


def read_source(
    path: str | Path,
    *,
    target: str | None = None,
    extra_roots: Sequence[str] = (),
    limit: int = SPEC_LIMIT,
    layout: Layout = "per_task",
) -> ParsedSpec:
    """A session's spec: a task folder (:func:`read_task_folder`, in ``layout``), else a
    tasks.md (``read_spec``); the other arguments are ``read_spec``'s."""
    where = Path(path).expanduser()
    if target and not where.is_absolute():
        where = Path(target) / where
    if is_task_folder(where):
        return read_task_folder(
            path, target=target, extra_roots=extra_roots, limit=limit, layout=layout
        )
    spec = read_spec(path, target=target, extra_roots=extra_roots, limit=limit)
    cycle = dependency_cycle(spec)
    if cycle is not None:
        ids = " -> ".join(t.id for t in [*cycle, cycle[0]])
        raise SpecParseError(
            f"the tasks' dependencies form a cycle ({ids}): none of them could ever start",
            source=spec.source,
            line=cycle[0].line,
            hint="drop one of those dependencies in tasks.md",
        )
    return spec


def read_task_folder(
    path: str | Path,
    *,
    target: str | None = None,
    extra_roots: Sequence[str] = (),
    limit: int = SPEC_LIMIT,
    layout: Layout = "per_task",
) -> ParsedSpec:
    """Read a ``.workflow/WFS-*`` folder as a spec whose tasks carry their ``TaskSpec``.

    Args:
        path: The folder (or its ``workflow-session.json``; ``~`` is expanded).
        target: The session's target folder, as for ``read_spec``: given, a relative
            ``path`` is taken against it and every file read must lie inside it or
            ``extra_roots``. None: the folder may be anywhere.
        extra_roots: Further folders a spec may come from (``PHASEGATE_SPEC_ROOTS``).
        limit: Most bytes read over all files.
        layout: ``per_task`` (a phase per top-level task) or ``stages``.

    Returns:
        The spec: ``source`` the folder, ``title`` the session's, one ``SpecPhase`` per
        phase of the layout, each task's ``task`` its ``TaskSpec``; ``warnings`` what
        was normalized (line 0, the file named in the message).

    Raises:
        DefinitionError: The folder is missing, outside the allowed folders, or a file
            is not a regular file or is over its size.
        TaskFileInvalid: A file breaks a rule that keeps it from running (each error is
            listed; ``where`` is the first one's file, task and field).
    """
    folder, roots, hint = _locate(path, target, extra_roots)
    files = _list(folder, hint)
    data = _read_all(folder, files, roots, limit, hint)
    raws, issues = _parse(data)
    title = _title(folder, data.get(SESSION_FILE), issues)
    if not raws and not any(i.severity == "error" for i in issues):
        issues.append(issue("no_tasks", ".task/", "", "(folder)", table=IMPORT_MESSAGES))
    read, found = resolve_tasks(raws)
    issues += found
    if len(read) > MAX_TASKS:  # the containers created from subtask ids count too
        issues.append(
            issue(
                "too_many_tasks",
                ".task/",
                "",
                "(folder)",
                table=IMPORT_MESSAGES,
                count=len(read),
                limit=MAX_TASKS,
            )
        )
    specs: list[TaskSpec] = []
    if not any(i.severity == "error" for i in issues):
        budget = [RAW_BUDGET]
        specs = [task_spec(t, str(folder), budget, issues) for t in read]
    phases = _phases(specs, layout, issues)
    _raise_errors(folder, issues)
    digest = hashlib.sha256()
    for name in sorted(data):
        digest.update(f"{name}\0{len(data[name])}\0".encode())
        digest.update(data[name])
    if layout == "stages":
        digest.update(b"layout\0stages")
    return ParsedSpec(
        source=str(folder),
        title=title,
        phases=phases,
        warnings=_warnings(issues),
        sha256=digest.hexdigest(),
    )


# ---------------------------------------------------------------- reading


def _locate(
    path: str | Path, target: str | None, extra_roots: Sequence[str]
) -> tuple[Path, list[Path] | None, str]:
    folder = Path(path).expanduser()
    roots: list[Path] | None = None
    hint = _ANYWHERE_HINT
    if target is not None:
        hint = _contained_hint(target)
        folder, roots = _contain(folder, target, extra_roots, hint, raw=str(path))
    if folder.name == SESSION_FILE and folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise DefinitionError("task folder not found", where=str(folder), hint=hint)
    return folder, roots, hint


def _list(folder: Path, hint: str) -> list[str]:
    """The files to read, relative to ``folder``: the session file and ``.task/*.json``."""
    names = [SESSION_FILE] if (folder / SESSION_FILE).exists() else []
    tasks = folder / ".task"
    if tasks.is_dir():
        try:
            with os.scandir(tasks) as entries:
                found = [e.name for e in entries if e.name.endswith(".json") and not e.is_dir()]
        except OSError as exc:
            raise DefinitionError(
                f"the task folder cannot be listed ({exc.strerror})", where=str(tasks), hint=hint
            ) from None
        if len(found) > MAX_TASKS:
            raise TaskFileInvalid(
                f"{len(found)} task files; a session holds at most {MAX_TASKS} tasks",
                where=str(tasks),
                hint="split the work into several sessions",
            )
        names += [f".task/{n}" for n in sorted(found, key=natural_key)]
    return names


def _read_all(
    folder: Path, names: list[str], roots: list[Path] | None, limit: int, hint: str
) -> dict[str, bytes]:
    data: dict[str, bytes] = {}
    total = 0
    for name in names:
        try:
            data[name] = safe_read.read_bytes(
                folder / name,
                limit=TASK_FILE_LIMIT,
                what="task file",
                roots=roots,
                hint=hint,
                size_hint="split the task into subtasks, each its own file",
            )
        except FileNotFoundError:
            continue  # removed since the listing
        total += len(data[name])
        if total > limit:
            raise DefinitionError(
                f"the task folder holds more than {safe_read.size_text(limit)} of task files",
                where=str(folder),
                hint="split the work into several sessions",
            )
    return data


def _parse(data: dict[str, bytes]) -> tuple[list[RawTask], list[TaskIssue]]:
    raws: list[RawTask] = []
    issues: list[TaskIssue] = []
    for name, raw in data.items():
        if name == SESSION_FILE:
            continue
        try:
            raws.append(RawTask(file=name, data=json.loads(raw.decode("utf-8-sig"))))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            why = str(exc)[:200] if not isinstance(exc, RecursionError) else "nested too deep"
            stem = name.rsplit("/", 1)[-1].removesuffix(".json")
            issues.append(
                issue("json_invalid", name, stem, "(file)", table=IMPORT_MESSAGES, why=why)
            )
    return raws, issues


def _title(folder: Path, raw: bytes | None, issues: list[TaskIssue]) -> str:
    """The session's title from workflow-session.json (real files name it differently)."""
    session: Any = None
    why = f"no {SESSION_FILE}" if raw is None else ""
    if raw is not None:
        try:
            session = json.loads(raw.decode("utf-8-sig"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            why = "not valid JSON"
        if session is not None and not isinstance(session, dict):
            why, session = "not a JSON object", None
    if why:
        issues.append(
            issue("session_file", SESSION_FILE, "", "(file)", table=IMPORT_MESSAGES, why=why)
        )
    session = session or {}
    topic = session.get("topic")
    topic = topic.get("goal") if isinstance(topic, dict) else topic
    for value in (session.get("project"), topic, session.get("session_id")):
        if isinstance(value, str) and value.strip():
            return value.strip()[:300]
    return folder.name


def _raise_errors(folder: Path, issues: list[TaskIssue]) -> None:
    errors = [i for i in issues if i.severity == "error"]
    if not errors:
        return
    shown = [
        f"{n}) {e.message} (hint: {e.hint})" for n, e in enumerate(errors[:_MAX_ERRORS_SHOWN], 1)
    ]
    more = len(errors) - len(shown)
    first = errors[0]
    raise TaskFileInvalid(
        f"{len(errors)} problem{'s' if len(errors) != 1 else ''} in the task folder: "
        + "; ".join(shown)
        + (f"; and {more} more" if more else ""),
        where=f"{folder / first.file}: {first.task}: {first.field}",
        hint=first.hint,
    )


def _warnings(issues: list[TaskIssue]) -> list[ParseWarning]:
    """The warnings, one per kind: the same words for several tasks are one line."""
    groups: dict[tuple[str, str, str], list[TaskIssue]] = {}
    for i in issues:
        if i.severity == "warning":
            groups.setdefault((i.code, i.field, i.detail), []).append(i)
    out = []
    for (_, where, detail), found in groups.items():
        head = found[0].message
        if len(found) > 1:
            tasks = ", ".join(i.task for i in found[:6]) + (", …" if len(found) > 6 else "")
            head = f"{len(found)} task files ({tasks}): {where}: {detail}"
        out.append(ParseWarning(line=0, message=f"{head} (hint: {found[0].hint})"[:2000]))
    if len(out) > _MAX_WARNINGS:
        rest = len(out) - _MAX_WARNINGS + 1
        out = [*out[: _MAX_WARNINGS - 1], ParseWarning(line=0, message=f"and {rest} more warnings")]
    return out


# ---------------------------------------------------------------- phases


def _phases(specs: list[TaskSpec], layout: Layout, issues: list[TaskIssue]) -> list[SpecPhase]:
    """The spec's phases (top-level tasks in dependency order: a top-level task waits for
    what it and its subtasks depend on, outside itself)."""
    by_id = {s.id: s for s in specs}
    tops = [s.id for s in specs if s.parent is None]
    top_of = {s.id: s.parent or s.id for s in specs}
    waits: dict[str, set[str]] = {t: set() for t in tops}
    for s in specs:
        waits[top_of[s.id]].update(top_of[d] for d in s.depends_on if top_of[d] != top_of[s.id])
    order = _order(tops, waits)
    if layout == "stages":
        order += [t for t in tops if t not in order]  # the board still orders them
        tasks = [_spec_task(by_id[x]) for top in order for x in [top, *_kids(top, specs)]]
        return [
            SpecPhase(
                number=n,
                written_number=key,
                name=name,
                description=text,
                tasks=tasks if key == "IMPLEMENT" else [],
                line=1,
            )
            for n, (key, name, text) in enumerate(_STAGES, start=1)
        ]
    if len(order) < len(tops):
        stuck = [t for t in tops if t not in order]
        found = issue(
            "per_task_cycle",
            ".task/",
            stuck[0],
            "depends_on",
            table=IMPORT_MESSAGES,
            tasks=", ".join(stuck),
        )
        issues.append(found)
        return []
    return [
        SpecPhase(
            number=n,
            written_number=top,
            name=by_id[top].title,
            description=by_id[top].description,
            tasks=[_spec_task(by_id[x]) for x in [top, *_kids(top, specs)]],
            line=1,
        )
        for n, top in enumerate(order, start=1)
    ]


def _kids(top: str, specs: list[TaskSpec]) -> list[str]:
    """``top``'s subtasks, in dependency order among themselves (ties in id order)."""
    kids = [s for s in specs if s.parent == top]
    ids = {s.id for s in kids}
    return _order([s.id for s in kids], {s.id: {d for d in s.depends_on if d in ids} for s in kids})


def _order(ids: list[str], waits: dict[str, set[str]]) -> list[str]:
    """``ids`` in dependency order, ties in id order (Kahn's); ids in a cycle are left out."""
    left = {i: len(waits[i]) for i in ids}
    after: dict[str, list[str]] = {i: [] for i in ids}
    for i in ids:
        for dep in waits[i]:
            after[dep].append(i)
    ready = [(natural_key(i), i) for i in ids if not left[i]]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        _, node = heapq.heappop(ready)
        out.append(node)
        for nxt in after[node]:
            left[nxt] -= 1
            if not left[nxt]:
                heapq.heappush(ready, (natural_key(nxt), nxt))
    return out


def _spec_task(spec: TaskSpec) -> SpecTask:
    return SpecTask(
        id=spec.id,
        name=spec.title,
        description=spec.description,
        status="done" if spec.status == "completed" else "todo",
        optional=spec.optional,
        dependencies=list(spec.depends_on),
        acceptance_criteria=list(spec.acceptance),
        requirements=list(spec.requirements),
        line=1,
        task=spec,
    )
