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
import stat
import subprocess
from pathlib import Path
from typing import BinaryIO

__all__ = ["git_head"]

_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_MAX_REF_BYTES = 4096
_MAX_PACKED_BYTES = 64 * 1024 * 1024


class _Unsure(Exception):
    """The files do not answer plainly: ask git."""


class _NotARepository(Exception):
    """A repository file that is not a regular file (a FIFO, a device): no commit, and git
    is not asked either (it would block on the same file until its timeout)."""


def git_head(target: str) -> str | None:
    """git HEAD of ``target`` when it is a directory inside a git work tree with a commit
    checked out, else None."""
    if not target or not os.path.isdir(target):
        return None
    try:
        return _from_files(Path(os.path.realpath(target)))
    except _Unsure:
        return _from_git(target)
    except (_NotARepository, OSError, RuntimeError, ValueError):  # e.g. a symlink loop
        return None


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
    if os.stat(git_dir).st_uid != os.geteuid():
        raise _Unsure  # git decides whom it trusts (safe.directory), as before
    common = git_dir
    if (git_dir / "commondir").exists():  # a linked worktree: refs live in the main one
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
        if loose.exists():
            value = _read(loose)
            if _SHA.fullmatch(value):
                return value
            raise _Unsure  # a symbolic ref to another ref, or something odd
    packed = common / "packed-refs"
    # Not there either: an unborn branch, no commit yet.
    return _packed_ref(packed, ref) if packed.exists() else None


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
    with _open_regular(path) as f:
        data = f.read(_MAX_REF_BYTES + 1)
    if len(data) > _MAX_REF_BYTES:
        raise _Unsure
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise _Unsure from None


def _packed_ref(path: Path, ref: str) -> str | None:
    """``ref``'s commit in a ``packed-refs`` file, read line by line up to a bound."""
    with _open_regular(path, _MAX_PACKED_BYTES) as f:
        for raw in f:
            sha, _, name = raw.decode("utf-8", errors="replace").rstrip("\n").partition(" ")
            if name == ref and _SHA.fullmatch(sha):
                return sha
    return None


def _open_regular(path: Path, limit: int = _MAX_REF_BYTES) -> BinaryIO:
    """``path`` opened for reading if it is a regular file of at most ``limit`` bytes;
    never opens a FIFO or a device a workspace's owner put in its ``.git`` (the
    repository is theirs), and never blocks."""
    before = os.stat(path)
    if not stat.S_ISREG(before.st_mode):
        raise _NotARepository
    if before.st_size > limit:
        raise _Unsure
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise _NotARepository  # swapped between the check and the open
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
