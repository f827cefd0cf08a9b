"""``phasegate library check``: load every workflow in a folder as a session would.

Separate from ``activities.library`` (which ``activities.templates`` builds on)
so that neither imports the other.

Errors are what a session cannot serve (unparseable files, a phase with neither
``phase.md`` nor task files, a dynamic workflow phasegate cannot build). Warnings
are where phasegate serves a prAxIs folder differently from what its
``metadata.json`` says: each names the file (and field), what disagrees, and what
phasegate does instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from phasegate.activities.definitions import render_static_phase
from phasegate.activities.library import (
    WorkflowDir,
    is_workflow_dir,
    load_gate_file,
    load_metadata,
    workflow_issues,
)
from phasegate.activities.templates import Renderer
from phasegate.domain.errors import DefinitionError
from phasegate.domain.library import LibraryIssue, WorkflowMetadata

__all__ = ["CheckReport", "check_library", "check_workflow"]

_SPEC_SOURCE = "spec_tasks_md"


@dataclass
class CheckReport:
    """Problems found by :func:`check_library` (errors block loading; warnings do not)."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)

    def add(self, issues: list[LibraryIssue]) -> None:
        for issue in issues:
            (self.errors if issue.severity == "error" else self.warnings).append(str(issue))


def check_library(library_dir: str) -> CheckReport:
    """Load every workflow under ``library_dir`` the way a session would, collecting problems."""
    report = CheckReport()
    root = Path(library_dir)
    if not root.is_dir():
        report.errors.append(f"{root}: not a directory")
        return report
    wdirs = sorted(d for d in root.iterdir() if d.is_dir() and is_workflow_dir(d))
    if not wdirs:
        report.errors.append(f"{root}: no <workflow_type>/metadata.json found")
    renderer = Renderer()
    for wdir in wdirs:
        check_workflow(wdir, report, renderer)
    return report


def check_workflow(wdir: Path, report: CheckReport, renderer: Renderer | None = None) -> None:
    """Add the problems of one workflow folder to ``report``."""
    renderer = renderer or Renderer()
    try:
        report.add(workflow_issues(wdir))
        meta = load_metadata(wdir)
    except DefinitionError as exc:
        report.errors.append(str(exc))
        return
    report.workflows.append(meta.workflow_type)
    wf = WorkflowDir(wdir, meta)
    total = len(meta.static_phases) + (1 if meta.dynamic_phases else 0)
    session = {"workflow_type": meta.workflow_type, "target": "", "total_phases": total}
    for index, phase in enumerate(meta.static_phases):
        pdir = wdir / "phases" / str(phase.phase_number)
        if not _servable(pdir):
            continue  # already an error from workflow_issues
        try:
            report.add(render_static_phase(renderer, wf, session, index)[1])
        except DefinitionError as exc:
            report.errors.append(str(exc))
    if meta.dynamic_phases:
        _check_dynamic(wdir, meta, report, renderer)


def _servable(pdir: Path) -> bool:
    return pdir.is_dir() and ((pdir / "phase.md").is_file() or any(pdir.glob("task-[0-9]*.md")))


def _check_dynamic(
    wdir: Path, meta: WorkflowMetadata, report: CheckReport, renderer: Renderer
) -> None:
    meta_file = wdir / "metadata.json"
    cfg = meta.dynamic_config
    if cfg is None:
        report.errors.append(f"{meta_file}: dynamic_phases without dynamic_config")
        return
    if cfg.source_type != _SPEC_SOURCE:
        report.errors.append(
            f"{meta_file}: dynamic_config.source_type {cfg.source_type!r} is not supported; "
            f"phasegate builds dynamic phases from a spec's tasks.md ({_SPEC_SOURCE!r})"
        )
    for key in ("phase", "task"):
        tpl = cfg.templates.get(key)
        if not tpl:
            report.errors.append(f"{meta_file}: dynamic_config.templates.{key} missing")
            continue
        _collect(report, lambda t=tpl: renderer.check(wdir / t))
    base = wdir / "phases" / "dynamic" / "gate-definition.yaml"
    if base.is_file():
        _collect(report, lambda: load_gate_file(base))


def _collect(report: CheckReport, fn: Callable[[], object]) -> None:
    try:
        fn()
    except DefinitionError as exc:
        report.errors.append(str(exc))
