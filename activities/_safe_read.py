"""One bounded reader for every file phasegate reads from a library, a spec or a standards
folder: regular files only, under a size cap, never blocking, optionally inside roots.

Why: a session's start input names files on the worker's disk. ``spec_path=/dev/zero``
once grew a worker to 14.5 GB, and sessions pointed at a named pipe each held an
activity thread forever. So a read here:

* stats the path first and refuses anything but a regular file (FIFO, socket, device,
  directory) without opening it, so nothing can block on a pipe or touch a device;
* opens with ``O_NONBLOCK`` (a FIFO swapped in after the stat opens at once and is
  refused by ``fstat``), ``O_NOCTTY`` and ``O_CLOEXEC``, then re-checks the opened file;
* refuses a file whose size is over ``limit`` before reading, and reads at most
  ``limit + 1`` bytes, so a file that grows (or lies about its size) cannot blow memory;
* with ``roots``, refuses a file whose real path (of the file actually opened, read
  back from ``/proc/self/fd`` on Linux) is not inside one of them. Symlinks are
  followed: one inside a root that stays inside is fine, one that leads out is refused,
  and swapping a symlink between the check and the open does not get around it;
* with ``follow_symlinks=False`` (files phasegate wrote itself, such as outputs kept by
  reference), refuses a symlink at the path (``lstat``, then ``O_NOFOLLOW``);
* decodes text as UTF-8, strictly.

No timeout: reads are of local regular files of bounded size. A stalled network file
system can still hold a thread; keep libraries and specs on local disk.

Errors are ``DefinitionError`` (code ``definition_invalid``, never retried) whose
``where`` is the path and whose hint says what to do.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from phasegate.domain.errors import DefinitionError

__all__ = ["KiB", "MiB", "decode", "inside", "read_bytes", "read_text", "real_path", "size_text"]

KiB = 1 << 10
MiB = 1 << 20
_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def size_text(n: int) -> str:
    """``n`` bytes for a person: "512 KiB", "1 MiB", "50.0 MiB"."""
    if n >= MiB:
        return f"{n / MiB:.1f} MiB".replace(".0 MiB", " MiB")
    if n >= KiB:
        return f"{n // KiB} KiB"
    return f"{n} bytes"


def real_path(path: str | Path) -> Path:
    """``path`` with every symlink and ``..`` resolved (the path need not exist)."""
    return Path(os.path.realpath(os.fspath(path)))


def inside(path: str | Path, roots: list[Path]) -> bool:
    """Whether the real path of ``path`` is one of ``roots`` (real paths) or below one."""
    real = real_path(path)
    return any(real == root or root in real.parents for root in roots)


def _kind(mode: int) -> str | None:
    """What a non-regular file is, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse(path: str | Path, what: str, problem: str, hint: str | None) -> DefinitionError:
    return DefinitionError(
        f"the {what} {problem}", where=str(path), hint=hint or "replace it with a regular file"
    )


def _opened_path(fd: int, path: str | Path) -> Path:
    """The real path of the file open on ``fd`` (Linux), else of ``path``."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return real_path(path)


def read_bytes(
    path: str | Path,
    *,
    limit: int,
    what: str = "file",
    roots: list[Path] | None = None,
    hint: str | None = None,
    size_hint: str | None = None,
    follow_symlinks: bool = True,
) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Args:
        path: The file to read (symlinks are followed unless ``follow_symlinks`` is False).
        limit: Largest size accepted, in bytes.
        what: What the file is, for messages ("spec", "library file").
        roots: When given, the file actually opened must lie inside one of these
            (real, absolute) folders.
        hint: What to do when the file is refused (default: replace it with a regular file).
        size_hint: What to do when the file is too large (default: ``hint``).
        follow_symlinks: False: a symlink at ``path`` is refused, not followed.

    Raises:
        FileNotFoundError: ``path`` does not exist (callers word their own error).
        DefinitionError: Unreadable, not a regular file (a symlink, without
            ``follow_symlinks``), outside ``roots`` or larger than ``limit``.
    """
    try:
        st = os.stat(path, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        raise  # the caller says what a missing file means (template, spec, ...)
    except OSError as exc:
        raise _refuse(path, what, f"cannot be read ({exc.strerror})", hint) from None
    kind = _kind(st.st_mode)
    if kind:
        raise _refuse(path, what, f"is {kind}, not a regular file", hint)
    if st.st_size > limit:
        raise _refuse(path, what, _too_big(st.st_size, limit), size_hint or hint)
    try:
        fd = os.open(path, _FLAGS if follow_symlinks else _FLAGS | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:  # swapped for a link since
            raise _refuse(path, what, "is a symbolic link, not a regular file", hint) from None
        raise _refuse(path, what, f"cannot be opened ({exc.strerror})", hint) from None
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)  # swapped for a pipe or device since the stat
        if kind:
            raise _refuse(path, what, f"is {kind}, not a regular file", hint)
        if roots is not None and not inside(_opened_path(fd, path), roots):
            raise _refuse(
                path,
                what,
                f"resolves to {_opened_path(fd, path)}, outside "
                f"{' and '.join(map(str, roots)) or 'every allowed folder'}",
                hint,
            )
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except BlockingIOError:
        raise _refuse(path, what, "would block on read", hint) from None
    except OSError as exc:
        raise _refuse(path, what, f"cannot be read ({exc.strerror})", hint) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise _refuse(path, what, _too_big(limit, limit, grew=True), size_hint or hint)
    return data


def _too_big(size: int, limit: int, *, grew: bool = False) -> str:
    more = "more than " if grew else ""
    return f"is {more}{size_text(size)} (limit {size_text(limit)})"


def decode(data: bytes, path: str | Path, *, what: str = "file", hint: str | None = None) -> str:
    """``data`` as UTF-8 text, or a ``DefinitionError`` naming ``path``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(
            path,
            what,
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            hint or "save it as UTF-8",
        ) from None


def read_text(
    path: str | Path,
    *,
    limit: int,
    what: str = "file",
    roots: list[Path] | None = None,
    hint: str | None = None,
    follow_symlinks: bool = True,
) -> str:
    """The UTF-8 text of the regular file ``path`` (see :func:`read_bytes`).

    Raises:
        DefinitionError: As :func:`read_bytes`, or the bytes are not UTF-8.
    """
    data = read_bytes(
        path, limit=limit, what=what, roots=roots, hint=hint, follow_symlinks=follow_symlinks
    )
    return decode(data, path, what=what)
