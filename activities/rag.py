"""Retrieval over markdown: a heading chunker, an SQLite FTS5 (BM25) index, the activity.

What is indexed: each library workflow's ``phases/<N>/*.md`` (phase N) and
``core/**/*.md`` (no phase) — never ``phases/dynamic/`` (Jinja templates) —
plus every ``*.md`` under the user's standards directories (no workflow, no
phase). Files are cut into one chunk per heading section (markdown-it token
stream, so a ``#`` inside fenced code is never a heading); a long section is
split at block boundaries.

Indexing is incremental: a file whose mtime and size are unchanged is skipped
without being read, a file whose content hash is unchanged is skipped after
being read, changed files have their chunks replaced, and files no longer
under the given paths lose theirs. The index mirrors exactly the paths of the
last ``index_paths`` call.

``Retriever`` is the seam for another backend (embeddings, a service): it must
honour ``domain.rag.visible``, and callers re-check it on every result.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml
from markdown_it import MarkdownIt
from pydantic import BaseModel
from temporalio import activity

import phasegate.activities._safe_read as safe_read
from phasegate.activities.library import LIBRARY_FILE_LIMIT, list_workflows
from phasegate.domain.errors import DefinitionError
from phasegate.domain.rag import (
    Chunk,
    ChunkMeta,
    RetrievalQuery,
    RetrievedChunk,
    estimate_tokens,
    normalize_tags,
    pack,
    query_terms,
    visible,
)

__all__ = [
    "FtsIndex",
    "IndexReport",
    "RagActivities",
    "Retriever",
    "chunk_markdown",
    "fts_match_query",
    "split_front_matter",
]

MAX_CHUNK_TOKENS = 512
_MD = MarkdownIt("commonmark").disable("inline")  # block structure is all we need
_FRONT_MATTER = re.compile(
    r"\A---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE
)
_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS files(
  path TEXT PRIMARY KEY, sha TEXT NOT NULL, mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL, meta TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks(
  id INTEGER PRIMARY KEY, file TEXT NOT NULL, workflow_type TEXT, phase INTEGER,
  tags TEXT NOT NULL, heading_path TEXT NOT NULL, line INTEGER NOT NULL, tokens INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_file ON chunks(file);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
  headings, text, tokenize='porter unicode61');
"""
# bm25() column weights: (heading path, chunk text). A hit in a heading says more.
_BM25 = "bm25(chunks_fts, 2.0, 1.0)"


class Retriever(Protocol):
    """A retrieval backend. Implementations must never return a chunk that fails
    ``domain.rag.visible`` and must respect ``q.k`` and ``q.token_budget``."""

    def search(self, q: RetrievalQuery) -> list[RetrievedChunk]:
        """The best visible chunks for ``q``, best first."""
        ...


class IndexReport(BaseModel):
    """What one ``index_paths`` run did."""

    indexed_files: int = 0
    skipped_files: int = 0
    removed_files: int = 0
    chunks: int = 0  # chunks written in this run
    seconds: float = 0.0


# --------------------------------------------------------------------------- chunking


def split_front_matter(text: str) -> tuple[dict[str, Any], str, int]:
    """Separate a leading YAML front matter block (``---`` ... ``---``).

    Args:
        text: A markdown document.

    Returns:
        ``(data, body, line_offset)``: the parsed mapping (empty if absent or
        not a mapping), the text after it, and how many lines it took.
    """
    m = _FRONT_MATTER.match(text)
    if not m:
        return {}, text, 0
    try:
        data = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        data = None
    return (data if isinstance(data, dict) else {}), text[m.end() :], m.group(0).count("\n")


def _split_long(lines: list[str], start: int, end: int, blocks: list[int]) -> Iterator[range]:
    """Cut lines[start:end] at top-level block starts into parts of <= MAX_CHUNK_TOKENS."""
    cuts = [b for b in blocks if start < b < end] + [end]
    limit = MAX_CHUNK_TOKENS * 4
    part, size, seg = start, 0, start
    for cut in cuts:
        seg_size = sum(len(line) + 1 for line in lines[seg:cut])
        if size and size + seg_size > limit:
            yield range(part, seg)
            part, size = seg, 0
        size += seg_size
        seg = cut
    yield range(part, end)


