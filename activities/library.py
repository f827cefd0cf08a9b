"""Reading workflow definitions from library folders (prAxIs OS directory format).

Plain functions used by the session activities, the CLI (``library list``,
``library check``) and tests. Errors are ``domain.errors`` types that name the
file (and field) and say what to do.

Folders load as prAxIs serves them: a phase's tasks are its ``task-N-*.md``
files (``metadata.json`` only describes them), a workflow without
``metadata.json`` takes its phases from ``phases/N/`` folders, and
:func:`workflow_issues` lists every disagreement with the file and what
phasegate does about it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from markdown_it import MarkdownIt
from pydantic import ValidationError

import phasegate.activities._safe_read as safe_read
from phasegate.domain.errors import (
    DefinitionError,
    GateDefinitionError,
    TemplateNotFound,
    WorkflowNotFound,
)
from phasegate.domain.gate_fallback import gate_from_markdown
from phasegate.domain.gates import GateDefinition, load_gate
from phasegate.domain.library import (
    LibraryIssue,
    PhaseMetadata,
    ServedTask,
    TaskMetadata,
    WorkflowMetadata,
    reconcile_tasks,
)

T = TypeVar("T")

LIBRARY_FILE_LIMIT = safe_read.MiB
"""Largest library file read (metadata.json, phase.md, task files, gates, templates)."""

__all__ = [
    "LIBRARY_FILE_LIMIT",
    "WorkflowDir",
    "example_evidence",
    "find_workflow",
    "first_heading",
    "is_workflow_dir",
    "list_workflows",
    "load_gate_file",
    "load_metadata",
    "present",
    "read_text",
    "served_tasks",
    "static_phase_dir",
    "static_phase_tasks",
    "tree_stamp",
    "workflow_issues",
]

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


def _phase_numbers(workflow_dir: Path) -> list[int]:
    pdir = workflow_dir / "phases"
    if not pdir.is_dir():
        return []
    return sorted(int(d.name) for d in pdir.iterdir() if d.is_dir() and d.name.isdigit())


def is_workflow_dir(path: Path) -> bool:
    """A folder with ``metadata.json``, or (prAxIs fallback) numbered ``phases/N/`` folders."""
    return present(path / "metadata.json") or bool(_phase_numbers(path))


def _workflow_dirs(lib: Path) -> list[Path]:
    return sorted(d for d in lib.iterdir() if d.is_dir() and is_workflow_dir(d))


def list_workflows(library_paths: list[str]) -> list[WorkflowDir]:
    """Every loadable workflow in the given libraries (first one wins on a name clash)."""
    seen: dict[str, WorkflowDir] = {}
    for lib in _candidates(library_paths):
        for wdir in _workflow_dirs(lib):
            try:
                wf = WorkflowDir(wdir, load_metadata(wdir))
            except DefinitionError:
                continue
            seen.setdefault(wf.metadata.workflow_type, wf)
    return list(seen.values())


def find_workflow(workflow_type: str, library_paths: list[str]) -> WorkflowDir:
    """Locate ``workflow_type`` (its folder name, as in prAxIs) in the libraries.

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
        if is_workflow_dir(lib / workflow_type):
            return WorkflowDir(lib / workflow_type, load_metadata(lib / workflow_type))
    known = ", ".join(sorted(w.metadata.workflow_type for w in list_workflows(library_paths)))
    raise WorkflowNotFound(
        f"workflow {workflow_type!r} not found in {', '.join(library_paths) or 'no library'}",
        where="workflow_type",
        hint=f"available: {known or 'none'}; add a library folder with PHASEGATE_LIBRARY",
    )


