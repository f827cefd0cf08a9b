"""What the CLI and the MCP server both say about task state, and which session a
project uses by default (pure but for reading ``.workflow/`` markers).

The CLI writes for a person at a terminal (``client/cli/_task_render.py``), the MCP
server for an agent reading markdown (``client/mcp/_render.py``); what a line says is
decided here once: a task's mark (``[ ]``, ``[-]``, ``[x]``, ``[!]``, ``▸`` as
``TODO_LIST.md`` writes them), what it waits for, a criterion's verdict, the order
subtasks are shown in (under their parent), and the project's active session.

``esc`` arguments are the caller's treatment of text agents wrote (the CLI passes
``one_line``; markdown keeps it as it is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from phasegate.domain.errors import SessionError

if TYPE_CHECKING:
    from phasegate.domain.tasks.messages import CriterionResult, TaskLine, TaskResult
    from phasegate.domain.verify import VerifyResult

__all__ = [
    "MARKS",
    "ActiveSession",
    "criterion_mark",
    "criterion_note",
    "grouped",
    "line_state",
    "no_active_session",
    "session_near",
    "unchecked_problems",
]

Escape = Callable[[str], str]

MARKS = {"pending": "[ ]", "active": "[-]", "completed": "[x]", "blocked": "[!]", "container": "▸"}
"""A task's mark by status, as ``TODO_LIST.md`` writes them (``▸``: split into subtasks)."""


def line_state(t: TaskLine, esc: Escape = str) -> str:
    """What a listed task is doing besides its mark: ``(2/3 done)`` for a container,
    ``— active (ann)``, ``— blocked: why``, ``— waits for T001, T002``; ``""`` else."""
    parts = []
    if t.progress:
        parts.append(f"({t.progress} done)")
    if t.status == "active":
        parts.append(f"— active ({esc(t.claimed_by)})" if t.claimed_by else "— active")
    elif t.status == "blocked":
        parts.append(f"— blocked: {esc(t.blocked_reason)}" if t.blocked_reason else "— blocked")
    elif t.waiting_for and t.status == "pending":
        parts.append(f"— waits for {', '.join(t.waiting_for)}")
    if t.optional:
        parts.append("(optional)")
    return " ".join(parts)


def grouped(lines: Sequence[TaskLine]) -> list[tuple[TaskLine, int]]:
    """``lines`` with each subtask right under its parent: ``(line, depth)``, depth 0
    for a top-level task (or a subtask whose parent is not among ``lines``), 1 under it."""
    ids = {t.id for t in lines}
    kids: dict[str, list[TaskLine]] = {}
    for t in lines:
        if t.parent is not None and t.parent in ids:
            kids.setdefault(t.parent, []).append(t)
    out: list[tuple[TaskLine, int]] = []
    for t in lines:
        if t.parent is not None and t.parent in ids:
            continue
        out.append((t, 0))
        out += [(k, 1) for k in kids.get(t.id, [])]
    return out


def criterion_mark(c: CriterionResult) -> str:
    """``✓`` checked and met, ``✗`` checked and not met, ``claim``: nothing checks it."""
    if c.passed is None:
        return "claim"
    return "✓" if c.passed else "✗"


def criterion_note(c: CriterionResult, verify: Sequence[VerifyResult]) -> str:
    """What the check of a criterion found when it failed (its message), else ``""``."""
    if not c.check or c.passed:
        return ""
    found = next((r for r in verify if r.name == c.check), None)
    if found is None:
        return "its check did not run"
    return found.message


def unchecked_problems(result: TaskResult) -> list[str]:
    """Problems of a completion that no criterion line shows (``field: message``)."""
    shown = {c.check for c in result.criteria if c.check}
    return [f"{p.field}: {p.message}" for p in result.problems if p.field not in shown]


# ---------------------------------------------------------------- the active session


@dataclass(frozen=True)
class ActiveSession:
    """The session a project uses by default: its marker's session and folder."""

    session_id: str
    folder: str
    root: Path


def session_near(start: Path) -> ActiveSession:
    """The active session of the nearest project: walking up from ``start`` to the
    first folder holding ``.workflow/``, its newest marker that names a phasegate
    session (``phasegate session use`` writes it).

    Raises:
        SessionError: No ``.workflow/`` folder, no marker in it, or a marker of a
            folder phasegate does not keep (Claude-Code-Workflow's own): the message
            says what to run.
    """
    from phasegate.client.cli.task_markers import find_markers
    from phasegate.domain.tasks.projection import WORKFLOW_DIR

    start = start.resolve()
    for root in (start, *start.parents):
        if not (root / WORKFLOW_DIR).is_dir():
            continue
        live = [m for m in find_markers(root) if m.session_id and m.folder_exists]
        if not live:
            raise no_active_session(root / WORKFLOW_DIR)
        marker = live[0]
        if not marker.written_by_phasegate:
            raise SessionError(
                f"{root / WORKFLOW_DIR / marker.path.name} marks {marker.folder}, a "
                "Claude-Code-Workflow session phasegate does not keep",
                hint=f"import it: `phasegate start workflow_tasks_v1 {root} --spec "
                f"{root / marker.folder}`, then `phasegate session use SESSION --root {root}`",
            )
        assert marker.session_id is not None
        return ActiveSession(marker.session_id, marker.folder, root)
    raise SessionError(
        f"no session named, and no {WORKFLOW_DIR}/ folder in {start} or above it",
        hint="name the session (`phasegate list` shows them), or make one this project's "
        "default: `phasegate session use SESSION` in the project's folder",
    )


def no_active_session(workflow_dir: Path) -> SessionError:
    """The error of a ``.workflow/`` folder with no active-session marker."""
    root = workflow_dir.parent
    return SessionError(
        f"no session named, and {workflow_dir} marks no active session",
        hint=f"name the session, or make one the default: `phasegate session use SESSION "
        f"--root {root}` (`phasegate list` shows the sessions)",
    )