def chunk_markdown(text: str, *, file: str) -> list[Chunk]:
    """Cut a markdown document into one chunk per heading section.

    Only top-level headings (ATX or setext, not inside lists, quotes or code)
    start a chunk. Each chunk carries the heading path from the H1 down to its
    own heading and its 1-based first line in ``text`` (front matter counted).
    Text before the first heading is a chunk with an empty path; a section
    with nothing under its heading is dropped (its children carry the heading
    in their path); a section over ``MAX_CHUNK_TOKENS`` is split at block
    boundaries, so fenced code is never cut.

    Args:
        text: The markdown source (YAML front matter allowed).
        file: The path recorded on every chunk.

    Returns:
        The chunks in document order.
    """
    _, body, offset = split_front_matter(text)
    lines = body.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    tokens = _MD.parse("\n".join(lines))
    blocks: list[int] = []  # first line of every top-level block: where a cut may go
    heads: list[tuple[int, int, int, str]] = []  # (line, body line, level, title)
    for i, tok in enumerate(tokens):
        if tok.level == 0 and tok.map is not None and tok.nesting >= 0:
            blocks.append(tok.map[0])
            if tok.type == "heading_open":
                title = re.sub(r"\*\*|`", "", tokens[i + 1].content).strip()
                heads.append((tok.map[0], tok.map[1], int(tok.tag[1:]), title))
    sections: list[tuple[int, int, int, list[str]]] = [
        (0, 0, heads[0][0] if heads else len(lines), [])
    ]  # (first line, body line, end, heading path); the first is text before any heading
    stack: list[tuple[int, str]] = []
    for (start, body_start, level, title), end in zip(
        heads, [h[0] for h in heads[1:]] + [len(lines)]
    ):
        stack = [s for s in stack if s[0] < level] + [(level, title)]
        sections.append((start, body_start, end, [t for _, t in stack]))
    chunks: list[Chunk] = []
    for start, body_start, end, path in sections:
        if not "".join(lines[body_start:end]).strip():
            continue  # nothing under the heading; its children carry it in their path
        for part in _split_long(lines, start, end, blocks):
            part_lines = lines[part.start : part.stop]
            lead = next((j for j, ln in enumerate(part_lines) if ln.strip()), 0)
            body_text = "\n".join(part_lines[lead:]).rstrip()
            if body_text:
                line = part.start + lead + 1 + offset
                chunks.append(
                    Chunk(
                        file=file,
                        heading_path=list(path),
                        line=line,
                        text=body_text,
                        tokens=estimate_tokens(body_text),
                    )
                )
    return chunks


# --------------------------------------------------------------------------- sources


def _library_sources(library_paths: Sequence[str]) -> Iterator[tuple[str, ChunkMeta]]:
    """(path, metadata-without-sha) of every indexable file of the libraries."""
    for wf in list_workflows(list(library_paths)):
        wtype = wf.metadata.workflow_type
        for path in sorted((wf.path / "core").rglob("*.md")):
            yield str(path), ChunkMeta(file=str(path), workflow_type=wtype, kind="core")
        phases = wf.path / "phases"
        for pdir in sorted(phases.iterdir()) if phases.is_dir() else ():
            if not (pdir.is_dir() and pdir.name.isdigit()):
                continue  # phases/dynamic/ holds Jinja templates, not content
            for path in sorted(pdir.glob("*.md")):
                kind = "phase" if path.name == "phase.md" else "task"
                meta = ChunkMeta(
                    file=str(path), workflow_type=wtype, phase=int(pdir.name), kind=kind
                )
                yield str(path), meta


def _standards_sources(dirs: Iterable[str]) -> Iterator[tuple[str, ChunkMeta]]:
    for root in dirs:
        base = Path(root)
        for path in sorted(base.rglob("*.md")) if base.is_dir() else ():
            if any(part.startswith(".") for part in path.relative_to(base).parts):
                continue
            yield str(path), ChunkMeta(file=str(path), kind="standards")


def fts_match_query(text: str) -> str:
    """Turn free text into a safe FTS5 query: an OR of quoted terms.

    The terms come from ``domain.rag.query_terms`` (runs of letters and
    digits), so no FTS operator, quote, column filter or SQL gets through.

    Args:
        text: Any user or agent text.

    Returns:
        The MATCH expression, or "" when ``text`` has no terms.
    """
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in query_terms(text))


# --------------------------------------------------------------------------- index


