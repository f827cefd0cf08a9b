"""The commit a session's workspace is on when it starts (``DefinitionRef.base_commit``).

Read from the repository's files (``HEAD``, loose refs, ``packed-refs``, a worktree's
``gitdir`` and ``commondir``) instead of running ``git rev-parse``: loading a session ran
that process once per session, and forking a large worker process cost most of the load
(77% of ``load_session`` under 2,000 starting sessions, ``bench/scale_sessions.py``).
Anything the file layout does not answer plainly (a reftable repository, a symbolic-ref
chain, an unreadable file, ``GIT_DIR`` set) asks ``git`` itself, as before.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

__all__ = ["git_head"]

_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_MAX_REF_BYTES = 4096


class _Unsure(Exception):
    """The files do not answer plainly: ask git."""


def git_head(target: str) -> str | None:
    """git HEAD of ``target`` when it is a directory inside a git work tree with a commit
    checked out, else None."""
    if not target or not os.path.isdir(target):
        return None
    try:
        return _from_files(Path(os.path.realpath(target)))
    except _Unsure:
        return _from_git(target)


def _from_git(target: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", target, "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _from_files(folder: Path) -> str | None:
    if any(os.environ.get(v) for v in ("GIT_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES")):
        raise _Unsure
    git_dir = _find_git_dir(folder)
    if git_dir is None:
        return None
    common = git_dir
    if (git_dir / "commondir").is_file():  # a linked worktree: refs live in the main one
        common = (git_dir / _read(git_dir / "commondir")).resolve()
    if (common / "reftable").exists():
        raise _Unsure
    head = _read(git_dir / "HEAD")
    if _SHA.fullmatch(head):
        return head  # detached
    if not head.startswith("ref: "):
        raise _Unsure
    ref = head[len("ref: ") :].strip()
    if not ref.startswith("refs/") or ".." in ref.split("/"):
        raise _Unsure
    for where in dict.fromkeys((git_dir, common)):
        loose = where / ref
        if loose.is_file():
            value = _read(loose)
            if _SHA.fullmatch(value):
                return value
            raise _Unsure  # a symbolic ref to another ref, or something odd
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(errors="replace").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and _SHA.fullmatch(sha):
                return sha
    return None  # an unborn branch: no commit yet


def _find_git_dir(folder: Path) -> Path | None:
    for here in (folder, *folder.parents):
        dot = here / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():
            text = _read(dot)
            if not text.startswith("gitdir: "):
                raise _Unsure
            return (here / text[len("gitdir: ") :].strip()).resolve()
        if dot.exists():
            raise _Unsure
    return None


def _read(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            text = f.read(_MAX_REF_BYTES + 1)
    except (OSError, UnicodeDecodeError):
        raise _Unsure from None
    if len(text) > _MAX_REF_BYTES:
        raise _Unsure
    return text.strip()
