"""Bounds on what a task board carries: continue-as-new input and the ``task_files``
answer stay under the server's blob limit however many tasks a session holds."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phasegate.domain.tasks.board import TaskBoard

__all__ = ["clip_text", "compact", "drop_raw", "elide_oldest", "elided_evidence", "spec_bytes"]


def _size(data: dict[str, Any]) -> int:
    return len(json.dumps(data, separators=(",", ":"), sort_keys=True, default=str).encode())


def elided_evidence(evidence: dict[str, Any]) -> dict[str, Any]:
    """What a task keeps of evidence too big to carry: its digest and size (the evidence
    itself is in the history of the run that took the completion)."""
    raw = json.dumps(evidence, separators=(",", ":"), sort_keys=True, default=str).encode()
    return {"_elided": {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}}


def compact(board: TaskBoard, evidence_budget: int) -> None:
    """Shrink for a carry: check excerpts and step outputs shortened, then completed
    tasks' evidence replaced by its digest, oldest completion first, until the evidence
    left fits ``evidence_budget`` bytes."""
    for task in board.tasks.values():
        task.verify = [v.model_copy(update={"excerpt": v.excerpt[-300:]}) for v in task.verify]
        task.context = [c.model_copy(update={"output": c.output[:1000]}) for c in task.context]
        task.problems = task.problems[:3]
        if task.status == "completed":  # the summary file keeps the whole text
            task.summary = task.summary[:300]
    board.evidence_bytes = elide_oldest(board, evidence_budget)


def elide_oldest(board: TaskBoard, budget: int) -> int:
    """Completed tasks' evidence replaced by its digest, oldest completion first, until
    the evidence left fits ``budget`` bytes. Returns the bytes left."""
    sizes = {
        k: _size(t.evidence)
        for k, t in board.tasks.items()
        if t.evidence and "_elided" not in t.evidence
    }
    left = sum(sizes.values())
    done = sorted(
        (t for t in board.tasks.values() if t.status == "completed" and t.spec.id in sizes),
        key=lambda t: t.completed_at.isoformat() if t.completed_at else "",
    )
    for task in done:
        if left <= budget:
            break
        left -= sizes[task.spec.id]
        task.evidence = elided_evidence(task.evidence)
    return left


def drop_raw(board: TaskBoard) -> None:
    """The task files' own objects dropped (the files keep what phasegate models)."""
    for task in board.tasks.values():
        if task.spec.raw is not None:
            task.spec = task.spec.model_copy(update={"raw": None})


def clip_text(board: TaskBoard) -> None:
    """The very last resort: every task's free text cut short (titles, ids, statuses,
    dependencies and claims are kept whole)."""
    for task in board.tasks.values():
        spec = task.spec
        task.spec = spec.model_copy(
            update={
                "description": spec.description[:200],
                "implementation_approach": [a[:200] for a in spec.implementation_approach[:5]],
                "requirements": [r[:200] for r in spec.requirements[:5]],
                "focus_paths": [f[:200] for f in spec.focus_paths[:10]],
                "acceptance": [a[:300] for a in spec.acceptance],
                "raw": None,
            }
        )
        task.summary, task.blocked_reason = task.summary[:200], task.blocked_reason[:200]
        task.criteria = [
            c.model_copy(update={"criterion": c.criterion[:200]}) for c in task.criteria
        ]
        task.context = []


def spec_bytes(data: object) -> int:
    """Size of a model or plain data as compact JSON."""
    dump = getattr(data, "model_dump", None)
    plain = dump(mode="json") if dump is not None else data
    return len(json.dumps(plain, separators=(",", ":"), default=str).encode())