class FtsIndex:
    """An SQLite FTS5 index of markdown chunks; implements ``Retriever``.

    One connection shared by all threads, serialised by a lock (queries take
    milliseconds); WAL mode so several worker processes can share the file.
    """

    def __init__(self, db_path: str) -> None:
        """Open (or create) the index database and its schema.

        Args:
            db_path: SQLite file (its folder is created), or ":memory:".
        """
        if db_path != ":memory:":
            Path(db_path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            db_path, timeout=30, check_same_thread=False, isolation_level=None
        )
        with self._lock:
            if db_path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version != _SCHEMA_VERSION:  # unknown layout: it is only a cache, rebuild
                for table in ("chunks_fts", "chunks", "files"):
                    self._db.execute(f"DROP TABLE IF EXISTS {table}")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    def index_paths(
        self, library_paths: list[str], standards_dirs: Sequence[str] = ()
    ) -> IndexReport:
        """Bring the index in line with the libraries and standards directories.

        Args:
            library_paths: Library folders (each holding ``<workflow_type>/``).
            standards_dirs: Folders of user standards (any ``*.md`` below).

        Returns:
            Counts of indexed, skipped and removed files and chunks written.
        """
        t0 = time.perf_counter()
        report = IndexReport()
        sources: dict[str, ChunkMeta] = {}
        for path, meta in [*_library_sources(library_paths), *_standards_sources(standards_dirs)]:
            sources.setdefault(path, meta)
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                known = {
                    row[0]: row[1:]
                    for row in db.execute("SELECT path, sha, mtime_ns, size, meta FROM files")
                }
                next_id = db.execute("SELECT COALESCE(MAX(id), 0) FROM chunks").fetchone()[0] + 1
                for path, meta in sources.items():
                    next_id = self._index_file(path, meta, known.get(path), next_id, report)
                for path in known.keys() - sources.keys():
                    self._drop_file(path)
                    db.execute("DELETE FROM files WHERE path = ?", (path,))
                    report.removed_files += 1
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        report.seconds = time.perf_counter() - t0
        return report

    def _index_file(
        self,
        path: str,
        meta: ChunkMeta,
        known: tuple[Any, ...] | None,
        next_id: int,
        report: IndexReport,
    ) -> int:
        """(Re)index one file if it changed; returns the next free chunk id."""
        try:
            st = os.stat(path)
        except OSError:
            return next_id  # vanished since the walk; dropped on the next run
        meta_key = meta.model_dump_json(include={"workflow_type", "phase", "kind"})
        if known and known[1:] == (st.st_mtime_ns, st.st_size, meta_key):
            report.skipped_files += 1
            return next_id
        try:  # bounded: a FIFO or a huge file among the docs is skipped, never read
            raw = safe_read.read_bytes(path, limit=LIBRARY_FILE_LIMIT, what="document")
        except (OSError, DefinitionError) as exc:
            logging.getLogger(__name__).warning("not indexed: %s", exc)
            return next_id
        sha = hashlib.sha256(raw).hexdigest()
        row = (sha, st.st_mtime_ns, st.st_size, meta_key, path)
        if known and known[0] == sha and known[3] == meta_key:
            self._db.execute("UPDATE files SET sha=?, mtime_ns=?, size=?, meta=? WHERE path=?", row)
            report.skipped_files += 1
            return next_id
        text = raw.decode("utf-8", errors="replace")
        front, _, _ = split_front_matter(text)
        tags = list(dict.fromkeys([*normalize_tags(front.get("tags")), meta.kind]))
        chunks = chunk_markdown(text, file=path)
        self._drop_file(path)
        ids = range(next_id, next_id + len(chunks))
        tag_json, wtype, phase = json.dumps(tags), meta.workflow_type, meta.phase
        rows = [
            (i, path, wtype, phase, tag_json, json.dumps(c.heading_path), c.line, c.tokens)
            for i, c in zip(ids, chunks)
        ]
        self._db.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        self._db.executemany(
            "INSERT INTO chunks_fts(rowid, headings, text) VALUES (?, ?, ?)",
            [(i, " / ".join(c.heading_path), c.text) for i, c in zip(ids, chunks)],
        )
        self._db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)", (path, *row[:4]))
        report.indexed_files += 1
        report.chunks += len(chunks)
        return next_id + len(chunks)

    def _drop_file(self, path: str) -> None:
        self._db.execute(
            "DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE file = ?)", (path,)
        )
        self._db.execute("DELETE FROM chunks WHERE file = ?", (path,))

    def search(self, q: RetrievalQuery) -> list[RetrievedChunk]:
        """BM25-ranked chunks for ``q``: visible ones only, packed to ``k`` and the budget.

        Args:
            q: The query; its text is reduced to quoted terms, never FTS syntax.

        Returns:
            At most ``q.k`` chunks whose tokens sum to at most ``q.token_budget``.
        """
        match = fts_match_query(q.text)
        if not match or q.k <= 0 or q.token_budget <= 0:
            return []
        where = ["chunks_fts MATCH ?", "c.tokens <= ?"]
        params: list[Any] = [match, q.token_budget]
        if q.max_phase is not None:  # domain.rag.visible, in SQL
            if q.workflow_type is not None:
                where.append(
                    "(c.phase IS NULL OR c.workflow_type IS NULL OR c.workflow_type != ?"
                    " OR c.phase <= ?)"
                )
                params += [q.workflow_type, q.max_phase]
            else:
                where.append("(c.phase IS NULL OR c.phase <= ?)")
                params.append(q.max_phase)
        if q.tags:
            marks = ", ".join("?" * len(q.tags))
            where.append(f"EXISTS (SELECT 1 FROM json_each(c.tags) WHERE value IN ({marks}))")
            params += q.tags
        # rank and cut first, then build rows only for the survivors
        sql = (
            "SELECT json_object('file', c.file, 'workflow_type', c.workflow_type, 'phase', c.phase,"
            " 'tags', json(c.tags), 'heading_path', json(c.heading_path), 'line', c.line,"
            " 'heading', coalesce(json_extract(c.heading_path, '$[#-1]'), ''),"
            " 'tokens', c.tokens, 'text', t.text, 'score', -r.rank)"
            f" FROM (SELECT chunks_fts.rowid AS id, {_BM25} AS rank"
            " FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid"
            f" WHERE {' AND '.join(where)} ORDER BY rank LIMIT ?) r"
            " JOIN chunks c ON c.id = r.id JOIN chunks_fts t ON t.rowid = r.id ORDER BY r.rank"
        )
        params.append(max(2 * q.k, q.k + 10))  # spares for chunks pack() has to skip
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        hits = [RetrievedChunk.model_validate_json(row[0]) for row in rows]
        hits = [h for h in hits if visible(h.workflow_type, h.phase, q)]  # the rule, re-checked
        return pack(hits, q.token_budget, q.k)


