"""Reading a spec from disk: where it may come from, and the bounded read.

A session's ``options.spec_path`` is start input: whoever starts a session chooses it,
an agent included (trust level 1, the MCP ``start_session`` tool). It is read on the
worker, so with a ``target`` it is held to the session's own folder:

* a relative path is taken against the target; a folder means its ``tasks.md``
  (nothing else in the folder is read);
* the real path (symlinks and ``..`` resolved) must lie inside the target, or inside
  one of the worker's extra spec roots; a symlink inside the target that stays
  inside is fine, one that leads out is refused, checked on the file actually opened;
* the file must be a regular UTF-8 file of at most ``limit`` bytes (see
  ``activities._safe_read``): ``/dev/zero``, a named pipe or a 50 MB file is refused
  at once, without reading it.

Without a ``target`` (``phasegate spec parse``, a coding agent reading its own
session's spec) the file may be anywhere; the read is bounded the same way.

Every refusal is a ``DefinitionError`` (never retried), so a session's start fails
with the reason. The target itself is start input too: the containment keeps a read
inside the project the session works on, it does not stop a starter who names ``/``
as the target (bound targets in the deployment for that).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import phasegate.activities._safe_read as safe_read
from phasegate.activities.tasks_md._parse import parse_tasks_md
from phasegate.domain.errors import DefinitionError
from phasegate.domain.spec import ParsedSpec

__all__ = ["SPEC_LIMIT", "read_spec", "spec_roots"]

SPEC_LIMIT = safe_read.MiB
"""Largest tasks.md read (a 700-task spec is about 30 KiB)."""

_ANYWHERE_HINT = "pass --spec (MCP: spec_path) with the spec's tasks.md or its folder"


def spec_roots(target: str, extra: Sequence[str]) -> list[Path]:
    """The folders a spec may be read from: the target (when it is a folder) and ``extra``."""
    roots = [target] if target and Path(target).is_dir() else []
    return [safe_read.real_path(r) for r in [*roots, *extra] if r and Path(r).is_dir()]


def read_spec(
    path: str | Path,
    *,
    target: str | None = None,
    extra_roots: Sequence[str] = (),
    limit: int = SPEC_LIMIT,
) -> ParsedSpec:
    """Read and parse a spec: the one way phasegate reads a tasks.md from disk.

    Args:
        path: The spec's tasks.md or the folder holding it (``~`` is expanded).
        target: The session's target folder ("" for none). Given, the spec is held to
            the session's folders: a relative ``path`` is taken against ``target`` and
            the file read must lie inside it or ``extra_roots``. None: the file may be
            anywhere (a relative ``path`` is taken against the working directory).
        extra_roots: Further folders a spec may come from (``PHASEGATE_SPEC_ROOTS``).
        limit: Largest file accepted, in bytes.

    Returns:
        The parsed spec; ``source`` is the file's path (a folder's ``tasks.md``, not
        resolved) and ``sha256`` the hash of its bytes (the snapshot id).

    Raises:
        DefinitionError: Missing, outside the target and ``extra_roots``, not a regular
            file, larger than ``limit`` or not UTF-8; ``where`` is the path.
        SpecParseError: The file holds no phases.
    """
    file = Path(path).expanduser()
    roots: list[Path] | None = None
    hint = _ANYWHERE_HINT
    if target is not None:
        hint = _contained_hint(target)
        file, roots = _contain(file, target, extra_roots, hint, raw=str(path))
    if file.is_dir():
        file = file / "tasks.md"
    try:
        data = safe_read.read_bytes(
            file,
            limit=limit,
            what="spec",
            roots=roots,
            hint=hint,
            size_hint="split the spec into several specs, each its own session",
        )
    except FileNotFoundError:
        raise DefinitionError("spec not found", where=str(file), hint=hint) from None
    text = safe_read.decode(data, file, what="spec", hint="save tasks.md as UTF-8")
    spec = parse_tasks_md(text, source=str(file))
    spec.sha256 = hashlib.sha256(data).hexdigest()
    return spec


def _contain(
    path: Path, target: str, extra_roots: Sequence[str], hint: str, *, raw: str
) -> tuple[Path, list[Path]]:
    """``path`` taken against ``target`` and checked inside the spec roots (before any
    read: the read checks again, on the file it opens), with those roots."""
    if not path.is_absolute():
        if not (target and Path(target).is_dir()):
            raise DefinitionError(
                "a relative --spec (MCP: spec_path) needs a TARGET folder to resolve against",
                where=raw,
                hint=hint,
            )
        path = Path(target) / path
    roots = spec_roots(target, extra_roots)
    if not roots:
        problem = f"the target {target} is not a folder" if target else "the session has no target"
        raise DefinitionError(
            f"no folder to read the spec from: {problem}", where=str(path), hint=hint
        )
    if not safe_read.inside(path, roots):
        real = safe_read.real_path(path)
        really = f" (it resolves to {real})" if real != path else ""
        raise DefinitionError(
            f"the spec is outside {' and '.join(map(str, roots))}{really}",
            where=str(path),
            hint=hint,
        )
    return path, roots


def _contained_hint(target: str) -> str:
    where = f"the target {target}" if target else "the target"
    return (
        f"the spec must be a regular file or folder inside {where}; pass --spec (MCP: "
        "spec_path) with a path inside TARGET, or list its folder in the worker's "
        "PHASEGATE_SPEC_ROOTS"
    )
