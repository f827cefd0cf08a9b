"""Files the worker writes into a workspace, safe against what a shell in it can plant.

A coding agent works in the working directory with a shell (trust level 3): it can put
a symlink, a FIFO or a file at any name the worker is about to use, and swap one in
between a check and a write. So every folder and file phasegate writes under
``<working_dir>/.phasegate/`` goes through here:

- :func:`checked_root`: the working directory as a real path, refused when it is not a
  folder, is ``/``, or lies outside the worker's target roots (when it has some). An
  activity re-checks it on every call rather than trusting the workflow that
  scheduled it (any Temporal client can schedule phasegate's activities: level 2).
- :class:`WorkspaceFolder` opens ``<root>/<parts...>`` one component at a time from a
  descriptor of the root, creating what is missing with ``mkdir`` relative to its
  parent and opening each with ``O_DIRECTORY|O_NOFOLLOW``: a symlinked component is
  refused wherever it leads, and a link swapped in after the check changes nothing
  (every later call uses the descriptor, never the path).
- :meth:`WorkspaceFolder.write` creates a temp file under a random name with
  ``O_CREAT|O_EXCL|O_NOFOLLOW``, writes and fsyncs it, then renames it over the
  target: a link planted at the target is replaced, never followed, and there is no
  predictable name to plant one at.

Refusals raise :class:`WorkspaceRefused` (what and where, and what to do); activities
turn it into a non-retryable ``ApplicationError``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Self

__all__ = [
    "SPEC_FOLDER",
    "WorkspaceFolder",
    "WorkspaceRefused",
    "checked_root",
    "folder_name",
    "orchestration_parts",
]

SPEC_FOLDER = (".phasegate", "orchestrations")
"""Where, under the working directory, orchestrations keep their files."""

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_WORKDIR_HINT = "set the profile's working_dir to the project's folder"


class WorkspaceRefused(Exception):
    """The worker will not write there: ``message`` says what and where, ``hint`` what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(f"{message} ({hint})")
        self.message = message
        self.hint = hint


def checked_root(working_dir: str, target_roots: Sequence[str] = ()) -> Path:
    """The real path of ``working_dir``, checked as the worker's setup checks it.

    Raises:
        WorkspaceRefused: Not a folder, the file system's root, or outside every one of
            ``target_roots`` (when there are any).
    """
    if not working_dir or "\x00" in working_dir:
        raise WorkspaceRefused(
            f"the working directory {working_dir!r} is not a folder", _WORKDIR_HINT
        )
    real = Path(os.path.realpath(working_dir))
    if not real.is_dir():
        raise WorkspaceRefused(
            f"the working directory {working_dir} is not a folder", _WORKDIR_HINT
        )
    if real == Path(real.anchor):
        raise WorkspaceRefused("the working directory is the file system's root", _WORKDIR_HINT)
    roots = [Path(os.path.realpath(r)) for r in target_roots]
    if roots and not any(real == r or r in real.parents for r in roots):
        raise WorkspaceRefused(
            f"the working directory {working_dir} is outside the folders this worker serves "
            f"(PHASEGATE_TARGET_ROOTS: {', '.join(target_roots)})",
            "use a working_dir inside one of them, or add its folder to the worker's "
            "PHASEGATE_TARGET_ROOTS",
        )
    return real


def folder_name(orchestration_id: str) -> str:
    """The orchestration id as one path segment (a short digest keeps changed ids apart)."""
    if _SAFE_ID.fullmatch(orchestration_id) and orchestration_id.strip(".") == orchestration_id:
        return orchestration_id
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", orchestration_id).strip(".-")[:80] or "orchestration"
    return f"{safe}-{hashlib.sha256(orchestration_id.encode()).hexdigest()[:8]}"


def orchestration_parts(orchestration_id: str, *parts: str) -> tuple[str, ...]:
    """``.phasegate/orchestrations/<id>/<parts>``, as path components."""
    return (*SPEC_FOLDER, folder_name(orchestration_id), *parts)


