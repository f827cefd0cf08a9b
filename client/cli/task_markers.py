"""The active-session marker and ``phasegate doctor``: the client side of ``.workflow/``.

``.workflow/.active-WFS-<slug>`` names the session the CLI and MCP use by default
(Claude-Code-Workflow's marker; its own are empty files, ``touch``\\ed). phasegate's
marker holds the session id on one line; for an empty one the id comes from the
folder's ``workflow-session.json`` (``phasegate.session_id``, else its own
``session_id``). Several markers: the newest (mtime) wins.

- :func:`find_markers`, :func:`active_session`, :func:`use_session`: pure reads and
  one atomic write (the marker is written whole, then the other markers removed);
- :func:`doctor` finds what is wrong, each :class:`Finding` with a one-line message and
  the fix it applies; :func:`fix` applies them. Sessions are looked up through a
  callable (``lookup(session_id) -> SessionInfo | None``) and rebuilt through another
  (``reproject(session_id)``), so the checks are tested without a server;
- :func:`register` adds ``phasegate session use|current`` and ``phasegate doctor``.

Findings: an orphaned marker (its folder is gone, or the phasegate session it names
is gone or has ended) is removed; of several live markers the newest is kept; view
files of a session that are missing, corrupt or edited by hand (compared with the
hashes its last projection recorded) are rebuilt by asking the session to project
again. A marker of a folder phasegate never wrote (Claude-Code-Workflow's own session)
is left alone unless its folder is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from phasegate.client.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    JSON,
    Ctx,
    Parser,
    echo,
    echo_err,
    remote,
)
from phasegate.client.cli._render import to_json
from phasegate.domain.errors import SessionError, WorkspaceRefused
from phasegate.domain.tasks.projection import (
    MARKER_PREFIX,
    SESSION_FILE,
    WORKFLOW_DIR,
    check_folder,
    corrupt,
    digest,
    session_id_of,
)

__all__ = [
    "PROJECT_UPDATE",
    "TASK_FILES_QUERY",
    "Finding",
    "Marker",
    "SessionInfo",
    "active_session",
    "doctor",
    "find_markers",
    "fix",
    "register",
    "session_ids",
    "use_session",
]

_MARKER_BYTES = 4096
_SESSION_BYTES = 1 << 20
_VIEW_BYTES = 16 << 20
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_SHOWN = 5

Kind = Literal[
    "orphaned_marker",
    "extra_marker",
    "unnamed_marker",
    "view_missing",
    "view_corrupt",
    "view_edited",
]


@dataclass(frozen=True)
class Marker:
    """One ``.workflow/.active-WFS-<slug>`` file."""

    path: Path
    folder: str  # .workflow/WFS-<slug>
    session_id: str | None
    mtime: float
    written_by_phasegate: bool
    folder_exists: bool


@dataclass(frozen=True)
class SessionInfo:
    """What ``doctor`` needs to know of a session (the CLI asks Temporal)."""

    session_id: str
    open: bool = True
    folder: str = ""
    target: str = ""
    hashes: dict[str, str] = field(default_factory=dict)
    status: str = ""


@dataclass
class Finding:
    """One problem ``doctor`` found: a one-line ``message`` and the ``fix`` it applies."""

    kind: Kind
    path: str
    message: str
    fix: str
    session_id: str = ""
    fixable: bool = True
    fixed: bool = False


Lookup = Callable[[str], SessionInfo | None]


# --------------------------------------------------------------------------- reading


def _read(path: Path, limit: int) -> bytes | None:
    """The regular file's bytes (never through a link, never blocking), None otherwise."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _session_json(root: Path, folder: str) -> dict[str, Any] | None:
    data = _read(root / folder / SESSION_FILE, _SESSION_BYTES)
    try:
        parsed = json.loads(data.decode("utf-8")) if data else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _is_folder(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return stat.S_ISDIR(os.lstat(path).st_mode)
    return False


def find_markers(root: str | Path) -> list[Marker]:
    """The markers in ``<root>/.workflow/``, newest first (ties: by name).

    A marker's session id is its first line, else the folder's ``workflow-session.json``
    (``phasegate.session_id``, else ``session_id``); None when neither names one.
    """
    top = Path(root) / WORKFLOW_DIR
    try:
        entries = sorted(os.listdir(top))
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.startswith(MARKER_PREFIX):
            continue
        folder = f"{WORKFLOW_DIR}/{entry[len(MARKER_PREFIX) :]}"
        try:
            mtime = os.lstat(top / entry).st_mtime
        except OSError:
            continue
        line = (_read(top / entry, _MARKER_BYTES) or b"").decode("utf-8", "replace").strip()
        line = line.splitlines()[0].strip() if line else ""
        meta = None if check_folder(folder) else _session_json(Path(root), folder)
        found.append(
            Marker(
                path=top / entry,
                folder=folder,
                session_id=line or session_id_of(meta),
                mtime=mtime,
                written_by_phasegate=bool(line) or isinstance((meta or {}).get("phasegate"), dict),
                folder_exists=check_folder(folder) is None and _is_folder(Path(root) / folder),
            )
        )
    return sorted(found, key=lambda m: (-m.mtime, m.path.name))


def active_session(root: str | Path) -> tuple[str, str] | None:
    """``(session_id, folder)`` of the newest marker whose folder exists and that names
    a session, or None."""
    for marker in find_markers(root):
        if marker.session_id and marker.folder_exists:
            return marker.session_id, marker.folder
    return None


def use_session(root: str | Path, folder: str, session_id: str) -> Path:
    """Make ``session_id`` (its files in ``folder``) the active session: its marker is
    written whole (temp file, fsync, rename), then every other marker removed.

    Args:
        root: The project (the folder holding ``.workflow/``).
        folder: ``.workflow/WFS-<slug>`` or ``WFS-<slug>``.
        session_id: The phasegate session id.

    Returns:
        The marker's path.

    Raises:
        SessionError: ``folder`` is not a task folder, or the id is not one line.
        WorkspaceRefused: ``.workflow`` is a symlink or a file.
    """
    from phasegate.activities._workspace_files import WorkspaceFolder
    from phasegate.activities._workspace_files import WorkspaceRefused as Refused

    folder = folder if folder.startswith(f"{WORKFLOW_DIR}/") else f"{WORKFLOW_DIR}/{folder}"
    problem = check_folder(folder.rstrip("/"))
    if problem is not None:
        raise SessionError(problem, where="folder", hint="name the session's WFS-<slug> folder")
    if not session_id or any(c in session_id for c in "\r\n\x00"):
        raise SessionError(f"{session_id!r} is not a session id", where="session_id")
    name = MARKER_PREFIX + folder.rstrip("/").rsplit("/", 1)[-1]
    try:
        with WorkspaceFolder(Path(root).resolve(), (WORKFLOW_DIR,)) as top:
            path = top.write(name, (session_id + "\n").encode("utf-8"))
    except Refused as exc:
        raise WorkspaceRefused(exc.message, where=str(root), hint=exc.hint) from None
    for marker in find_markers(root):
        if marker.path.name != name:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker.path)
    return path


