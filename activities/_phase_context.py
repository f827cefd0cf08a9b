"""Retrieved context for a rendered phase: the standards and docs that match the phase and
each of its tasks, never from a later phase, and never making the phase too large."""

from __future__ import annotations

from typing import Any

from temporalio import activity

from phasegate.activities.rag import Retriever
from phasegate.domain.rag import RetrievalQuery, context_sections, pack
from phasegate.domain.session.messages import DefinitionRef, PhaseDefinition

__all__ = ["attach_context"]

_TASKS_WITH_CONTEXT = 50  # larger phases get context for the phase, not for each task


def attach_context(
    retriever: Retriever,
    ref: DefinitionRef,
    phase: PhaseDefinition,
    k: int,
    tokens: int,
    max_phase_bytes: int,
) -> PhaseDefinition:
    """``phase`` with retrieved docs attached to it and to each task (k sections within
    ``tokens`` for the phase, half of each for a task). The phase's own docs (already its
    content) are left out. Retrieval trouble leaves the context empty, never fails."""
    own = _phase_number(phase, ref)

    def search(text: str, k: int, budget: int) -> list[dict[str, Any]]:
        query = RetrievalQuery(
            text=text,
            workflow_type=ref.workflow_type,
            max_phase=own,
            k=k + 3,
            token_budget=budget * 2,
        )
        found = [
            c
            for c in retriever.search(query)
            if not (c.workflow_type == ref.workflow_type and c.phase == own)
        ]
        return [s.model_dump() for s in context_sections(pack(found, budget, k))]

    try:
        context = search(f"{phase.name} {_lead(phase.content)}", k, tokens)
        tasks = [
            t.model_copy(
                update={
                    "context": search(f"{t.name} {_lead(t.content)}", max(1, k // 2), tokens // 2)
                }
            )
            for t in (phase.tasks if len(phase.tasks) <= _TASKS_WITH_CONTEXT else [])
        ]
    except Exception as exc:  # noqa: BLE001 - context is an aid, not a gate
        if activity.in_activity():
            activity.logger.warning("context retrieval failed: %s", exc)
        return phase
    # Context is an aid: it never makes a phase too large to serve (the phase itself
    # was checked against max_phase_bytes when it was rendered).
    for update in (
        {"context": context, "tasks": tasks or phase.tasks},
        {"context": context},
    ):
        done = phase.model_copy(update=update)
        if len(done.model_dump_json()) <= max_phase_bytes:
            return done
    return phase


def _phase_number(phase: PhaseDefinition, ref: DefinitionRef) -> int:
    """The phase number the library's docs use: the written number of a static phase;
    for a dynamic phase, the last static phase (all static docs are behind it)."""
    if phase.index < ref.static_phase_count and phase.label.isdigit():
        return int(phase.label)
    return (
        max(ref.static_phase_count - 1, 0) if phase.index >= ref.static_phase_count else phase.index
    )


def _lead(markdown: str, limit: int = 400) -> str:
    """The first prose of a document, for a retrieval query."""
    lines = [
        ln.strip("#>*- ") for ln in markdown.splitlines() if ln.strip() and not ln.startswith("```")
    ]
    return " ".join(lines)[:limit]
