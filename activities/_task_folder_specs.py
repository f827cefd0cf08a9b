"""What a session keeps of one task file: a task the rules read
(``domain.tasks.rules.FolderTask``) mapped to a
:class:`~phasegate.domain.tasks.model.TaskSpec`, every field within its bounds.

Each field is read from the format's place first (6-field, then unified), then from the
places real files use (``domain.tasks.rules.FIELD_PLACES``). What cannot be kept as
written is reported with the rules' issue format: a list given as a string or an
object, an item or a list over its bound (clipped), a task object too large to write
back, a pre-analysis command phasegate cannot run.

Pre-analysis commands: CCW writes each as a tool call. ``bash(cmd)`` is a command: it
runs when the task starts (listed in phase 0 first, like every command of a session),
if it can run without a shell (no pipes, redirections or unquoted wildcards); any
other tool (``Read(path)``, ``Glob``, an MCP tool, a CLI agent) and prose are
instructions for the agent, shown with the task. A plain line naming a program
(``pytest -q tests/x``) is a command too. ``continue`` (the unified schema's) is
``skip_optional``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from phasegate.domain.commands import CommandRefused, split_command
from phasegate.domain.limits import MAX_JSON_DEPTH, json_depth
from phasegate.domain.tasks.model import (
    MAX_CRITERIA,
    MAX_ITEMS,
    MAX_STEPS,
    PreAnalysisStep,
    TaskSpec,
)
from phasegate.domain.tasks.rules import FIELD_PLACES, FolderTask, TaskIssue, get, issue

__all__ = ["IMPORT_MESSAGES", "RAW_BUDGET", "RAW_LIMIT", "task_spec"]

RAW_LIMIT = 16 * 1024
"""Largest task object (compact JSON bytes) kept to be written back (``TaskSpec.raw``)."""
RAW_BUDGET = 512 * 1024
"""Most raw bytes kept for a whole folder: the board lives in the session's state."""

IMPORT_MESSAGES: dict[str, str] = {
    "json_invalid": "error | not valid JSON ({why}) | fix the file so it parses as one JSON object",
    "too_many_tasks": "error | {count} task files; a session holds at most {limit} tasks | split the work into several sessions",
    "no_tasks": "error | no task files in .task/ | add .task/IMPL-1.json",
    "session_file": "warning | {why}; the folder's name stands in for the session's | write workflow-session.json as one JSON object",
    "per_task_cycle": "error | the top-level tasks wait for each other ({tasks}), so they cannot be one phase each | let top-level tasks wait in one direction, or import the folder with the stages layout",
    "field_form": "warning | {what}; {kept} | write {field} as a list of strings",
    "clipped": "warning | {what}; {kept} | {fix}",
    "on_error_unknown": "warning | {value!r} is not one of {allowed}; fail is kept | write \"on_error\": \"fail\"",
    "step_needs_shell": "warning | `{command}` {why}; it is kept as an instruction for the agent | write one program with its arguments (phasegate runs commands without a shell)",
}  # fmt: skip
"""The import's own issue codes (the rules' are ``domain.tasks.rules.MESSAGES``)."""

_TOOL = re.compile(r"^\s*([A-Za-z_][\w.:-]*)\((.*)\)\s*$", re.DOTALL)
_PROGRAM = re.compile(r"^[a-z0-9_][a-z0-9_.+/-]*(?:\s|$)")
_STEP_ON_ERROR = ("skip_optional", "fail", "retry_once", "manual_intervention")
_LIMITS = {"acceptance": MAX_CRITERIA}
_ITEM_CHARS = {"implementation_approach": 4000}


class _Issues(list[TaskIssue]):
    def add(self, code: str, t: FolderTask, where: str, **values: Any) -> None:
        self.append(issue(code, t.file, t.id, where, table=IMPORT_MESSAGES, **values))