def read_text(path: Path, *, limit: int = LIBRARY_FILE_LIMIT) -> str:
    """Read a definition file through the bounded reader (``activities._safe_read``):
    a regular file of at most ``limit`` bytes, UTF-8.

    Raises:
        TemplateNotFound: The file does not exist.
        DefinitionError: It is a pipe, device, socket or folder, too large, unreadable
            or not UTF-8; names the path.
    """
    try:
        return safe_read.read_text(
            path,
            limit=limit,
            what="library file",
            hint="library files must be regular UTF-8 files of at most "
            f"{safe_read.size_text(limit)}; replace it or split it",
        )
    except FileNotFoundError:
        raise TemplateNotFound(
            "file not found", where=str(path), hint="create it or fix the name in metadata.json"
        ) from None


def present(path: Path) -> bool:
    """Whether anything is at ``path``. A FIFO or folder named ``gate-definition.yaml`` is
    present (and then refused by :func:`read_text`), never silently taken as absent."""
    return os.path.lexists(path)


def load_metadata(workflow_dir: Path) -> WorkflowMetadata:
    """Parse ``metadata.json``. The folder name is the workflow type (as in prAxIs); a
    folder without ``metadata.json`` gets one phase per ``phases/N/`` folder."""
    path = workflow_dir / "metadata.json"
    if not present(path) and _phase_numbers(workflow_dir):
        return _synthesized(workflow_dir)
    return _memo("metadata", path, lambda: _load_metadata(workflow_dir, path))


def _synthesized(workflow_dir: Path) -> WorkflowMetadata:
    phases = [PhaseMetadata(phase_number=n) for n in _phase_numbers(workflow_dir)]
    return WorkflowMetadata(workflow_type=workflow_dir.name, phases=phases)


def _raw_metadata(path: Path) -> dict[str, Any]:
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DefinitionError(
            f"invalid JSON: {exc.msg}", where=f"{path}:{exc.lineno}", hint="fix the JSON syntax"
        ) from None
    if not isinstance(data, dict):
        raise DefinitionError("metadata.json must hold a JSON object", where=str(path))
    return data


def _load_metadata(workflow_dir: Path, path: Path) -> WorkflowMetadata:
    data = _raw_metadata(path)
    data["workflow_type"] = workflow_dir.name
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
    if not present(path):
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


def served_tasks(
    workflow_dir: Path, phase: PhaseMetadata
) -> tuple[list[ServedTask], list[LibraryIssue]]:
    """The phase's tasks as prAxIs serves them (its ``task-N-*.md`` files), with a warning
    for each disagreement with ``metadata.json``."""
    pdir = static_phase_dir(workflow_dir, phase)
    # Anything but a folder: a FIFO task file is then refused when read, not skipped.
    files = [f.name for f in pdir.iterdir() if not f.is_dir()] if pdir.is_dir() else []
    meta = load_metadata(workflow_dir)
    k = next((i for i, p in enumerate(meta.phases) if p.phase_number == phase.phase_number), 0)
    return reconcile_tasks(
        phase.tasks,
        files,
        metadata_where=f"{workflow_dir / 'metadata.json'}: phases[{k}]",
        folder_where=str(pdir),
        label=f"phases/{phase.phase_number}",
    )


def static_phase_tasks(workflow_dir: Path, phase: PhaseMetadata) -> list[tuple[TaskMetadata, Path]]:
    """The served tasks' metadata and files (see :func:`served_tasks`)."""
    pdir = static_phase_dir(workflow_dir, phase)
    return [(s.meta, pdir / s.file) for s in served_tasks(workflow_dir, phase)[0]]


