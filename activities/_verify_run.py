"""How a ``verify`` command runs: contained, bounded, and dead when its worker dies.

Used by ``activities/verify.py``. A command runs without a shell, in its own
process group, with:

- the environment ``domain.verify_contain.check_environment`` allows (no
  ``PHASEGATE_*``, ``TEMPORAL_*`` or credentials) and a scratch ``HOME`` and
  ``TMPDIR`` that are removed afterwards (:class:`Scratch`);
- a Python interpreter (``python``, ``python3``, ``pythonX.Y``, the worker's
  own) started so the workspace cannot shadow the module or code it runs
  (:func:`interpreter_argv`);
- a watchdog in the group: a tiny process reading a pipe only the worker holds.
  When the worker dies, even by SIGKILL, the pipe closes and the watchdog kills
  the whole group, grandchildren included. (``PR_SET_PDEATHSIG`` would need a
  ``preexec_fn``, unsafe in a threaded worker, and reaches only the direct
  child.) The group is also killed on timeout, on cancellation and when the
  command exits. A process that leaves the group on purpose (``setsid``) is not
  followed: containing that takes a container or another OS user
  (docs/sealed-verify.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Self

from temporalio import activity

__all__ = [
    "HEARTBEAT_SECONDS",
    "CheckFailed",
    "Scratch",
    "heartbeat",
    "interpreter_argv",
    "run_process",
    "sweep_scratch",
]

HEARTBEAT_SECONDS = 2.0
_CAPTURE_BYTES = 4 * 1024 * 1024  # command output kept for matching: this much head + tail


class CheckFailed(Exception):
    """A check cannot go on; its message becomes the failed result's message."""


def heartbeat(*details: Any) -> None:
    """Heartbeat when running inside a (non-local) activity: the runners also work outside
    one, and a local activity has no heartbeat (its workflow task keeps it alive)."""
    if activity.in_activity() and not activity.info().is_local:
        activity.heartbeat(*details)


# --------------------------------------------------------------------------- interpreters

_PYTHON = re.compile(r"(python|pypy)([0-9]+(\.[0-9]+)*)?")
_FLAGS_WITH_VALUE = "WX"
_FLAGS = set("bBdEhiIOPqRsSuvVx?")