def task_spec(t: FolderTask, folder: str, budget: list[int], issues: list[TaskIssue]) -> TaskSpec:
    """``t`` as the session keeps it.

    Args:
        t: The task as the rules read it (its dependencies all name tasks).
        folder: The folder's path, for ``source``.
        budget: ``[bytes]`` of raw objects the folder may still keep (spent here).
        issues: Where what could not be kept as written is added.
    """
    found = _Issues()
    if not t.data:  # a container the folder has no file for
        spec = TaskSpec(
            id=t.id,
            title=t.title[:300],
            parent=t.parent,
            source=f"{folder} (created as the container of {', '.join(t.created)})"[:600],
        )
        return spec
    fields: dict[str, Any] = {}
    for name, (canonical, other) in FIELD_PLACES.items():
        place = next((p for p in (*canonical, *other) if get(t.data, p) is not None), None)
        if place is None:
            continue
        value = get(t.data, place)
        if name == "pre_analysis":
            fields[name] = _steps(value, t, place, found)
        else:
            fields[name] = _items(name, value, t, place, found)
    on_error = t.data.get("on_error", "fail")
    if on_error not in ("fail", "skip_optional", "continue"):
        allowed = "fail, skip_optional, continue"
        found.add("on_error_unknown", t, "on_error", value=on_error, allowed=allowed)
        on_error = "fail"
    spec = TaskSpec(
        id=t.id,
        title=_clip(t.title, 300, t, "title", found),
        status=t.status,
        type=_short(get(t.data, "meta.type") or t.data.get("type"), 64),
        agent=_short(get(t.data, "meta.agent"), 128),
        description=_clip(_description(t.data), 4000, t, "description", found),
        parent=t.parent,
        depends_on=t.deps,
        on_error=on_error,
        optional=on_error == "skip_optional",
        source=f"{folder}/{t.file}"[:600],
        raw=_raw(t, budget, found),
        **fields,
    )
    issues += found
    return spec


def _description(data: dict[str, Any]) -> str:
    """The task's description (unified ``description``; real files' ``context.description``
    or ``context.objective``), with the unified schema's verification and definition of
    done, which say how the criteria are checked."""
    parts = [data.get("description"), get(data, "context.description")]
    parts.append(get(data, "context.objective"))
    text = next((p.strip() for p in parts if isinstance(p, str) and p.strip()), "")
    for label, path in (
        ("Verification", "convergence.verification"),
        ("Definition of done", "convergence.definition_of_done"),
    ):
        extra = get(data, path)
        if isinstance(extra, str) and extra.strip():
            text += f"\n\n{label}: {extra.strip()}"
    return text.strip()


def _raw(t: FolderTask, budget: list[int], found: _Issues) -> dict[str, Any] | None:
    if json_depth(t.data) > MAX_JSON_DEPTH:  # a carry could not hold it
        found.add(
            "clipped",
            t,
            "(file)",
            what=f"the task object nests more than {MAX_JSON_DEPTH} levels deep",
            kept="fields phasegate does not model are not written back to the file",
            fix="flatten the fields phasegate does not model",
        )
        return None
    size = len(json.dumps(t.data, separators=(",", ":"), ensure_ascii=False).encode())
    if size <= min(RAW_LIMIT, budget[0]):
        budget[0] -= size
        return t.data
    found.add(
        "clipped",
        t,
        "(file)",
        what=f"the task object is {size} bytes",
        kept="fields phasegate does not model are not written back to the file",
        fix=f"keep a task file under {RAW_LIMIT // 1024} KiB",
    )
    return None


