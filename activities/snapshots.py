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

from phasegate.activities.tasks_parser import parse_tasks_md
from phasegate.domain.errors import DefinitionError
from phasegate.domain.spec import ParsedSpec

__all__ = ["SnapshotStore", "resolve_spec_path"]


def resolve_spec_path(spec_path: str, target: str = "") -> Path:
    """``spec_path`` as a tasks.md file (a directory means its tasks.md).

    Relative paths are taken against ``target`` when that is a directory.
    """
    path = Path(spec_path).expanduser()
    if not path.is_absolute() and target and Path(target).is_dir():
        path = Path(target) / path
    if path.is_dir():
        path = path / "tasks.md"
    return path


class SnapshotStore:
    """Parsed specs by sha256, on disk under ``<home>/snapshots`` with an in-memory LRU."""

    def __init__(self, home: str, *, memory_items: int = 64) -> None:
        self._dir = Path(home) / "snapshots"
        self._memory: OrderedDict[str, ParsedSpec] = OrderedDict()
        self._limit = memory_items
        self._lock = threading.Lock()

    def take(self, spec_file: Path) -> ParsedSpec:
        """Parse ``spec_file`` now and store the result; returns it (sha256 = id)."""
        try:
            data = spec_file.read_bytes()
        except FileNotFoundError:
            raise DefinitionError(
                "spec not found",
                where=str(spec_file),
                hint="pass options.spec_path as the spec's tasks.md or its directory",
            ) from None
        text = data.decode("utf-8", errors="replace")
        spec = parse_tasks_md(text, source=str(spec_file))
        spec.sha256 = hashlib.sha256(data).hexdigest()
        self._save(spec)
        return spec

    def get(self, snapshot_id: str, source: str | None = None) -> ParsedSpec:
        """The snapshot ``snapshot_id``; rebuilt from ``source`` only if unchanged."""
        with self._lock:
            spec = self._memory.get(snapshot_id)
            if spec is not None:
                self._memory.move_to_end(snapshot_id)
                return spec
        path = self._dir / f"{snapshot_id}.json"
        if path.is_file():
            spec = ParsedSpec.model_validate_json(path.read_bytes())
            self._remember(spec)
            return spec
        if source and Path(source).is_file():
            data = Path(source).read_bytes()
            if hashlib.sha256(data).hexdigest() == snapshot_id:
                return self.take(Path(source))
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
