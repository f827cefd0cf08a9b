"""A watchdog no hang can silence: every test process ends itself, printing every
thread's stack, when a test runs well past its timeout or the process waits too long
between tests or on its way out.

pytest-timeout's own timer is a Python thread: it needs the GIL to fire, so a native
call that blocks while holding the GIL (a Rust bridge waiting on a lock one of its own
threads holds while that thread waits for the GIL) freezes it with everything else, and
the run waits until CI's limit with no word of where. ``faulthandler``'s timer is a C
thread that needs no GIL to print the stacks and end the process: under pytest-xdist,
the controller then reports the test the worker died in as failed, with these stacks
above it, starts a fresh worker, and the run finishes.

Armed for each test at its timeout (as pytest-timeout resolves it; a test without one
at ``SESSION``) plus ``GRACE`` seconds, so pytest-timeout ends an ordinary overrun first; between tests, at
``IDLE`` seconds, which also covers a worker left waiting for work that never comes and
an exit that hangs joining a thread. A pytest-xdist controller, which runs no test
itself, is given ``SESSION`` seconds for the whole run. ``PG_TESTS_HANG_GRACE``,
``PG_TESTS_HANG_IDLE`` and ``PG_TESTS_HANG_SESSION`` set them
(tests/test_hang_guard.py makes them short).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Generator

import pytest

GRACE = float(os.environ.get("PG_TESTS_HANG_GRACE", "60"))
IDLE = float(os.environ.get("PG_TESTS_HANG_IDLE", "420"))
SESSION = float(os.environ.get("PG_TESTS_HANG_SESSION", "2400"))

# Our own descriptor for the real stderr, taken at configure time (conftest files load
# while pytest captures fd 2; a test runs with it captured): the stacks must reach the
# terminal, or CI's log, whatever the test was doing.
_stderr: list[int] = []


def pytest_configure(config: pytest.Config) -> None:
    if not _stderr:
        _stderr.append(os.dup(sys.__stderr__.fileno() if sys.__stderr__ is not None else 2))
    controller = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    if controller:
        _arm(SESSION)


def _arm(seconds: float) -> None:
    if seconds > 0 and _stderr:
        faulthandler.dump_traceback_later(seconds, exit=True, file=_stderr[0])


def _limit(item: pytest.Item) -> float:
    """The test's timeout as pytest-timeout resolves it (marker, ``--timeout``,
    ``PYTEST_TIMEOUT``, ini); 0: none."""
    try:
        from pytest_timeout import _get_item_settings

        return float(_get_item_settings(item).timeout or 0)
    except Exception:  # noqa: BLE001 - pytest-timeout absent or changed: the ini value
        try:
            return float(item.config.getini("timeout") or 0)
        except ValueError:
            return 0.0


def _arm_for(item: pytest.Item) -> None:
    """A test with no timeout (0) still gets the whole run's limit."""
    limit = _limit(item)
    _arm(limit + GRACE if limit > 0 else SESSION)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    _arm_for(item)
    try:
        return (yield)
    finally:
        _arm(IDLE)


@pytest.hookimpl(trylast=True)
def pytest_exception_interact(node: pytest.Item | pytest.Collector) -> None:
    """pytest's faulthandler plugin cancels the timer when a test fails (for pdb): the
    failed test's teardown is still guarded."""
    if isinstance(node, pytest.Item):
        _arm_for(node)