# --------------------------------------------------------------------------- doctor


def doctor(root: str | Path, lookup: Lookup) -> list[Finding]:
    """What is wrong with the markers and view files under ``root`` (nothing is changed).

    Args:
        root: The project (the folder holding ``.workflow/``).
        lookup: ``session_id -> SessionInfo`` (None: no such session).
    """
    root = Path(root)
    findings: list[Finding] = []
    live: list[Marker] = []
    infos: dict[str, SessionInfo | None] = {}

    def info(session_id: str) -> SessionInfo | None:
        if session_id not in infos:
            infos[session_id] = lookup(session_id)
        return infos[session_id]

    for marker in find_markers(root):
        problem = _marker_problem(marker, info)
        if problem is not None:
            findings.append(problem)
        elif marker.session_id:
            live.append(marker)
    for stale in live[1:]:
        findings.append(
            Finding(
                "extra_marker",
                _rel(root, stale.path),
                f"several active-session markers: {stale.path.name} is older than "
                f"{live[0].path.name}",
                f"remove {stale.path.name} (keep the newest, {live[0].path.name})",
                stale.session_id or "",
            )
        )
    for session_id in _phasegate_sessions(root, live):
        found = info(session_id)
        if found is not None and found.folder and _same_root(found.target, root):
            findings += _view_findings(root, found)
    return findings


