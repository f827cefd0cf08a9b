"""Content-addressed snapshots of parsed specs.

A session parses its tasks.md once, at start, and keeps only the sha256 in
its history; the parsed spec is stored here under that id. Later edits of the
file do not change a running session. If a worker on another machine lacks
the snapshot, it re-parses the source and accepts it only when the bytes still
hash to the same id.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import phasegate.activities._safe_read as safe_read
from phasegate.activities.tasks_parser import parse_tasks_md
from phasegate.domain.errors import DefinitionError
from phasegate.domain.spec import ParsedSpec

__all__ = ["SPEC_LIMIT", "SnapshotStore"]

SPEC_LIMIT = safe_read.MiB
"""Largest tasks.md read (a 700-task spec is about 30 KiB)."""
_SNAPSHOT_LIMIT = 64 * safe_read.MiB  # a stored parse of a SPEC_LIMIT spec fits easily


class SnapshotStore:
    """Parsed specs by sha256, on disk under ``<home>/snapshots`` with an in-memory LRU."""

    def __init__(self, home: str, *, memory_items: int = 64, max_spec_bytes: int = SPEC_LIMIT):
        self._dir = Path(home) / "snapshots"
        self._memory: OrderedDict[str, ParsedSpec] = OrderedDict()
        self._limit = memory_items
        self.max_spec_bytes = max_spec_bytes
        self._lock = threading.Lock()

    def take(
        self, spec_file: Path, *, roots: list[Path] | None = None, hint: str | None = None
    ) -> ParsedSpec:
        """Parse ``spec_file`` now and store the result; returns it (sha256 = id).

        Args:
            spec_file: The tasks.md to read: a regular UTF-8 file of at most
                ``max_spec_bytes`` (see ``activities._safe_read``).
            roots: When given, the file opened must lie inside one of these folders.
            hint: What to do when the file is refused.

        Raises:
            DefinitionError: Missing, not a regular file, outside ``roots``, too large
                or not UTF-8.
            SpecParseError: The text holds no phases.
        """
        hint = hint or "pass --spec (MCP: spec_path) with the spec's tasks.md or its folder"
        try:
            data = safe_read.read_bytes(
                spec_file,
                limit=self.max_spec_bytes,
                what="spec",
                roots=roots,
                hint=hint,
                size_hint="split the spec into several specs, each its own session",
            )
        except FileNotFoundError:
            raise DefinitionError("spec not found", where=str(spec_file), hint=hint) from None
        text = safe_read.decode(data, spec_file, what="spec", hint="save tasks.md as UTF-8")
        spec = parse_tasks_md(text, source=str(spec_file))
        spec.sha256 = hashlib.sha256(data).hexdigest()
        self._save(spec)
        return spec

    def get(
        self, snapshot_id: str, source: str | None = None, *, roots: list[Path] | None = None
    ) -> ParsedSpec:
        """The snapshot ``snapshot_id``; rebuilt from ``source`` (read inside ``roots``
        when given) only if its bytes still hash to ``snapshot_id``."""
        with self._lock:
            spec = self._memory.get(snapshot_id)
            if spec is not None:
                self._memory.move_to_end(snapshot_id)
                return spec
        path = self._dir / f"{snapshot_id}.json"
        if path.is_file():
            raw = safe_read.read_bytes(path, limit=_SNAPSHOT_LIMIT, what="spec snapshot")
            spec = ParsedSpec.model_validate_json(raw)
            self._remember(spec)
            return spec
        if source and Path(source).is_file():
            data = safe_read.read_bytes(source, limit=self.max_spec_bytes, what="spec", roots=roots)
            if hashlib.sha256(data).hexdigest() == snapshot_id:
                return self.take(Path(source), roots=roots)
        raise DefinitionError(
            f"spec snapshot {snapshot_id[:12]} is missing and {source or 'the source'} has changed",
            where=str(path),
            hint="share PHASEGATE_HOME between workers, or restore the spec as it was at start",
        )

    def _save(self, spec: ParsedSpec) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        final = self._dir / f"{spec.sha256}.json"
        if not final.exists():
            fd, tmp = tempfile.mkstemp(dir=self._dir, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(spec.model_dump_json().encode())
            os.replace(tmp, final)
        self._remember(spec)

    def _remember(self, spec: ParsedSpec) -> None:
        with self._lock:
            self._memory[spec.sha256] = spec
            self._memory.move_to_end(spec.sha256)
            while len(self._memory) > self._limit:
                self._memory.popitem(last=False)
