"""The hang guard (tests/hang_guard.py) ends a test process that pytest-timeout cannot:
one whose thread blocks in native code holding the GIL, the way a wedged Rust bridge
does. Each case runs pytest in a child process on a tiny test file, with short limits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# ctypes.PyDLL keeps the GIL for the call: libc's sleep() then blocks every Python
# thread in the process, pytest-timeout's timer among them.
WEDGED = """
import ctypes
import pytest

@pytest.mark.timeout(1)
def test_wedged_holding_the_gil():
    ctypes.PyDLL(None).sleep(60)
"""

CONFTEST = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from hang_guard import pytest_configure, pytest_exception_interact, pytest_runtest_protocol
"""

SHORT = {"PG_TESTS_HANG_GRACE": "2", "PG_TESTS_HANG_IDLE": "3"}


def _run(
    tmp_path: Path, body: str, *args: str, limits: dict[str, str] = SHORT
) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp_path / "test_case.py").write_text(body)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += ["-o", "timeout_method=thread", "--rootdir", str(tmp_path), str(tmp_path), *args]
    started = time.monotonic()
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env={**os.environ, **limits},
        cwd=tmp_path,
        timeout=50,
        check=False,
    )
    return done, time.monotonic() - started


def test_a_test_wedged_holding_the_gil_ends_its_process_with_the_stacks(tmp_path: Path) -> None:
    done, took = _run(tmp_path, WEDGED)
    assert done.returncode != 0
    assert took < 30, f"the wedged test ran {took:.0f} s: the guard did not fire"
    assert "Timeout (0:00:03)!" in done.stderr, done.stderr
    assert "test_wedged_holding_the_gil" in done.stderr, done.stderr


def test_under_xdist_the_wedged_test_fails_and_the_run_finishes(tmp_path: Path) -> None:
    body = WEDGED + "\n\ndef test_after():\n    pass\n"
    done, took = _run(tmp_path, body, "-n", "1")
    assert took < 40, f"the run took {took:.0f} s: the guard did not end the worker"
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert "crashed while running" in done.stdout, done.stdout


def test_an_xdist_run_past_its_session_limit_ends_with_the_controllers_stacks(
    tmp_path: Path,
) -> None:
    """A controller left waiting (a worker that never answers) ends at the session limit."""
    body = "import time, pytest\n\n@pytest.mark.timeout(0)\ndef test_long():\n    time.sleep(60)\n"
    limits = {"PG_TESTS_HANG_SESSION": "4", "PG_TESTS_HANG_IDLE": "120"}
    done, took = _run(tmp_path, body, "-n", "1", limits=limits)
    assert done.returncode != 0
    assert took < 30, f"the run took {took:.0f} s: the controller's limit did not fire"
    assert "Timeout (0:00:04)!" in done.stderr, done.stderr
    assert "dsession.py" in done.stderr, done.stderr


def test_a_test_within_its_limits_is_left_alone(tmp_path: Path) -> None:
    """The guard reads each test's timeout as pytest-timeout resolves it: ``--timeout``
    over the ini value, and a marker's 0 (no limit) is not the idle limit."""
    body = (
        "import time, pytest\n\n"
        "def test_within_the_command_lines_timeout():\n    time.sleep(4)\n\n"
        "@pytest.mark.timeout(0)\ndef test_without_a_timeout():\n    time.sleep(4)\n"
    )
    limits = {"PG_TESTS_HANG_GRACE": "1", "PG_TESTS_HANG_IDLE": "2"}
    done, _ = _run(tmp_path, body, "-o", "timeout=1", "--timeout", "30", limits=limits)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout
