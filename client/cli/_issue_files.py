"""The files ``phasegate orchestrate`` reads: an issue (ISSUE.md) and a profile.

An issue file is markdown, read the way a person writes one::

    ---
    id: PROJ-42            # optional; default: the file name without .md
    title: Fix the typo    # optional; default: the first "# heading"
    labels: [docs, typo]   # optional; a "Labels: docs, typo" line works too
    ---
    # Fix the typo in README
    Labels: docs, typo

    The body: everything else, as the agents read it.

A profile is YAML or JSON validated by :class:`~phasegate.domain.orchestration.agents.Profile`;
``--profile NAME`` may also name a profile shipped under ``library/profiles/``
(``demo``, ``default``). An empty ``working_dir`` becomes the current directory, a
relative one is taken from the profile file's folder, and ``--workdir`` wins over
both.

Both are read with the bounded reader sessions use (a regular file, size-capped),
and every error names ``file:line``, the field and what to do.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from phasegate import SHIPPED_LIBRARY
from phasegate.domain.errors import PhasegateError
from phasegate.domain.orchestration.agents import (
    MAX_ISSUE_BODY_CHARS,
    DeveloperProfile,
    Issue,
    Profile,
)

__all__ = [
    "PROFILES_DIR",
    "load_profile",
    "read_issue",
    "resolve_profile",
    "shipped_profiles",
]

PROFILES_DIR = Path(SHIPPED_LIBRARY) / "profiles"
_ISSUE_LIMIT = 256 * 1024  # the body is capped at 32,000 characters; front matter is small
_PROFILE_LIMIT = 256 * 1024
_FRONT_KEYS = ("id", "title", "labels")
_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$")
_LABELS = re.compile(r"^labels\s*:\s*(.*)$", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_ID_CHARS = re.compile(r"[^A-Za-z0-9._#/-]+")

_ISSUE_HINTS = {
    "id": "set `id:` in the front matter (1-128 letters, digits and . _ # / -), or rename the file",
    "title": "start the file with a `# Title` line or set `title:` in the front matter "
    "(at most 300 characters)",
    "labels": "write `Labels: bug, ui` (each label at most 128 printable characters, "
    "at most 32 labels)",
    "body": f"keep the body under {MAX_ISSUE_BODY_CHARS:,} characters: link to logs instead "
    "of pasting them",
}


# ---------------------------------------------------------------- reading


def _read(path: Path, *, what: str, limit: int, hint: str) -> str:
    """The UTF-8 text of ``path`` through the bounded reader, or an actionable error."""
    from phasegate.activities import _safe_read as safe_read

    try:
        data = safe_read.read_bytes(path, limit=limit, what=what, hint=hint)
    except FileNotFoundError:
        raise PhasegateError(f"no such {what}", where=str(path), hint=hint) from None
    text = safe_read.decode(data, path, what=what, hint="save it as UTF-8")
    return text.removeprefix("\ufeff")


# ---------------------------------------------------------------- issues


def read_issue(path: str | Path) -> Issue:
    """The issue an ISSUE.md holds (see the module docstring for the format).

    Raises:
        PhasegateError: The file cannot be read, its front matter is not YAML, it has
            no title, or a field breaks :class:`Issue`'s bounds (``file:line``, field).
    """
    path = Path(path).expanduser()
    text = _read(
        path,
        what="issue file",
        limit=_ISSUE_LIMIT,
        hint="pass the issue as a markdown file: `# Title`, then the body",
    )
    lines = text.splitlines()
    front, front_lines, start = _front_matter(path, lines)
    title, title_line = front.get("title"), front_lines.get("title")
    labels = _label_list(path, front.get("labels"), front_lines.get("labels"))
    labels_line = front_lines.get("labels")
    body: list[str] = []
    fenced = False
    for number, line in enumerate(lines[start:], start=start + 1):
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and title is None and (m := _HEADING.match(line)):
            title, title_line = m.group(1), number
            continue
        header = not any(b.strip() for b in body)  # a Labels line belongs above the text
        if header and labels_line is None and (m := _LABELS.match(line.strip())):
            labels = _label_list(path, m.group(1), number)
            labels_line = number
            continue
        body.append(line)
    if title is None:
        raise PhasegateError(
            "the issue has no title", where=f"{path}:1", hint=_ISSUE_HINTS["title"]
        )
    issue_id = front.get("id")
    if issue_id is None:
        issue_id = _ID_CHARS.sub("-", path.stem).strip("-.#/") or "issue"
    data = {
        "id": str(issue_id),
        "title": str(title).strip(),
        "body": "\n".join(body).strip(),
        "labels": labels,
    }
    try:
        return Issue.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "issue"
        where_line = {"id": front_lines.get("id"), "title": title_line, "labels": labels_line}
        line_no = where_line.get(field) or (start + 1 if field == "body" else 1)
        if field == "id" and "id" not in front:
            field = f"id (from the file name {path.name!r})"
        raise PhasegateError(
            f"{field}: {_message(first)}",
            where=f"{path}:{line_no}",
            hint=_ISSUE_HINTS.get(field.split(" ")[0]),
        ) from None


def _front_matter(path: Path, lines: list[str]) -> tuple[dict[str, Any], dict[str, int], int]:
    """``(fields, line of each field, index of the first body line)``."""
    if not lines or lines[0].strip() != "---":
        return {}, {}, 0
    end = next((i for i, ln in enumerate(lines[1:], 1) if ln.strip() in ("---", "...")), None)
    if end is None:
        raise PhasegateError(
            "the front matter opened on line 1 is never closed",
            where=f"{path}:1",
            hint="end it with a line holding only ---",
        )
    try:
        data = yaml.safe_load("\n".join(lines[1:end])) or {}
    except yaml.YAMLError as exc:
        hint = "write `key: value` lines (id, title, labels) between the --- lines"
        raise _yaml_error(exc, path, 2, "the front matter is not valid YAML", hint) from None
    if not isinstance(data, dict):
        raise PhasegateError(
            "the front matter must be `key: value` lines",
            where=f"{path}:2",
            hint="write id:, title: and labels: lines between the --- lines",
        )
    found: dict[str, int] = {}
    for i, line in enumerate(lines[1:end], 2):
        key = line.split(":", 1)[0].strip()
        if ":" in line and not line[:1].isspace() and key not in found:
            found[key] = i
    for key in data:
        if key not in _FRONT_KEYS:
            raise PhasegateError(
                f"unknown front matter field {key!r}",
                where=f"{path}:{found.get(str(key), 2)}",
                hint=f"the fields are {', '.join(_FRONT_KEYS)}; the rest of the issue goes "
                "in the body, below the front matter",
            )
    if data.get("title") is not None and not isinstance(data["title"], str | int | float):
        raise PhasegateError(
            "title must be text",
            where=f"{path}:{found.get('title', 2)}",
            hint=_ISSUE_HINTS["title"],
        )
    if data.get("id") is not None and not isinstance(data["id"], str | int):
        raise PhasegateError(
            "id must be text or a number",
            where=f"{path}:{found.get('id', 2)}",
            hint=_ISSUE_HINTS["id"],
        )
    return {k: v for k, v in data.items() if v is not None}, found, end + 1


def _label_list(path: Path, value: Any, line: int | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        items = [str(v) for v in value]
    else:
        raise PhasegateError(
            "labels must be a list of words",
            where=f"{path}:{line or 1}",
            hint=_ISSUE_HINTS["labels"],
        )
    out: list[str] = []
    for item in items:
        label = item.strip().strip("`'\"").strip()
        if label and label not in out:
            out.append(label)
    return out


# ---------------------------------------------------------------- profiles


def shipped_profiles() -> list[str]:
    """Names of the profiles shipped under ``library/profiles/``."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def resolve_profile(ref: str | None) -> Path:
    """The profile file ``--profile`` names: a path, or a shipped profile's name
    (``None``: the shipped ``default``)."""
    if ref is None:
        return PROFILES_DIR / "default.yaml"
    path = Path(ref).expanduser()
    if path.exists() or "/" in ref or os.sep in ref or path.suffix in (".yaml", ".yml", ".json"):
        return path
    shipped = PROFILES_DIR / f"{ref}.yaml"
    if shipped.is_file():
        return shipped
    raise PhasegateError(
        f"{ref!r} is neither a profile file nor a shipped profile",
        where="--profile",
        hint=f"pass a YAML or JSON file, or one of: {', '.join(shipped_profiles())}",
    )


