"""Retrieval (RAG) models and the pure rules every retrieval backend shares.

The index itself (chunking, SQLite FTS5) lives in ``activities/rag.py``; this
module holds what a workflow may import: the query and result models, the
token estimate, budget packing and the visibility rule that keeps an agent
from seeing a future phase of its own workflow through retrieval.

No I/O here: no sqlite3, no markdown_it, no filesystem.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field, model_validator

__all__ = [
    "Chunk",
    "ChunkKind",
    "ChunkMeta",
    "ContextSection",
    "RetrievalQuery",
    "RetrievedChunk",
    "context_sections",
    "estimate_tokens",
    "normalize_tags",
    "pack",
    "query_terms",
    "visible",
]

ChunkKind = Literal["phase", "task", "core", "standards"]

_TERM = re.compile(r"[^\W_]+")  # letters and digits: what FTS5's unicode61 keeps; "_" splits
_MAX_TERMS = 32
_STOPWORDS_TEXT = (
    "a an and are as at be by can do does for from how i in is it of on or should the this to "
    "what when where which who why with you your"
)
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def query_terms(text: str) -> list[str]:
    """The search terms of free text, for any lexical backend.

    Runs of letters and digits, lower-cased, deduplicated in order, common
    English stopwords dropped (unless nothing else is left), at most 32.

    Args:
        text: Any user or agent text.

    Returns:
        The terms; empty when the text has no letters or digits.
    """
    terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(text)))
    kept = [t for t in terms if t not in _STOPWORDS] or terms
    return kept[:_MAX_TERMS]


def estimate_tokens(text: str) -> int:
    """A cheap token estimate: about four characters per token, rounded up.

    Args:
        text: Any text.

    Returns:
        ``ceil(len(text) / 4)``; 0 for the empty string.
    """
    return (len(text) + 3) // 4


class Chunk(BaseModel):
    """One heading-delimited section of a markdown file, as the chunker cut it."""

    file: str = Field(description="Path of the source file, as given to the indexer.")
    heading_path: list[str] = Field(
        default_factory=list, description="Headings from the H1 down to this chunk's own heading."
    )
    line: int = Field(default=1, description="1-based line of the chunk's first line.")
    text: str
    tokens: int = 0

    @property
    def heading(self) -> str:
        """The chunk's own heading (last of the path), or "" before the first heading."""
        return self.heading_path[-1] if self.heading_path else ""


class ChunkMeta(BaseModel):
    """Per-file metadata shared by every chunk of that file."""

    file: str
    workflow_type: str | None = Field(
        default=None, description="Owning workflow; None for a user standards directory."
    )
    phase: int | None = Field(
        default=None, description="N for phases/<N>/...; None for core/ and standards."
    )
    kind: ChunkKind = "standards"
    tags: list[str] = Field(default_factory=list, description="Front matter `tags:` plus the kind.")
    sha: str = Field(default="", description="Content hash (sha256 hex) of the source file.")


class RetrievalQuery(BaseModel):
    """Input of the ``retrieve_context`` activity and of ``Retriever.search``."""

    text: str
    workflow_type: str | None = Field(
        default=None, description="The session's workflow; its future phases are hidden."
    )
    max_phase: int | None = Field(
        default=None,
        description=(
            "The session's current phase: chunks of `workflow_type` with a phase above it are "
            "never returned. With no `workflow_type`, it applies to every phased chunk."
        ),
    )
    k: int = Field(default=5, description="At most this many chunks.")
    token_budget: int = Field(default=1200, description="Sum of the chunks' tokens stays within.")
    tags: list[str] = Field(
        default_factory=list, description="If set, a chunk must carry at least one of these."
    )


class RetrievedChunk(BaseModel):
    """One search hit; ``score`` is higher-is-better (the negated BM25 for FTS5)."""

    file: str
    heading_path: list[str] = Field(default_factory=list)
    heading: str = ""
    line: int = 1
    text: str
    tokens: int = 0
    score: float = 0.0
    workflow_type: str | None = None
    phase: int | None = None
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _default_heading(self) -> RetrievedChunk:
        if not self.heading and self.heading_path:
            self.heading = self.heading_path[-1]
        return self


class ContextSection(BaseModel):
    """A retrieved chunk as shown to an agent in a phase view's ``context``."""

    source: str = Field(description='Where it came from: "path:line".')
    title: str = Field(description='The heading path joined with " > ".')
    text: str
    score: float = 0.0
    tokens: int = 0


def visible(meta_workflow_type: str | None, meta_phase: int | None, query: RetrievalQuery) -> bool:
    """Whether a chunk may be shown to the session that asked ``query``.

    The rule: a chunk of the query's own workflow whose phase is above the
    session's current phase is never visible. Chunks without a phase (core
    docs, standards) and chunks of other workflows are. If the query sets
    ``max_phase`` but no ``workflow_type`` the rule fails closed and hides
    every chunk whose phase is above ``max_phase``.

    Every backend applies this rule while searching and the caller re-checks
    it on every result.

    Args:
        meta_workflow_type: The chunk's workflow (None for standards).
        meta_phase: The chunk's phase (None for core docs and standards).
        query: The query, carrying the session's workflow and current phase.

    Returns:
        True if the chunk may be returned.
    """
    if query.max_phase is None or meta_phase is None:
        return True
    if query.workflow_type is not None and meta_workflow_type != query.workflow_type:
        return True
    return meta_phase <= query.max_phase


def normalize_tags(raw: object) -> list[str]:
    """Tags from a front matter ``tags:`` value: a list, or a comma/space separated string.

    Args:
        raw: The value as YAML parsed it (anything).

    Returns:
        Non-empty tag strings, deduplicated in order; [] for anything else.
    """
    if isinstance(raw, str):
        raw = re.split(r"[,\s]+", raw)
    if not isinstance(raw, list):
        return []
    return list(dict.fromkeys(s for t in raw if (s := str(t).strip())))


def pack(chunks: list[RetrievedChunk], token_budget: int, k: int) -> list[RetrievedChunk]:
    """Choose chunks best-first within a token budget.

    Chunks are taken in descending ``score`` (ties keep their order); a chunk
    that does not fit in what is left of the budget is skipped (a smaller one
    further down may still fit); packing stops at ``k`` chunks.

    Args:
        chunks: Candidates, in any order.
        token_budget: Upper bound on the sum of the chosen chunks' ``tokens``.
        k: Upper bound on the number of chunks.

    Returns:
        The chosen chunks, best first.
    """
    chosen: list[RetrievedChunk] = []
    left = token_budget
    if k <= 0:
        return chosen
    for chunk in sorted(chunks, key=lambda c: -c.score):
        if chunk.tokens > left:
            continue
        chosen.append(chunk)
        left -= chunk.tokens
        if len(chosen) >= k:
            break
    return chosen


def context_sections(chunks: list[RetrievedChunk]) -> list[ContextSection]:
    """The chunks as phase-view context sections, in the same order.

    Args:
        chunks: Retrieved (already packed) chunks.

    Returns:
        One ``ContextSection`` per chunk.
    """
    return [
        ContextSection(
            source=f"{c.file}:{c.line}",
            title=" > ".join(c.heading_path),
            text=c.text,
            score=c.score,
            tokens=c.tokens,
        )
        for c in chunks
    ]
