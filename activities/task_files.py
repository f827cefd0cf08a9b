"""The ``project_task_files`` activity: a session's task board written to
``<target>/.workflow/WFS-<slug>/`` as Claude-Code-Workflow's files.

The files are views (``domain/tasks/projection.py`` renders them); Temporal's history
is the truth. One projection:

1. reads the board with the session's ``task_files`` query (the workflow hands over
   only its id and what it last wrote: a board of 500 tasks would otherwise sit in
   history once per projection);
2. renders every file, refusing more than :data:`MAX_PROJECTION_BYTES` in all;
3. compares each file on disk with what phasegate wrote there before: a file that is
   neither what the last projection wrote, nor what any attempt of a projection wrote
   (the folder's manifest, below), nor what this one writes is a *hand edit*,
   reported in ``edits`` and overwritten; a missing, unreadable or corrupt file
   (JSON that does not parse, not UTF-8, a symlink, a FIFO) is *rebuilt*;
4. writes each changed file whole: a temp file in the same folder, fsync, rename over
   the old one (``activities/_workspace_files.py``), so a worker killed at any moment
   leaves every file either old or new, never torn; files that already hold the new
   bytes are left alone, so the next projection after a kill finishes the job;
5. deletes the files it wrote before that are no longer rendered.

``workflow-session.json`` is written last: when its ``phasegate.version`` shows N,
every other file shows N too (unless edited since).

**Manifest** ``.phasegate-views.json``: before writing, the hashes about to be written
are added to it (the last few per file). A projection killed half way leaves new
files the workflow never heard of; the manifest keeps them from being reported as
hand edits by the next one, whatever changed on the board in between. It only
quiets reports: an agent that forges it hides its edit from the report, and the
edit is overwritten all the same.

**Files phasegate never wrote** (an imported folder's own IMPL_PLAN.md, a summary
written by Claude-Code-Workflow) are copied once to ``.phasegate-originals/<path>``
before they are replaced, and reported in ``edits``.

Containment (threat level 3: an agent with a shell in the target): the target is
re-checked against the worker's target roots on every call (any Temporal client can
schedule the activity), the folder must be ``.workflow/WFS-<slug>``, every folder on
the way is opened without following a symlink and held open by descriptor, files are
read with ``O_NOFOLLOW`` and written by rename, so nothing is read or written outside
``<target>/<folder>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from phasegate.activities._safe_read import MiB, size_text
from phasegate.activities._workspace_files import WorkspaceFolder, WorkspaceRefused, checked_root
from phasegate.domain import errors
from phasegate.domain.tasks.files import ProjectRequest, ProjectResult, TaskFilesSource
from phasegate.domain.tasks.projection import (
    PLAN_FILE,
    SESSION_FILE,
    TODO_FILE,
    check_folder,
    corrupt,
    digest,
    is_view_path,
    render_files,
)
from phasegate.temporal import application_error

__all__ = [
    "HEARTBEAT_EVERY",
    "MANIFEST",
    "MAX_FILE_BYTES",
    "MAX_PROJECTION_BYTES",
    "ORIGINALS",
    "TASK_FILES_QUERY",
    "SourceReader",
    "TaskFileActivities",
    "ViewsWritten",
    "query_source",
    "write_views",
]

TASK_FILES_QUERY = "task_files"
"""The ``GatedSession`` query answering :class:`TaskFilesSource`."""
MAX_PROJECTION_BYTES = 64 * MiB
"""All files of one projection together (1,000 tasks with 16 KB of evidence each fit)."""
MAX_FILE_BYTES = 16 * MiB
"""Largest file read back to compare (a larger one is rebuilt, never read whole)."""
HEARTBEAT_EVERY = 50
"""Files between two heartbeats."""
MANIFEST = ".phasegate-views.json"
ORIGINALS = ".phasegate-originals"
_KEPT_HASHES = 4
LOCK_FILE = ".phasegate-lock"
LOCK_WAIT_SECONDS = 30.0
_FOLDER_LOCKS: dict[tuple[str, str], asyncio.Lock] = {}
_TEMP = re.compile(r"\.(.+)\.[0-9a-f]{16}\.tmp")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_LAST = {PLAN_FILE: 1, TODO_FILE: 2, SESSION_FILE: 3}  # written after the task files

SourceReader = Callable[[ProjectRequest], Awaitable[TaskFilesSource]]
"""Reads what the files show: the session's ``task_files`` query in production."""