# --------------------------------------------------------------------------- activity


class RagActivities:
    """The ``retrieve_context`` activity over one lazily built ``FtsIndex``."""

    def __init__(
        self, db_path: str, library_paths: list[str], standards_dirs: Sequence[str] = ()
    ) -> None:
        """Remember where the index lives and what it covers; nothing is opened yet.

        Args:
            db_path: SQLite file of the index (e.g. under ``.phasegate/``).
            library_paths: Library folders, as in ``Settings.library_paths``.
            standards_dirs: Folders of user standards documents.
        """
        self._db_path = db_path
        self._library_paths = list(library_paths)
        self._standards_dirs = list(standards_dirs)
        self._index: FtsIndex | None = None
        self._lock = threading.Lock()

    def reindex(self) -> IndexReport:
        """Bring the index up to date now (incremental); opens it if needed.

        Returns:
            What the run did.
        """
        with self._lock:
            if self._index is None:
                self._index = FtsIndex(self._db_path)
            return self._index.index_paths(self._library_paths, self._standards_dirs)

    def _ready(self) -> FtsIndex:
        """The index, built on first use; concurrent first callers wait for that one build."""
        with self._lock:
            if self._index is None:
                index = FtsIndex(self._db_path)
                index.index_paths(self._library_paths, self._standards_dirs)
                self._index = index
            return self._index

    @activity.defn(name="retrieve_context")
    def retrieve_context(self, q: RetrievalQuery) -> list[RetrievedChunk]:
        """Search the index (built incrementally on first use) for ``q``.

        Args:
            q: The query, with the session's workflow and current phase.

        Returns:
            The packed, visible chunks, best first.
        """
        return self._ready().search(q)

    def close(self) -> None:
        """Close the index if it was opened."""
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None
