"""Reading workflow definitions from library folders (prAxIs OS directory format).

Plain functions used by the session activities, the CLI (``library list``,
``library check``) and tests. Errors are ``domain.errors`` types that name the
file (and field) and say what to do.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from phasegate.domain.errors import (
    DefinitionError,
    GateDefinitionError,
    TemplateNotFound,
    WorkflowNotFound,
)
from phasegate.domain.gate_fallback import gate_from_markdown
from phasegate.domain.gates import GateDefinition, load_gate
from phasegate.domain.library import PhaseMetadata, TaskMetadata, WorkflowMetadata

T = TypeVar("T")

__all__ = [
    "WorkflowDir",
    "find_workflow",
    "list_workflows",
    "load_gate_file",
    "load_metadata",
    "read_text",
    "static_phase_dir",
    "static_phase_tasks",
]

_TASK_FILE = re.compile(r"^task-(\d+)(?:-(.*))?\.md$")
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MEMO: dict[tuple[str, str, int, int], Any] = {}
_MEMO_LOCK = threading.Lock()


def _memo(kind: str, path: Path, load: Callable[[], T]) -> T:
    """``load()`` once per (file, mtime, size): definitions are re-read only when edited."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return load()  # let the loader raise its own, well-worded error
    key = (kind, str(path), st.st_mtime_ns, st.st_size)
    with _MEMO_LOCK:
        if key in _MEMO:
            return _MEMO[key]
    value = load()
    with _MEMO_LOCK:
        if len(_MEMO) > 4096:
            _MEMO.clear()
        _MEMO[key] = value
    return value


@dataclass(frozen=True)
class WorkflowDir:
    """A workflow directory found in a library and its parsed metadata."""

    path: Path
    metadata: WorkflowMetadata


def _candidates(library_paths: list[str]) -> list[Path]:
    return [Path(p) for p in library_paths if Path(p).is_dir()]


def list_workflows(library_paths: list[str]) -> list[WorkflowDir]:
    """Every loadable workflow in the given libraries (first one wins on a name clash)."""
    seen: dict[str, WorkflowDir] = {}
    for lib in _candidates(library_paths):
        for meta_file in sorted(lib.glob("*/metadata.json")):
            try:
                wf = WorkflowDir(meta_file.parent, load_metadata(meta_file.parent))
            except DefinitionError:
                continue
            seen.setdefault(wf.metadata.workflow_type, wf)
    return list(seen.values())


def find_workflow(workflow_type: str, library_paths: list[str]) -> WorkflowDir:
    """Locate ``workflow_type`` in the libraries.

    Raises:
        WorkflowNotFound: listing the workflow types that do exist.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", workflow_type or ""):
        raise WorkflowNotFound(
            f"invalid workflow type {workflow_type!r}",
            where="workflow_type",
            hint="use a directory name such as spec_execution_v1",
        )
    for lib in _candidates(library_paths):
        if (lib / workflow_type / "metadata.json").is_file():
            return WorkflowDir(lib / workflow_type, load_metadata(lib / workflow_type))
    known = ", ".join(sorted(w.metadata.workflow_type for w in list_workflows(library_paths)))
    raise WorkflowNotFound(
        f"workflow {workflow_type!r} not found in {', '.join(library_paths) or 'no library'}",
        where="workflow_type",
        hint=f"available: {known or 'none'}; add a library folder with PHASEGATE_LIBRARY",
    )


def read_text(path: Path) -> str:
    """Read a definition file, raising ``TemplateNotFound`` naming the path."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TemplateNotFound(
            "file not found", where=str(path), hint="create it or fix the name in metadata.json"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DefinitionError(f"cannot read file: {exc}", where=str(path)) from None


def load_metadata(workflow_dir: Path) -> WorkflowMetadata:
    """Parse ``metadata.json`` (a missing ``workflow_type`` defaults to the folder name)."""
    path = workflow_dir / "metadata.json"
    return _memo("metadata", path, lambda: _load_metadata(workflow_dir, path))


def _load_metadata(workflow_dir: Path, path: Path) -> WorkflowMetadata:
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DefinitionError(
            f"invalid JSON: {exc.msg}", where=f"{path}:{exc.lineno}", hint="fix the JSON syntax"
        ) from None
    if not isinstance(data, dict):
        raise DefinitionError("metadata.json must hold a JSON object", where=str(path))
    data.setdefault("workflow_type", workflow_dir.name)
    try:
        return WorkflowMetadata.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise DefinitionError(err["msg"], where=f"{path}: {loc}") from None


def static_phase_dir(workflow_dir: Path, phase: PhaseMetadata) -> Path:
    return workflow_dir / "phases" / str(phase.phase_number)


def load_gate_file(path: Path, *, fallback_markdown: str | None = None) -> GateDefinition:
    """Load ``gate-definition.yaml``; without one, parse requirements from the phase text."""
    if not path.is_file():
        if fallback_markdown is None:
            return GateDefinition(source=f"{path} (absent)")
        return gate_from_markdown(
            fallback_markdown, source=f"{path.parent / 'phase.md'} (fallback)"
        )
    return _memo("gate", path, lambda: _load_gate_yaml(path))


def _load_gate_yaml(path: Path) -> GateDefinition:
    text = read_text(path)
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise GateDefinitionError(f"invalid YAML: {exc}", where=where) from None
    return load_gate(data, source=str(path))


def static_phase_tasks(workflow_dir: Path, phase: PhaseMetadata) -> list[tuple[TaskMetadata, Path]]:
    """The phase's task files: from metadata when listed there, else ``task-<k>-*.md``."""
    pdir = static_phase_dir(workflow_dir, phase)
    if phase.tasks:
        out = []
        for t in sorted(phase.tasks, key=lambda t: t.task_number):
            file = t.file or _find_task_file(pdir, t.task_number)
            out.append((t, pdir / file))
        return out
    found = []
    for f in pdir.glob("task-*.md"):
        m = _TASK_FILE.match(f.name)
        if m:
            name = (m.group(2) or "").replace("-", " ").strip().capitalize()
            found.append((TaskMetadata(task_number=int(m.group(1)), name=name, file=f.name), f))
    return sorted(found, key=lambda tf: tf[0].task_number)


def _find_task_file(pdir: Path, k: int) -> str:
    for f in sorted(pdir.glob(f"task-{k}-*.md")) + sorted(pdir.glob(f"task-{k}.md")):
        return f.name
    return f"task-{k}.md"