def text_of(value: Any) -> str:
    """A JSON value as one line of text: an implementation step as its title and
    description with its points, a file entry as its path, an object as key: value."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return "; ".join(t for t in (text_of(v) for v in value) if t)
    if isinstance(value, dict):
        if "title" in value or "description" in value:  # an implementation step
            head = ": ".join(str(value[k]) for k in ("title", "description") if value.get(k))
            points = [text_of(value.get(k)) for k in ("modification_points", "logic_flow")]
            return "\n".join([head, *(f"- {p}" for p in points if p)])
        if isinstance(value.get("path"), str):  # the unified schema's files[]
            return value["path"]
        return ", ".join(f"{k}: {text_of(v)}" for k, v in value.items() if text_of(v))
    return "" if value is None else str(value)


def _items(name: str, value: Any, t: FolderTask, place: str, found: _Issues) -> list[str]:
    if isinstance(value, list):
        items = [text_of(v) for v in value]
    elif isinstance(value, dict):  # {"new_files": [...], "modified_files": [...]}
        found.add(
            "field_form",
            t,
            place,
            what="an object, not a list",
            kept="the entries of its lists are kept as items",
        )
        items = []
        for key, inner in value.items():
            items += (
                [text_of(v) for v in inner]
                if isinstance(inner, list)
                else [f"{key}: {text_of(inner)}"]
            )
    else:
        found.add(
            "field_form",
            t,
            place,
            what=f"a {type(value).__name__}, not a list",
            kept="it is kept as one item",
        )
        items = [text_of(value)]
    items = [i for i in items if i]
    limit = _LIMITS.get(name, MAX_ITEMS)
    if len(items) > limit:
        found.add(
            "clipped",
            t,
            place,
            what=f"{len(items)} items",
            kept=f"the first {limit} are kept",
            fix=f"keep {place} to {limit} items",
        )
        items = items[:limit]
    return [_clip(i, _ITEM_CHARS.get(name, 1000), t, place, found) for i in items]


def _clip(text: str, limit: int, t: FolderTask, place: str, found: _Issues) -> str:
    if len(text) <= limit:
        return text
    found.add(
        "clipped",
        t,
        place,
        what=f"{len(text)} characters",
        kept=f"the first {limit} are kept",
        fix=f"keep it under {limit} characters",
    )
    return text[: limit - 1] + "…"


def _short(value: Any, limit: int) -> str:
    return value.strip()[:limit] if isinstance(value, str) else ""


# ---------------------------------------------------------------- pre-analysis steps


def _steps(value: Any, t: FolderTask, place: str, found: _Issues) -> list[PreAnalysisStep]:
    """The steps as phasegate runs them (the rules reported the shape already)."""
    if isinstance(value, dict):  # {"objectives": [...], "target_files": [...]}
        value = [{"step": k, "action": text_of(v)} for k, v in value.items()]
    if not isinstance(value, list):
        return []
    steps: list[PreAnalysisStep] = []
    for n, item in enumerate(value, start=1):
        if isinstance(item, str) and item.strip():
            steps.append(PreAnalysisStep(step=f"step_{n}", action=item.strip()[:4000]))
        elif isinstance(item, dict):
            steps += _step(item, n, t, f"{place}[{n - 1}]", found)
    if len(steps) > MAX_STEPS:
        found.add(
            "clipped",
            t,
            place,
            what=f"{len(steps)} steps",
            kept=f"the first {MAX_STEPS} are kept",
            fix=f"keep to {MAX_STEPS} steps",
        )
    return steps[:MAX_STEPS]


def _step(
    item: dict[str, Any], n: int, t: FolderTask, where: str, found: _Issues
) -> list[PreAnalysisStep]:
    """One step object; a step with several commands becomes a step per command that
    runs, the instructions between them gathered into one step."""
    name = _short(item.get("step") if isinstance(item.get("step"), str) else "", 300)
    name = name or f"step_{n}"
    action = text_of(item.get("action") or item.get("description") or "")
    if isinstance(item.get("target"), str):
        action = f"{action} ({item['target']})".strip()
    commands = item.get("commands", item.get("command"))
    commands = [commands] if isinstance(commands, str) else commands or []
    on_error = item.get("on_error", "fail")
    on_error = "skip_optional" if on_error == "continue" else on_error
    if on_error not in _STEP_ON_ERROR:
        found.add(
            "on_error_unknown",
            t,
            f"{where}.on_error",
            value=on_error,
            allowed=", ".join(_STEP_ON_ERROR),
        )
        on_error = "fail"
    out: list[PreAnalysisStep] = []
    told: list[str] = []

    def add(command: str = "") -> None:
        label = f"{name}_{len(out) + 1}" if out else name
        text = action if command else "\n".join([action, *told]).strip() or label
        step = PreAnalysisStep(step=label, action=text[:4000], command=command, on_error=on_error)
        out.append(step)
        told.clear()

    for text in (str(c).strip() for c in commands if str(c).strip()):
        command, why = runnable(text)
        if why:
            found.add("step_needs_shell", t, where, command=text[:120], why=why)
        if not command:
            told.append(text)
            continue
        if told:
            add()
        add(command)
    if told or not out:
        add()
    out[-1] = out[-1].model_copy(update={"output_to": _short(item.get("output_to"), 64)})
    return out


def runnable(text: str) -> tuple[str, str]:
    """The command a step's command text runs (``""`` for an instruction), and why a
    command cannot run (``""`` when it can, or when it is an instruction)."""
    tool = _TOOL.match(text)
    if tool and tool.group(1) != "bash":
        return "", ""  # Read(...), Grep(...), an MCP tool: the agent's to do
    command = tool.group(2).strip() if tool else text.strip()
    if not tool and not _PROGRAM.match(command):
        return "", ""  # prose
    try:
        split_command(command)
    except CommandRefused as exc:
        return "", f"cannot run without a shell ({exc})"
    if _globs(command):
        return "", "needs a shell to expand its wildcards"
    return command, ""


def _globs(command: str) -> bool:
    """Whether ``command`` holds a wildcard outside quotes (only a shell expands it)."""
    quote = ""
    for i, c in enumerate(command):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "*?" or (c == "~" and (i == 0 or command[i - 1] == " ")):
            return True
    return False
