"""Progress while the CLI waits on a session: no worker polling, verify checks running.

``submit`` (and ``status``) run their call as a task; when it has not answered
after a second, :func:`wait_with_progress` asks Temporal what the session waits on
(``PhasegateClient.waiting``) once a second and prints it, to stderr, so ``--json``
output on stdout stays one clean document. ``watch`` prints the same lines with its
status. On a terminal one line is rewritten in place; elsewhere (CI logs, an agent's
shell) a line is printed when what is waited on changes, and again every
:data:`REPEAT_SECONDS` while it lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from phasegate.client.cli._render import one_line, waiting_lines
from phasegate.domain.errors import PhasegateError, SessionError

if TYPE_CHECKING:
    from phasegate.client.api import PhasegateClient

__all__ = [
    "REPEAT_SECONDS",
    "ProgressPrinter",
    "printer_for",
    "progress_lines",
    "wait_with_progress",
]

T = TypeVar("T")
REPEAT_SECONDS = 10.0
FIRST_CHECK_SECONDS = 1.0
_DIGITS = re.compile(r"\d+")


class ProgressPrinter:
    """Prints progress lines to ``stream``: rewritten in place on a terminal, else a line
    when its wording changes (numbers aside) and every :data:`REPEAT_SECONDS`."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._shown = ""
        self._printed: dict[str, float] = {}

    def show(self, lines: list[str]) -> None:
        lines = [one_line(line) for line in lines]  # they name checks and queues
        if self.tty:
            text = "; ".join(lines)
            if text != self._shown:
                self.stream.write("\r\033[K" + text)
                self.stream.flush()
                self._shown = text
            return
        now = time.monotonic()
        for line in lines:
            shape = _DIGITS.sub("#", line)
            if now - self._printed.get(shape, -REPEAT_SECONDS) >= REPEAT_SECONDS:
                print(line, file=self.stream, flush=True)
                self._printed[shape] = now

    def close(self) -> None:
        """Clear the in-place line (a terminal), so what follows starts clean."""
        if self.tty and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
        self._shown = ""


async def progress_lines(
    pg: PhasegateClient, session_id: str, phase: int | None, waited: float = 0.0
) -> list[str]:
    """What the session waits on, as lines (none when Temporal cannot say); ``waited``:
    how long the caller has been waiting for an answer."""
    try:
        w = await asyncio.wait_for(pg.waiting(session_id), timeout=5)
    except (TimeoutError, PhasegateError):
        return []
    return waiting_lines(w, phase, waited)


async def wait_with_progress(
    pg: PhasegateClient,
    session_id: str,
    work: Awaitable[T],
    *,
    phase: Callable[[], int | None] | int | None = None,
    printer: ProgressPrinter | None = None,
    timeout: float | None = None,
    timeout_hint: str = "",
) -> T:
    """Await ``work``; while it has not answered, print what the session waits on.

    Args:
        pg: The client (for ``waiting``).
        session_id: The session ``work`` talks to.
        work: The call (a submit, a status query ...).
        phase: The phase the call is about, or a function giving it once known (names
            a running verify check).
        printer: Where progress goes; None prints nothing (the timeout still holds).
        timeout: Seconds to wait before giving up (None: until it answers).
        timeout_hint: What to do next, when the timeout is reached.

    Raises:
        SessionError: ``timeout`` passed without an answer (the call is cancelled;
            what the session already accepted stays accepted).
    """
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + timeout if timeout is not None else None
    check_at = start + FIRST_CHECK_SECONDS
    try:
        while True:
            until = check_at if deadline is None else min(check_at, deadline)
            done, _ = await asyncio.wait({task}, timeout=max(0.0, until - loop.time()))
            if done:
                return task.result()
            if deadline is not None and loop.time() >= deadline:
                raise SessionError(
                    f"no answer from session {session_id} within {timeout:g} s",
                    hint=timeout_hint or None,
                )
            if printer is not None:
                which = phase() if callable(phase) else phase
                waited = loop.time() - start
                printer.show(await progress_lines(pg, session_id, which, waited))
            check_at = loop.time() + 1.0
    finally:
        if printer is not None:
            printer.close()
        if not task.done():
            task.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task


def printer_for(enabled: bool, stream: Any = None) -> ProgressPrinter | None:
    """A printer on ``stream`` (stderr) when ``enabled``, else None."""
    return ProgressPrinter(stream) if enabled else None
