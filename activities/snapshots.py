"""Content-addressed snapshots of parsed specs.

A session parses its tasks.md (or task folder) once, at start, and keeps only the
sha256 in its history; the parsed spec is stored here under that id. Later edits of
the files do not change a running session. If a worker on another machine lacks
the snapshot, it re-parses the source and accepts it only when the bytes still
hash to the same id.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import phasegate.activities._safe_read as safe_read
from phasegate.activities.task_folders import LAYOUTS, read_source
from phasegate.activities.tasks_md import SPEC_LIMIT
from phasegate.domain.errors import DefinitionError, SpecParseError, TaskFileInvalid
from phasegate.domain.spec import ParsedSpec

__all__ = ["SnapshotStore"]

_SNAPSHOT_LIMIT = 64 * safe_read.MiB  # a stored parse of a SPEC_LIMIT spec fits easily


class SnapshotStore:
    """Parsed specs by sha256, on disk under ``<home>/snapshots`` with an in-memory LRU."""

    def __init__(self, home: str, *, memory_items: int = 64, max_spec_bytes: int = SPEC_LIMIT):
        self._dir = Path(home) / "snapshots"
        self._memory: OrderedDict[str, ParsedSpec] = OrderedDict()
        self._limit = memory_items
        self.max_spec_bytes = max_spec_bytes
        self._lock = threading.Lock()

    def keep(self, spec: ParsedSpec) -> ParsedSpec:
        """Store ``spec`` (as ``activities.task_folders.read_source`` read it) under its sha256;
        returns it."""
        self._save(spec)
        return spec

    def get(
        self,
        snapshot_id: str,
        source: str | None = None,
        *,
        target: str | None = None,
        extra_roots: Sequence[str] = (),
    ) -> ParsedSpec:
        """The snapshot ``snapshot_id``; rebuilt from ``source`` (read as ``read_source``
        reads it, held to ``target`` and ``extra_roots`` when ``target`` is given) only if
        its bytes still hash to ``snapshot_id``."""
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
        if source and Path(source).exists():  # a tasks.md, or a task folder
            for layout in LAYOUTS:  # a task folder's digest covers its layout
                try:
                    spec = read_source(
                        source,
                        target=target,
                        extra_roots=extra_roots,
                        limit=self.max_spec_bytes,
                        layout=layout,
                    )
                except (SpecParseError, TaskFileInvalid):  # the snapshot's bytes parsed
                    break
                if spec.sha256 == snapshot_id:
                    return self.keep(spec)
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