class WorkspaceFolder:
    """``<root>/<parts...>``, created and held open without following a link.

    Use as a context manager: ``with WorkspaceFolder(root, parts) as folder:
    folder.write("tasks.md", data)``.

    Args:
        root: The working directory, from :func:`checked_root`.
        parts: Folder names below it, one component each.
    """

    def __init__(self, root: Path, parts: Sequence[str]) -> None:
        self.root = root
        self.parts = tuple(parts)
        self.path = root.joinpath(*self.parts)
        self._fd = -1

    def __enter__(self) -> Self:
        for part in self.parts:
            _check_name(part, self.root)
        fd = _open_root(self.root)
        try:
            here = self.root
            for part in self.parts:
                here = here / part
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass  # a folder, or whatever was planted there: the open tells
                except OSError as exc:
                    raise WorkspaceRefused(
                        f"cannot create the folder {here} ({exc.strerror})",
                        "check the working directory's permissions",
                    ) from None
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _not_a_folder(here, part, fd, self.root, exc) from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def exists(self, name: str) -> bool:
        """Whether anything (a link included) is at ``name`` in this folder."""
        try:
            os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def write(self, name: str, data: bytes) -> Path:
        """Write ``data`` as the file ``name`` in this folder, whole (a reader never sees
        half a file), replacing whatever is at ``name`` without following it.

        Returns:
            The file's path.
        """
        _check_name(name, self.path)
        target = self.path / name
        fd, tmp = -1, ""
        for _ in range(8):  # a random name is never taken; but never loop forever
            tmp = f".{name}.{secrets.token_hex(8)}.tmp"
            with contextlib.suppress(FileExistsError):
                fd = os.open(tmp, _NEW_FILE, 0o644, dir_fd=self._fd)
                break
        if fd < 0:
            raise WorkspaceRefused(f"cannot create a temporary file in {self.path}", "retry")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self._fd)
            if isinstance(exc, OSError) and exc.errno in (errno.EISDIR, errno.ENOTEMPTY):
                raise WorkspaceRefused(
                    f"{target} is a folder, where phasegate keeps a file",
                    f"remove the folder {target}",
                ) from None
            raise
        os.fsync(self._fd)  # the rename itself survives a crash
        return target


def _check_name(name: str, where: Path) -> None:
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise WorkspaceRefused(
            f"{name!r} is not a file or folder name in {where}", "report this phasegate bug"
        )


def _open_root(root: Path) -> int:
    """A descriptor of ``root``, which must still be the real folder that was checked."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise WorkspaceRefused(
            f"the working directory {root} cannot be opened ({exc.strerror})", _WORKDIR_HINT
        ) from None
    with contextlib.suppress(OSError):  # Linux: the folder actually opened
        if os.readlink(f"/proc/self/fd/{fd}") != str(root):
            os.close(fd)
            raise WorkspaceRefused(
                f"the working directory {root} was replaced while it was being checked",
                "retry; if it happens again, look for a process swapping folders",
            )
    return fd


def _not_a_folder(here: Path, part: str, parent: int, root: Path, exc: OSError) -> WorkspaceRefused:
    """Why ``part`` (in the folder open on ``parent``) cannot be opened as a folder."""
    try:  # O_DIRECTORY|O_NOFOLLOW on a link: ENOTDIR on Linux, ELOOP elsewhere
        is_link = stat.S_ISLNK(os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        is_link = exc.errno == errno.ELOOP
    if is_link:
        try:
            link = os.readlink(part, dir_fd=parent)
        except OSError:
            link = "?"
        real = Path(os.path.realpath(here.parent / link))
        outside = real != root and root not in real.parents
        where = f", outside the working directory {root}" if outside else ""
        return WorkspaceRefused(
            f"{here} is a symbolic link (to {link}{where}); phasegate does not write through links",
            f"remove the link {here}: phasegate creates the folder itself",
        )
    if exc.errno == errno.ENOTDIR:
        return WorkspaceRefused(
            f"{here} is not a folder", f"remove {here}: phasegate creates the folder itself"
        )
    return WorkspaceRefused(
        f"the folder {here} cannot be opened ({exc.strerror})",
        "check the working directory's permissions",
    )