async def query_source(req: ProjectRequest) -> TaskFilesSource:
    """The session's ``task_files`` query, through the worker's own client.

    Raises:
        ApplicationError: Non-retryable ``session_not_found`` when the session is gone;
            other failures propagate and Temporal retries the activity.
    """
    handle = activity.client().get_workflow_handle(req.session_id)
    try:
        return await handle.query(TASK_FILES_QUERY, result_type=TaskFilesSource)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise application_error(
                errors.SessionNotFound(
                    f"session {req.session_id} is gone; its task files were not written",
                    where=req.folder,
                    hint="nothing to do: a closed session's files stay as last written",
                )
            ) from None
        raise


@dataclass
class ViewsWritten:
    """What :func:`write_views` did."""

    hashes: dict[str, str]
    edits: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    written: int = 0
    deleted: list[str] = field(default_factory=list)


class TaskFileActivities:
    """The projection of task boards to ``.workflow/`` folders.

    Args:
        target_roots: Folders a session's target must lie in (empty: anywhere but ``/``),
            the worker's ``PHASEGATE_TARGET_ROOTS``.
        source_reader: How the board is read; default :func:`query_source` (tests hand
            a :class:`TaskFilesSource` over directly).
        max_bytes: All files of one projection together.
    """

    def __init__(
        self,
        *,
        target_roots: list[str] | None = None,
        source_reader: SourceReader | None = None,
        max_bytes: int = MAX_PROJECTION_BYTES,
    ) -> None:
        self.target_roots = list(target_roots or [])
        self.source_reader = source_reader or query_source
        self.max_bytes = max_bytes

    @property
    def activities(self) -> list[Callable[..., Any]]:
        """What to register on a worker."""
        return [self.project]

    @activity.defn(name="project_task_files")
    async def project(self, req: ProjectRequest) -> ProjectResult:
        """Write the session's task files (module docstring); idempotent.

        Returns:
            The folder, the board version the files show, the hash of every file, the
            hand edits and rebuilt files found, and how many files were written.

        Raises:
            ApplicationError: Non-retryable: ``workspace_refused`` (the target is not a
                folder or is outside the worker's target roots, the folder is not
                ``.workflow/WFS-<slug>``, a folder on the way is a symlink or a file, a
                file is a folder), ``payload_too_large`` (the files exceed the bound),
                ``session_not_found``.
        """
        problem = check_folder(req.folder)
        if problem is not None:
            raise _refused(problem, req.folder, "the session names its folder when it starts")
        # One projection of a folder at a time in this worker, reading the board inside
        # the lock: a projection a continued run left behind can never write an older
        # board over a newer one (write_views also holds an flock, across processes).
        lock = _FOLDER_LOCKS.setdefault((req.target, req.folder), asyncio.Lock())
        async with lock:
            return await self._project(req)

    async def _project(self, req: ProjectRequest) -> ProjectResult:
        source = await self.source_reader(req)
        if source.folder != req.folder:
            source = source.model_copy(update={"folder": req.folder})
        loop = asyncio.get_running_loop()

        def beat(done: int) -> None:
            loop.call_soon_threadsafe(_heartbeat, done)

        def work() -> ViewsWritten:
            try:
                root = checked_root(req.target, self.target_roots)
            except WorkspaceRefused as exc:
                raise _refused(exc.message, req.target, exc.hint) from None
            files = render_files(source)
            _check_size(files, req.folder, self.max_bytes)
            try:
                return write_views(root, req.folder, files, req.hashes, beat)
            except WorkspaceRefused as exc:
                raise _refused(exc.message, req.folder, exc.hint) from None

        done = await asyncio.to_thread(work)
        return ProjectResult(
            folder=req.folder,
            version=source.board.version,
            hashes=done.hashes,
            edits=done.edits,
            rebuilt=done.rebuilt,
            written=done.written,
            projected_at=datetime.now(UTC),
        )


def _heartbeat(done: int) -> None:
    if activity.in_activity():
        activity.heartbeat(done)


def _refused(message: str, where: str, hint: str) -> Exception:
    return application_error(errors.WorkspaceRefused(message, where=where, hint=hint))