def load_profile(
    ref: str | None, *, workdir: str | None = None, cwd: str | Path | None = None
) -> tuple[Profile, Path]:
    """The profile ``--profile`` names, validated, with its working directory settled.

    Args:
        ref: ``--profile``: a file, a shipped profile's name, or None for ``default``.
        workdir: ``--workdir``: wins over the profile's ``working_dir``.
        cwd: The directory an empty ``working_dir`` means (default: the current one).

    Returns:
        The profile and the file it came from.

    Raises:
        PhasegateError: The file cannot be read or parsed, or a field is invalid
            (``file:line``, the field's path, the fields that exist).
    """
    path = resolve_profile(ref)
    text = _read(
        path,
        what="profile",
        limit=_PROFILE_LIMIT,
        hint="pass a YAML or JSON profile, or a shipped one: " + ", ".join(shipped_profiles()),
    )
    data = _parse_profile(path, text)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise _profile_error(path, text, exc) from None
    here = Path(cwd) if cwd is not None else Path.cwd()
    if workdir:
        working = (here / Path(workdir).expanduser()).resolve()
    elif profile.working_dir:
        working = (path.parent / Path(profile.working_dir).expanduser()).resolve()
    else:
        working = here.resolve()
    return profile.model_copy(update={"working_dir": str(working)}), path