def _marker_problem(marker: Marker, info: Callable[[str], SessionInfo | None]) -> Finding | None:
    name, rel = marker.path.name, f"{WORKFLOW_DIR}/{marker.path.name}"
    remove = f"remove {name}"
    if not marker.folder_exists:
        why = f"{name} names {marker.folder}, which is gone"
        return Finding("orphaned_marker", rel, why, remove, marker.session_id or "")
    if not marker.session_id:
        return Finding(
            "unnamed_marker",
            rel,
            f"{name} names no session (empty, and {marker.folder} has no readable {SESSION_FILE})",
            "none: run `phasegate session use SESSION` to choose the session",
            fixable=False,
        )
    found = info(marker.session_id)
    if found is None and marker.written_by_phasegate:
        why = f"{name} names session {marker.session_id}, which does not exist"
        return Finding("orphaned_marker", rel, why, remove, marker.session_id)
    if found is not None and not found.open:
        ended = found.status or "closed"
        why = f"{name} names session {marker.session_id}, which has ended ({ended})"
        return Finding("orphaned_marker", rel, why, remove, marker.session_id)
    return None


def _phasegate_sessions(root: Path, live: list[Marker]) -> list[str]:
    """Sessions whose views to check: the live markers' and every folder phasegate wrote."""
    ids = [m.session_id for m in live if m.session_id]
    top = root / WORKFLOW_DIR
    with contextlib.suppress(OSError):
        for entry in sorted(os.listdir(top)):
            folder = f"{WORKFLOW_DIR}/{entry}"
            if check_folder(folder) is None and _is_folder(root / folder):
                meta = _session_json(root, folder) or {}
                if isinstance(meta.get("phasegate"), dict):
                    ids.append(session_id_of(meta) or "")
    return [i for i in dict.fromkeys(ids) if i]


def _same_root(target: str, root: Path) -> bool:
    if not target:
        return True
    return os.path.realpath(target) == os.path.realpath(root)


def _view_findings(root: Path, session: SessionInfo) -> list[Finding]:
    """Missing, corrupt and edited view files of one session, a finding per kind."""
    found: dict[Kind, list[str]] = {"view_missing": [], "view_corrupt": [], "view_edited": []}
    base = root / session.folder
    for rel, expected in sorted(session.hashes.items()):
        path = base / rel
        data = _read(path, _VIEW_BYTES)
        if data is None:
            gone = not os.path.lexists(path)
            found["view_missing" if gone else "view_corrupt"].append(rel)
        elif corrupt(rel, data):
            found["view_corrupt"].append(rel)
        elif digest(data) != expected:
            found["view_edited"].append(rel)
    words = {"view_missing": "missing", "view_corrupt": "corrupt", "view_edited": "edited by hand"}
    out = []
    for kind, rels in found.items():
        if rels:
            shown = ", ".join(rels[:_SHOWN]) + (
                f" and {len(rels) - _SHOWN} more" if len(rels) > _SHOWN else ""
            )
            out.append(
                Finding(
                    kind,
                    session.folder,
                    f"{len(rels)} view file(s) of session {session.session_id} {words[kind]} "
                    f"in {session.folder}: {shown}",
                    f"rebuild: session {session.session_id} writes its files again",
                    session.session_id,
                )
            )
    return out


def _rel(root: Path, path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(root))
    return str(path)


async def fix(
    root: str | Path,
    findings: Iterable[Finding],
    reproject: Callable[[str], Awaitable[object]],
) -> list[Finding]:
    """Apply each fixable finding's fix: remove the marker, or ask its session to
    project its files again (once per session). Returns the findings, ``fixed`` set."""
    done: list[Finding] = []
    rebuilt: set[str] = set()
    for finding in findings:
        if not finding.fixable:
            done.append(finding)
            continue
        if finding.kind in ("orphaned_marker", "extra_marker"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(Path(root) / finding.path)
        elif finding.session_id not in rebuilt:
            await reproject(finding.session_id)
            rebuilt.add(finding.session_id)
        finding.fixed = True
        done.append(finding)
    return done


def session_ids(root: str | Path) -> list[str]:
    """Every session :func:`doctor` may look up under ``root`` (to fetch them first)."""
    live = [m for m in find_markers(root) if m.session_id]
    return _phasegate_sessions(Path(root), live)


# --------------------------------------------------------------------------- commands

TASK_FILES_QUERY = "task_files"
PROJECT_UPDATE = "project_task_files"
"""The session's update that projects its files again (``doctor --fix``)."""


def project_root(given: str | None) -> Path:
    """``--root``, else the nearest folder holding ``.workflow/`` from the current one
    (where ``phasegate task`` finds its session), else the current folder."""
    if given is not None:
        return Path(given)
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / WORKFLOW_DIR).is_dir():
            return folder
    return here