def _check_size(files: Mapping[str, str], folder: str, limit: int) -> None:
    """All files within ``limit``, and each within :data:`MAX_FILE_BYTES` (what is read
    back to compare: a larger file would look unreadable to every later projection)."""
    sizes = {rel: len(text.encode("utf-8")) for rel, text in files.items()}
    total = sum(sizes.values())
    rel = max(sizes, key=lambda r: sizes[r], default="")
    if total > limit or (rel and sizes[rel] > MAX_FILE_BYTES):
        raise application_error(
            errors.PayloadTooLarge(
                f"the task files would come to {size_text(total)} (limit {size_text(limit)}, "
                f"{size_text(MAX_FILE_BYTES)} a file); the largest is {rel} "
                f"({size_text(sizes[rel])})",
                where=folder,
                hint="keep task summaries and evidence short: paths and results, not file contents",
            )
        )


# --------------------------------------------------------------------------- writing


class _Unreadable:
    """A file at the name that is not one phasegate can read back (why: ``reason``)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Folder(WorkspaceFolder):
    """A view folder held open by descriptor: reads and removals relative to it."""

    def read(self, name: str, limit: int) -> bytes | _Unreadable | None:
        """The bytes of the regular file ``name`` (None: nothing there), never following
        a link and never blocking on a FIFO."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self._fd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # ELOOP: a symlink
            return _Unreadable(exc.strerror or "cannot be opened")
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return _Unreadable("not a regular file")
            if st.st_size > limit:
                return _Unreadable(f"larger than {size_text(limit)}")
            chunks: list[bytes] = []
            left = limit + 1
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            return data if len(data) <= limit else _Unreadable(f"larger than {size_text(limit)}")
        except OSError as exc:
            return _Unreadable(exc.strerror or "cannot be read")
        finally:
            os.close(fd)

    def remove(self, name: str) -> bool:
        """Remove the file (or link) ``name``; False when nothing was there."""
        try:
            os.unlink(name, dir_fd=self._fd)
        except FileNotFoundError:
            return False
        except IsADirectoryError:
            raise WorkspaceRefused(
                f"{self.path / name} is a folder, where phasegate kept a file",
                f"remove the folder {self.path / name}",
            ) from None
        return True

    def names(self) -> list[str]:
        return os.listdir(self._fd)


class _Folders:
    """The WFS folder and its subfolders, each opened once (and created) on first use."""

    def __init__(self, root: Path, parts: tuple[str, ...], stack: contextlib.ExitStack) -> None:
        self.root, self.parts, self.stack = root, parts, stack
        self.open: dict[str, _Folder] = {}

    def get(self, sub: str) -> _Folder:
        if sub not in self.open:
            extra = tuple(sub.split("/")) if sub else ()
            self.open[sub] = self.stack.enter_context(_Folder(self.root, self.parts + extra))
        return self.open[sub]

    def existing(self, sub: str) -> _Folder | None:
        """The subfolder if it is there (never created)."""
        if sub in self.open or not sub:
            return self.get(sub)
        return self.get(sub) if self.get("").exists(sub) else None


def _split(rel: str) -> tuple[str, str]:
    sub, _, name = rel.rpartition("/")
    return sub, name


def write_views(
    root: Path,
    folder: str,
    files: Mapping[str, str],
    previous: Mapping[str, str],
    progress: Callable[[int], None] | None = None,
) -> ViewsWritten:
    """Write ``files`` (path relative to ``<root>/<folder>`` -> text) as the module
    docstring describes; ``previous`` is what the last projection wrote (path -> sha256).

    Args:
        root: The target, from ``checked_root``.
        folder: ``.workflow/WFS-<slug>`` (checked by the caller).
        files: What ``render_files`` gave.
        previous: The hashes the last completed projection returned.
        progress: Called with the number of files handled, every
            :data:`HEARTBEAT_EVERY` files and at the end (from this thread).

    Raises:
        WorkspaceRefused: A folder on the way is a symlink or a file, or a file is a folder.
    """
    new = {rel: text.encode("utf-8") for rel, text in files.items()}
    out = ViewsWritten(hashes={rel: digest(data) for rel, data in new.items()})
    with contextlib.ExitStack() as stack:
        folders = _Folders(root, tuple(folder.split("/")), stack)
        _hold_lock(folders.get(""), stack, progress)
        manifest = _read_manifest(folders.get(""))
        _write_manifest(folders.get(""), manifest, out.hashes)
        for sub in ("", ".task", ".summaries"):
            _remove_temp_files(folders.existing(sub), sub)
        order = sorted(new, key=lambda rel: (_LAST.get(rel, 0), rel.startswith(".summaries/")))
        for done, rel in enumerate(order, 1):
            known = {h for h in (previous.get(rel), *manifest.get(rel, ())) if h}
            if _write_one(folders, rel, new[rel], known, out):
                out.written += 1
            if progress is not None and (done % HEARTBEAT_EVERY == 0 or done == len(order)):
                progress(done)
        for rel in sorted(set(previous) - set(new)):
            sub, name = _split(rel)
            target = folders.existing(sub) if is_view_path(rel) else None
            if target is not None and target.remove(name):
                out.deleted.append(rel)
    return out