def _parse_profile(path: Path, text: str) -> dict[str, Any]:
    try:
        if path.suffix == ".json":
            data = json.loads(text) if text.strip() else {}
        else:
            data = yaml.safe_load(text) or {}
    except json.JSONDecodeError as exc:
        raise PhasegateError(
            f"not valid JSON: {exc.msg}",
            where=f"{path}:{exc.lineno}",
            hint="fix the JSON (or write the profile as YAML)",
        ) from None
    except yaml.YAMLError as exc:
        hint = "write `field: value` lines, e.g. `max_replans: 2`"
        raise _yaml_error(exc, path, 1, "not valid YAML", hint) from None
    if not isinstance(data, dict):
        raise PhasegateError(
            "a profile is a mapping of fields",
            where=f"{path}:1",
            hint="e.g. `models: {analyst: demo}` and `max_replans: 2`; see "
            f"{PROFILES_DIR / 'default.yaml'}",
        )
    return data


def _yaml_error(
    exc: yaml.YAMLError, path: Path, first_line: int, what: str, hint: str
) -> PhasegateError:
    """``what``: the parser's problem, at ``path:line`` (the YAML text starts on the
    file's ``first_line``; line 1 when the parser names no place)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    line = mark.line + first_line if mark is not None else 1
    return PhasegateError(f"{what}: {problem}", where=f"{path}:{line}", hint=hint)


def _profile_error(path: Path, text: str, exc: ValidationError) -> PhasegateError:
    """The first validation error at its line; the others counted."""
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    field = ".".join(str(p) for p in loc if p != "[key]") or "profile"
    message = f"{field}: {_message(first)}"
    if len(errors) > 1:
        others = "; ".join(
            ".".join(str(p) for p in e["loc"]) + f": {_message(e)}" for e in errors[1:4]
        )
        message += f" (and {len(errors) - 1} more: {others})"
    model: type[BaseModel] = DeveloperProfile if loc[:1] == ("developer",) else Profile
    if first["type"] == "extra_forbidden":
        hint = f"{loc[-1]!r} is not a field; the fields are {', '.join(model.model_fields)}"
    else:
        hint = f"fix the value; {PROFILES_DIR / 'default.yaml'} shows every field"
    return PhasegateError(message, where=f"{path}:{_line_of(text, loc)}", hint=hint)


def _line_of(text: str, loc: tuple[Any, ...]) -> int:
    """The line of the deepest node of ``loc`` the document holds (1 when unknown)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return 1
    line = 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next((kv for kv in node.value if kv[0].value == str(part)), None)
            if hit is None:
                break
            line = hit[0].start_mark.line + 1
            node = hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _message(error: Any) -> str:
    """pydantic's message without its "Value error, " prefix."""
    return str(error["msg"]).removeprefix("Value error, ")