# Runs in the check's interpreter (any Python 3) in place of `-m target` / `-c target`.
# `-m` and `-c` put the working directory first on sys.path, so a workspace pytest.py
# would run instead of pytest: drop that entry before importing anything, find the
# module without the workspace (a module only the workspace has is refused, as if
# not installed), then append the directory last, so the workspace's own modules
# still import unless an installed module has the name. Same effect as `-P` plus the
# import of workspace code `python -m` allows, on interpreters older than 3.11 too.
_BOOT = """\
import sys
if sys.path[:1] == [""]:
    del sys.path[0]
import importlib.util, os, runpy
mode, target = sys.argv.pop(1), sys.argv.pop(1)
if mode == "-m":
    try:
        found = importlib.util.find_spec(target) is not None
    except ImportError:
        found = False
    if not found:
        sys.exit(sys.executable + ": No module named " + target)
sys.path.append(os.getcwd())
if mode == "-m":
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""


def interpreter_argv(argv: list[str]) -> list[str]:
    """``argv`` with a Python ``-m module`` / ``-c code`` run shadow-proof.

    Args:
        argv: The rendered command.

    Returns:
        ``argv`` itself unless ``argv[0]`` names a Python interpreter running a
        module or code string; then the same interpreter and options with the
        ``-m``/``-c`` replaced by a bootstrap that keeps the workspace from
        shadowing installed modules (also behind ``env``). A script (``python
        tools/check.py``) is left alone: a script in the workspace is the
        workspace's code anyway; so are launchers (``uv run``, ``tox``), which
        start their interpreter themselves.
    """
    if len(argv) > 1 and os.path.basename(argv[0]) == "env" and not argv[1].startswith("-"):
        return [argv[0], *interpreter_argv(argv[1:])]  # /usr/bin/env python3 -m ...
    if not argv or _PYTHON.fullmatch(os.path.basename(argv[0])) is None:
        return argv
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--check-hash-based-pycs":
            i += 2
            continue
        if not arg.startswith("-") or arg in ("-", "--") or arg.startswith("--"):
            return argv  # a script, stdin, or a long option we leave to the interpreter
        for j, flag in enumerate(arg[1:], start=1):
            if flag in "mc" or flag in _FLAGS_WITH_VALUE:
                inline = arg[j + 1 :]
                if not inline and i + 1 >= len(argv):
                    return argv  # the interpreter reports the missing value
                value, used = (inline, 1) if inline else (argv[i + 1], 2)
                if flag in "mc":
                    before = [*argv[:i], arg[:j]] if j > 1 else argv[:i]
                    return [*before, "-c", _BOOT, f"-{flag}", value, *argv[i + used :]]
                i += used
                break
            if flag not in _FLAGS:
                return argv  # unknown: the interpreter refuses to start
        else:
            i += 1
    return argv


# --------------------------------------------------------------------------- scratch


_SCRATCH_PREFIX = "phasegate-check-"
_swept = threading.Event()


class Scratch:
    """A per-check directory for ``HOME`` and ``TMPDIR``, removed on exit.

    Named ``phasegate-check-<worker pid>-*``: the first scratch a process makes
    first removes those a killed worker left behind (:func:`sweep_scratch`).
    """

    def __enter__(self) -> Self:
        if not _swept.is_set():
            _swept.set()
            sweep_scratch()
        self.root = Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-"))
        self.home = self.root / "home"
        self.tmp = self.root / "tmp"
        self.home.mkdir()
        self.tmp.mkdir()
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def sweep_scratch() -> list[Path]:
    """Remove scratch directories of workers that are gone (SIGKILL skips ``__exit__``).

    Only this user's directories whose worker pid is not running are removed.

    Returns:
        The directories removed.
    """
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{_SCRATCH_PREFIX}*-*"):
        pid = path.name.removeprefix(_SCRATCH_PREFIX).split("-", 1)[0]
        try:
            info = path.lstat()
        except OSError:
            continue
        if not pid.isdigit() or info.st_uid != os.getuid() or not path.is_dir():
            continue
        if path.is_symlink() or int(pid) == os.getpid() or _running(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------- processes

# Reads stdin until EOF (the worker closed the pipe, or died), then kills its own
# process group, which holds the check and everything it started.
_WATCHDOG = "import os, signal, sys\nsys.stdin.buffer.read()\nos.killpg(0, signal.SIGKILL)\n"


def run_process(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> tuple[str, int, bool]:
    """Run ``argv`` contained; returns (output, exit code, timed out).

    Args:
        argv: Program and arguments (run as given; see :func:`interpreter_argv`).
        cwd: Working directory.
        env: The whole environment (nothing is inherited).
        timeout: Seconds before the group is killed.

    Raises:
        CheckFailed: The command cannot start.
    """
    read_end, write_end = os.pipe()  # not inheritable: only the worker holds write_end
    try:
        watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHDOG],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            process_group=0,
            env={},
        )
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        raise CheckFailed(f"the process watchdog could not start: {exc}") from None
    os.close(read_end)
    try:
        proc = _start(argv, cwd, env, watchdog.pid)
    except BaseException:
        _end_group(watchdog, write_end)
        raise
    assert proc.stdout is not None
    capture = _Capture()
    stop = threading.Event()
    reader = threading.Thread(target=_pump, args=(proc.stdout.fileno(), capture, stop), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while not timed_out:
            try:
                proc.wait(timeout=max(0.0, min(deadline - time.monotonic(), HEARTBEAT_SECONDS)))
                break
            except subprocess.TimeoutExpired:
                timed_out = time.monotonic() >= deadline
                heartbeat({"command": argv[0], "output_bytes": capture.size})
    finally:  # also on cancellation, which Temporal raises into this thread
        with _shielded():
            _end_group(watchdog, write_end)  # stray children must not outlive the check
            proc.kill()  # also when it left the group (setsid): wait() must not hang
            proc.wait()
            reader.join(timeout=2)  # EOF comes at once unless a child escaped the group
            stop.set()
            reader.join(timeout=1)
            proc.stdout.close()
    return capture.text(), proc.returncode, timed_out


def _start(argv: list[str], cwd: Path, env: dict[str, str], group: int) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            process_group=group,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise CheckFailed(f"command not found: {argv[0]}") from None
    except PermissionError:
        raise CheckFailed(f"command not executable: {argv[0]}") from None
    except (OSError, ValueError) as exc:
        raise CheckFailed(f"command could not start: {argv[0]}: {exc}") from None


def _end_group(watchdog: subprocess.Popen[bytes], write_end: int) -> None:
    """Kill the check's group (the watchdog leads it) and reap the watchdog."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(watchdog.pid, signal.SIGKILL)  # the watchdog is unreaped: its group exists
    with contextlib.suppress(OSError):
        os.close(write_end)
    watchdog.wait()


def _shielded() -> contextlib.AbstractContextManager[None]:
    """Delay Temporal's thread cancellation until the clean-up is done."""
    if activity.in_activity():
        return activity.shield_thread_cancel_exception()
    return contextlib.nullcontext()


def _pump(fd: int, capture: _Capture, stop: threading.Event) -> None:
    """Read ``fd`` until EOF, or until ``stop`` is set and a poll finds nothing new."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        if not poller.poll(200):
            if stop.is_set():
                return
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        capture.add(chunk)
        if not chunk or stop.is_set():
            return


class _Capture:
    """Output kept for matching: the first and the last ``_CAPTURE_BYTES`` bytes."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.data += chunk
        if len(self.data) > 2 * _CAPTURE_BYTES:
            del self.data[_CAPTURE_BYTES : len(self.data) - _CAPTURE_BYTES]

    def text(self) -> str:
        data = bytes(self.data)
        if self.size > len(data):
            mark = f"\n… [{self.size - len(data)} bytes omitted] …\n".encode()
            data = data[:_CAPTURE_BYTES] + mark + data[_CAPTURE_BYTES:]
        return data.decode("utf-8", errors="replace")
