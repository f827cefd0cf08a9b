"""What the CLI and the MCP server both say about a session (pure: models in, text out).

The CLI writes for a person at a terminal (``client/cli/_render.py``: plain lines,
every text an agent wrote kept to one terminal-safe line), the MCP server for an agent
reading markdown (``client/mcp/_render.py``: headings, tables, the tool to call next).
Their wording differs; what a line says is decided here, once: the checkbox of a
task's state, a task's id and a phase's number as written, how a gate problem reads,
who abandoned a session and why, which decisions a status names, who an approval
waits for, the rows of a gate's evidence table.

``esc`` arguments are the caller's treatment of text that agents and people wrote
(the CLI passes ``one_line``; markdown keeps it as it is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from phasegate.domain.evidence_schema import describe_limits

if TYPE_CHECKING:
    from phasegate.domain.gates import Problem
    from phasegate.domain.session.messages import (
        ApprovalRecord,
        GateView,
        SessionView,
        TaskSummary,
    )

__all__ = [
    "RECENT_DECISIONS",
    "abandonment",
    "box",
    "gate_rows",
    "problem_text",
    "recent_decisions",
    "task_id",
    "who_approves",
    "written_label",
]

Escape = Callable[[str], str]

RECENT_DECISIONS = 3
"""Approvals and rejections a status names (the latest)."""

_BOX = {"todo": "[ ]", "done": "[x]", "in_progress": "[-]", "skipped": "[~]"}


def box(status: str) -> str:
    """The checkbox of a task state as tasks.md writes it; ``[?]`` for an unknown one."""
    return _BOX.get(status, "[?]")


def task_id(t: TaskSummary) -> str:
    """The task's id as written (``1.2``, ``T003``), or ``""`` where it is only its number."""
    return t.id if t.id and t.id != str(t.number) else ""


def written_label(phase: int, label: str) -> str:
    """The phase's number as its spec writes it, or ``""`` where it is the session's."""
    return label if label and label != str(phase) else ""


def problem_text(p: Problem) -> str:
    """``field: message (expected …, got …)`` with the empty parts left out."""
    extra = [f"{k} {v}" for k, v in (("expected", p.expected), ("got", p.got)) if v]
    return f"{p.field}: {p.message}" + (f" ({', '.join(extra)})" if extra else "")


def abandonment(view: SessionView, esc: Escape = str) -> str:
    """`` by bob: spec withdrawn``: who abandoned the session and why, as far as its
    audit trail says (``""`` when it says neither)."""
    entry = next((a for a in reversed(view.audit) if a.action == "abandon"), None)
    by = f" by {esc(entry.actor)}" if entry and entry.actor else ""
    why = f": {esc(entry.detail)}" if entry and entry.detail else ""
    return by + why


def recent_decisions(view: SessionView) -> list[tuple[str, ApprovalRecord]]:
    """The latest :data:`RECENT_DECISIONS` decisions, each with its verb (``approved``,
    ``rejected``)."""
    return [
        ("approved" if a.decision == "approve" else "rejected", a)
        for a in view.approvals[-RECENT_DECISIONS:]
    ]


def who_approves(names: Sequence[str], esc: Escape = str) -> str:
    """``alice, bob``, or ``an approver`` where nobody is named."""
    return esc(", ".join(names)) or "an approver"


def gate_rows(gate: GateView) -> list[tuple[str, str, str, str, str]]:
    """One row per evidence field: name, type, required (``yes``/``no``), limits (``-``
    for none) and description."""
    return [
        (
            name,
            f.type,
            "yes" if f.required else "no",
            describe_limits(f.json_schema) or "-",
            f.description,
        )
        for name, f in gate.fields.items()
    ]