def _hold_lock(
    top: _Folder, stack: contextlib.ExitStack, progress: Callable[[int], None] | None = None
) -> None:
    """An exclusive flock on ``.phasegate-lock`` in the folder until ``stack`` closes,
    waiting at most :data:`LOCK_WAIT_SECONDS` (heartbeating): anyone with a shell in the
    workspace can hold that lock, and a worker thread must never wait on it forever."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(LOCK_FILE, flags, 0o644, dir_fd=top._fd)
    except OSError as exc:
        raise WorkspaceRefused(
            f"{LOCK_FILE} cannot be opened ({exc.strerror})",
            hint=f"remove {LOCK_FILE} from the task folder; phasegate makes it again",
        ) from None
    stack.callback(os.close, fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise WorkspaceRefused(
            f"{LOCK_FILE} is not a regular file",
            hint=f"remove {LOCK_FILE} from the task folder; phasegate makes it again",
        )
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise WorkspaceRefused(
                    f"another process has held {LOCK_FILE} for {LOCK_WAIT_SECONDS:.0f} s",
                    hint="only phasegate writes the task files: stop whatever holds the lock "
                    "(`fuser` names it); the next change writes them again",
                ) from None
            if progress is not None:
                progress(0)
            time.sleep(0.1)


def _write_one(
    folders: _Folders,
    rel: str,
    data: bytes,
    known: set[str],
    out: ViewsWritten,
) -> bool:
    """Compare one file with what is on disk (``known``: the hashes phasegate wrote
    there before), report it, write it; False: it already holds ``data``."""
    sub, name = _split(rel)
    here = folders.get(sub)
    current = here.read(name, MAX_FILE_BYTES)
    if current is None:
        if known:
            out.rebuilt.append(rel)
    elif isinstance(current, _Unreadable) or corrupt(rel, current):
        out.rebuilt.append(rel)
    else:
        found = digest(current)
        if found == out.hashes[rel]:
            return False
        if found not in known:
            out.edits.append(rel)
            if not known:  # phasegate never wrote this file: keep the original
                _keep_original(folders, rel, current)
    here.write(name, data)
    return True


def _keep_original(folders: _Folders, rel: str, data: bytes) -> None:
    """Copy a file phasegate is about to replace for the first time (once)."""
    sub, name = _split(rel)
    keep = folders.get(f"{ORIGINALS}/{sub}" if sub else ORIGINALS)
    if not keep.exists(name):
        keep.write(name, data)


def _remove_temp_files(where: _Folder | None, sub: str) -> None:
    """Temp files a killed projection left behind (only those of view files)."""
    if where is None:
        return
    for entry in where.names():
        match = _TEMP.fullmatch(entry)
        inner = match.group(1) if match else ""
        if match and (inner == MANIFEST or is_view_path(f"{sub}/{inner}" if sub else inner)):
            with contextlib.suppress(OSError):
                where.remove(entry)


def _read_manifest(top: _Folder) -> dict[str, list[str]]:
    data = top.read(MANIFEST, MAX_FILE_BYTES)
    if not isinstance(data, bytes):
        return {}
    try:
        hashes = json.loads(data.decode("utf-8")).get("hashes", {})
    except (ValueError, AttributeError):
        return {}
    if not isinstance(hashes, dict):
        return {}
    return {
        str(rel): [h for h in kept if isinstance(h, str)][-_KEPT_HASHES:]
        for rel, kept in hashes.items()
        if isinstance(kept, list) and is_view_path(str(rel))
    }


def _write_manifest(
    top: _Folder, manifest: dict[str, list[str]], hashes: Mapping[str, str]
) -> None:
    """Add the hashes about to be written, before any view file is."""
    merged = {}
    for rel, h in sorted(hashes.items()):
        kept = [x for x in manifest.get(rel, []) if x != h]
        merged[rel] = [*kept, h][-_KEPT_HASHES:]
    if merged == manifest:
        return  # nothing new: a projection that changes nothing writes nothing
    body = {
        "about": "what phasegate wrote to these files (its views); not read as task state",
        "hashes": merged,
    }
    top.write(MANIFEST, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8"))
