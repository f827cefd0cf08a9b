"""``phasegate`` CLI runs for the tests, without paying Python's start-up and imports
each time (≈0.6 s of CPU per run; the suite runs hundreds).

``cli_argv()`` is an argv prefix, a drop-in for ``[sys.executable, "-m",
"phasegate.client.cli"]`` in ``subprocess``/``asyncio.create_subprocess_exec`` calls:
``[*cli_argv(), "status", sid]``. It starts tests/cli_launcher.py (standard library only, no ``site``: milliseconds),
which asks a warm process (this module run as a script, one per pytest process, the
CLI's modules imported once) to fork a child running ``phasegate.client.cli`` as
``python -m`` would, on the launcher's own stdin/stdout/stderr, working directory,
environment and arguments. The child is a real process of its own; the launcher passes
on signals and exits with the child's status, so what a test sees (exit code, output,
Ctrl-C) is what the subprocess would give.

What this skips is the interpreter's start: the tests that check the real entry point
(the walkthroughs in test_cli.py and test_readme.py, the installed wheel, ``phasegate
dev``) keep ``python -m phasegate.client.cli``; ``PG_TESTS_REAL_CLI=1`` makes every run
the real one.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

__all__ = ["REAL_CLI", "cli_argv"]

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "cli_launcher.py"
REAL_CLI = [sys.executable, "-m", "phasegate.client.cli"]

# Imported in the warm process before any fork: what the commands import, eagerly or in
# their handlers (the client, its connection, the message models, the renderers).
_PRELOAD = (
    "phasegate.client.cli",
    "phasegate.temporal",
    "phasegate.client.api",
    "phasegate.client.orchestrations",
    "phasegate.client.graphs",
    "phasegate.client.keys",
    "phasegate.client.devserver",
    "phasegate.sealing",
    "phasegate.domain.tasks.projection",
    "temporalio.client",
    "temporalio.service",
)

_lock = threading.Lock()
_warm: tuple[subprocess.Popen[bytes], str] | None = None


def cli_argv() -> list[str]:
    """The argv prefix running ``phasegate`` through this process's warm CLI (started on
    first use, stopped when this process exits)."""
    global _warm
    if os.environ.get("PG_TESTS_REAL_CLI"):  # every run the real way (to compare, to debug)
        return list(REAL_CLI)
    with _lock:
        if _warm is None or _warm[0].poll() is not None:
            folder = tempfile.mkdtemp(prefix="pgcli-")
            path = os.path.join(folder, "s")
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("TEMPORAL_", "PHASEGATE_", "OTEL_", "PYTEST_"))
            }
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), path],
                stdin=subprocess.PIPE,  # closed when this process ends: the warm one leaves
                stdout=subprocess.PIPE,
                env={**env, "PYTHONUNBUFFERED": "1"},
                cwd=HERE.parent,
            )
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            if ready.strip() != b"ready":
                raise RuntimeError(f"the warm CLI process did not start: {ready!r}")
            _warm = (proc, path)
            atexit.register(_stop, proc)
        return [sys.executable, "-I", "-S", str(LAUNCHER), _warm[1]]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(Exception):
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(5)
    if proc.poll() is None:
        proc.kill()


# --- the warm process ------------------------------------------------------------------


def _serve(path: str) -> None:
    import importlib

    for name in _PRELOAD:
        importlib.import_module(name)
    assert threading.active_count() == 1, "the warm process must not start threads (fork)"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test process stops us (stdin EOF)
    sel = selectors.EpollSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    children: dict[int, socket.socket] = {}
    by_conn: dict[socket.socket, int] = {}
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):  # the test process is gone
                    for pid in children:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    os.unlink(path)
                    os.rmdir(os.path.dirname(path))
                    return
            elif key.data == "accept":
                conn, _ = listener.accept()
                try:
                    data, fds, _, _ = socket.recv_fds(conn, 1 << 22, 3)
                    request = json.loads(data)
                except Exception:  # noqa: BLE001 - a launcher that died on the way
                    conn.close()
                    continue
                keep = [listener.fileno(), wake_r, wake_w, sys.stdin.fileno(), sel.fileno()]
                keep += [c.fileno() for c in by_conn] + [conn.fileno()]
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, keep)  # never returns
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                by_conn[conn] = pid
                conn.sendall(json.dumps({"pid": pid}).encode())
                sel.register(conn, selectors.EVENT_READ, "launcher")
            elif key.data == "launcher":  # only ever closes: its launcher died
                conn = key.fileobj  # type: ignore[assignment]
                pid = by_conn.pop(conn)
                sel.unregister(conn)
                conn.close()
                children.pop(pid, None)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            else:  # SIGCHLD
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    conn = children.pop(pid, None)  # type: ignore[assignment]
                    if conn is None:
                        continue
                    by_conn.pop(conn, None)
                    sel.unregister(conn)
                    with contextlib.suppress(OSError):
                        conn.sendall(json.dumps({"status": status}).encode())
                    conn.close()


def _child(request: dict, fds: list[int], close: list[int]) -> None:  # type: ignore[type-arg]
    """In the forked child: become ``python -m phasegate.client.cli ARGS`` on the
    launcher's streams, folder and environment; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in close:
            with contextlib.suppress(OSError):
                os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        env = request["env"]
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        unbuffered = bool(env.get("PYTHONUNBUFFERED"))
        enc = sys.stdout.encoding
        # The standard streams a fresh interpreter would make on these descriptors.
        sys.stdin = io.TextIOWrapper(
            open(0, "rb", closefd=False),  # noqa: SIM115
            encoding=enc,
        )
        sys.stdout = io.TextIOWrapper(
            open(1, "wb", buffering=0 if unbuffered else -1, closefd=False),  # noqa: SIM115
            encoding=enc,
            write_through=unbuffered,
        )
        sys.stderr = io.TextIOWrapper(
            open(2, "wb", buffering=0, closefd=False),  # noqa: SIM115
            encoding=enc,
            errors="backslashreplace",
            line_buffering=True,
        )
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        sys.path[0] = request["cwd"]  # as `python -m` run there puts it
        sys.argv = ["phasegate", *request["argv"]]
        try:
            runpy.run_module("phasegate.client.cli", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:  # as the interpreter: the traceback, then die of SIGINT
            traceback.print_exc()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001 - what the interpreter prints and exits with
            traceback.print_exc()
            code = 1
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1])