def workflow_issues(workflow_dir: Path) -> list[LibraryIssue]:
    """What phasegate serves differently from ``metadata.json``, and what it cannot serve.

    Raises:
        DefinitionError: ``metadata.json`` cannot be parsed at all.
    """
    meta_file = workflow_dir / "metadata.json"
    issues: list[LibraryIssue] = []
    if not present(meta_file):
        numbers = ", ".join(map(str, _phase_numbers(workflow_dir)))
        issues.append(
            _warn(
                meta_file,
                "absent",
                f"phases taken from the phases/N/ folders ({numbers}), "
                "as prAxIs falls back to generated metadata",
            )
        )
    else:
        written = _raw_metadata(meta_file).get("workflow_type")
        if written not in (None, workflow_dir.name):
            issues.append(
                _warn(
                    f"{meta_file}: workflow_type",
                    f"{written!r} differs from the folder name",
                    f"the workflow is started as {workflow_dir.name!r}, "
                    "the folder name, as in prAxIs",
                )
            )
    meta = load_metadata(workflow_dir)
    if not meta.static_phases and not meta.dynamic_phases:
        issues.append(
            LibraryIssue(
                "error",
                str(meta_file),
                "no phases defined",
                "the workflow cannot be started; list its phases",
            )
        )
    listed = {p.phase_number for p in meta.static_phases}
    for phase in meta.static_phases:
        issues += _phase_issues(workflow_dir, phase)
    for n in _phase_numbers(workflow_dir):
        if n not in listed:
            issues.append(
                _warn(
                    workflow_dir / "phases" / str(n),
                    "not listed in metadata.json phases",
                    "not served (metadata.json decides the phases)",
                )
            )
    return issues


def _phase_issues(workflow_dir: Path, phase: PhaseMetadata) -> list[LibraryIssue]:
    pdir = static_phase_dir(workflow_dir, phase)
    unservable = "the phase cannot be served; add phase.md or task-N-*.md files to its folder"
    if not pdir.is_dir():
        return [
            LibraryIssue(
                "error",
                str(pdir),
                f"phase {phase.phase_number} ({phase.phase_name or 'unnamed'}) has no folder",
                unservable,
            )
        ]
    served, issues = served_tasks(workflow_dir, phase)
    has_md = present(pdir / "phase.md")
    if not has_md and not served:
        return [
            LibraryIssue(
                "error",
                str(pdir / "phase.md"),
                "absent, and the folder has no task-N-*.md files",
                unservable,
            )
        ]
    if not has_md:
        source = "metadata.json and " if present(workflow_dir / "metadata.json") else ""
        issues.append(
            _warn(
                pdir / "phase.md",
                "absent",
                f"the phase is served from an overview built from {source}"
                f"its {len(served)} task file(s)",
            )
        )
    gate = pdir / "gate-definition.yaml"
    if not present(gate):
        if has_md:
            issues.append(_warn(gate, "absent", "requirements parsed from phase.md"))
        else:
            issues.append(
                _warn(
                    gate,
                    "absent, and there is no phase.md to parse requirements from",
                    "the phase has no evidence requirements: any evidence passes, "
                    "as in prAxIs' permissive fallback",
                )
            )
    return issues


def _warn(where: Path | str, problem: str, action: str) -> LibraryIssue:
    return LibraryIssue("warning", str(where), problem, action)


def tree_stamp(root: Path) -> tuple[int, int]:
    """(newest mtime, file count) of a workflow directory: changes when any file does."""
    newest = count = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    count += 1
                    newest = max(newest, entry.stat().st_mtime_ns)
    return newest, count


def first_heading(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


_EXAMPLE_HEADING = re.compile(r"\b(evidence|example)\b", re.IGNORECASE)
_MD = MarkdownIt("commonmark").disable("inline")


@functools.lru_cache(maxsize=1024)
def example_evidence(markdown: str) -> str | None:
    """The first fenced ``json`` block under an "Evidence" / "Example" heading, if any."""
    under_example = in_heading = False
    for token in _MD.parse(markdown):
        if token.type == "heading_open":
            in_heading = True
        elif token.type == "heading_close":
            in_heading = False
        elif token.type == "inline" and in_heading:
            under_example = bool(_EXAMPLE_HEADING.search(token.content))
        elif token.type == "fence" and under_example and token.info.strip().lower() == "json":
            try:
                json.loads(token.content)
            except json.JSONDecodeError:
                continue
            return token.content.strip()
    return None