def register(sub: Any) -> None:
    """Add ``phasegate session use|current`` and ``phasegate doctor`` to ``sub``."""
    root = Parser(add_help=False)
    root.add_argument(
        "--root",
        default=None,
        help="the project (default: the nearest folder holding .workflow/, walking up from "
        "this directory, as the task commands find it; else this directory)",
    )
    group = sub.add_parser("session", help="the session this project uses by default")
    cmds = group.add_subparsers(
        dest="session_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    s = cmds.add_parser("use", parents=[JSON, root], help="make a session this project's default")
    s.add_argument("session", metavar="ID_OR_FOLDER", help="a session id, or its WFS-<slug> folder")
    s.set_defaults(func=remote(_use))
    s = cmds.add_parser("current", parents=[JSON, root], help="the session used by default")
    s.set_defaults(func=_current)
    s = sub.add_parser(
        "doctor", parents=[JSON, root], help="check .workflow markers and task files"
    )
    s.add_argument("--fix", action="store_true", help="remove bad markers, rebuild task files")
    s.set_defaults(func=remote(_doctor))


def _current(args: Any, settings: Any) -> int:
    found = active_session(project_root(args.root))
    if found is None:
        echo_err(
            f"error: no active session in {Path(project_root(args.root)).resolve() / WORKFLOW_DIR} "
            "(hint: `phasegate session use ID`)"
        )
        return EXIT_ERROR
    session_id, folder = found
    shown = {"session_id": session_id, "folder": folder}
    echo(to_json(shown) if args.json else f"{session_id}  {folder}")
    return EXIT_OK


async def _use(ctx: Ctx) -> int:
    args = ctx.args
    client = await ctx.client()
    name = args.session.rstrip("/").rsplit("/", 1)[-1]
    folder = f"{WORKFLOW_DIR}/{name}"
    meta = (
        _session_json(Path(project_root(args.root)), folder)
        if check_folder(folder) is None
        else None
    )
    session_id = session_id_of(meta) if meta else args.session
    if not session_id:
        raise SessionError(f"{folder}/{SESSION_FILE} names no session", where=folder)
    info = await _remote_info(client, session_id)
    if info is None:
        raise SessionError(
            f"there is no session {session_id}", hint="`phasegate list` shows the sessions"
        )
    if meta is None:
        folder = info.folder
        if not folder:
            raise SessionError(
                f"session {session_id} has no task folder (.workflow/WFS-<slug>)",
                hint="only sessions with task state write one",
            )
    path = use_session(project_root(args.root), folder, session_id)
    shown = {"session_id": session_id, "folder": folder, "marker": str(path)}
    ctx.emit(shown, f"{session_id} is the active session ({folder})")
    return EXIT_OK


async def _doctor(ctx: Ctx) -> int:
    args = ctx.args
    client = await ctx.client()
    infos = {sid: await _remote_info(client, sid) for sid in session_ids(project_root(args.root))}
    findings = doctor(project_root(args.root), infos.get)
    if args.fix:

        async def reproject(session_id: str) -> object:
            return await client.handle(session_id).execute_update(PROJECT_UPDATE)

        findings = await fix(project_root(args.root), findings, reproject)
    lines = [
        f"{'fixed' if f.fixed else f.kind}: {f.message}" + ("" if f.fixed else f" (fix: {f.fix})")
        for f in findings
    ]
    ctx.emit([f.__dict__ for f in findings], "\n".join(lines) or "no problems found")
    return EXIT_OK if all(f.fixed for f in findings) else EXIT_ERROR


async def _remote_info(client: Any, session_id: str) -> SessionInfo | None:
    """The session as Temporal knows it (None: no such session)."""
    from temporalio.client import (
        WorkflowExecutionStatus,
        WorkflowQueryFailedError,
        WorkflowQueryRejectedError,
    )
    from temporalio.service import RPCError, RPCStatusCode

    from phasegate.domain.tasks.files import TaskFilesSource

    handle = client.handle(session_id)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    running = desc.status == WorkflowExecutionStatus.RUNNING
    ended = desc.status.name.lower() if desc.status is not None else ""
    try:
        src = await handle.query(TASK_FILES_QUERY, result_type=TaskFilesSource)
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError, RPCError):
        # an older session without task state, or one that cannot answer: nothing to compare
        return SessionInfo(session_id, open=running, status=ended)
    return SessionInfo(
        session_id,
        open=running,
        folder=src.board.projection.folder or src.folder,
        target=src.target,
        hashes=dict(src.board.projection.hashes),
        status=src.status if running else ended,
    )
