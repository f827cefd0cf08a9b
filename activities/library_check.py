"""``phasegate library check``: load every workflow in a folder as a session would.

Separate from ``activities.library`` (which ``activities.templates`` builds on)
so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from phasegate.activities.library import (
    load_gate_file,
    load_metadata,
    static_phase_dir,
    static_phase_tasks,
)
from phasegate.activities.templates import Renderer
from phasegate.domain.errors import DefinitionError
from phasegate.domain.gates import GateDefinition

__all__ = ["CheckReport", "check_library"]


@dataclass
class CheckReport:
    """Problems found by :func:`check_library` (errors block loading; warnings do not)."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)


def check_library(library_dir: str) -> CheckReport:
    """Load every workflow under ``library_dir`` the way a session would, collecting problems."""
    report = CheckReport()
    root = Path(library_dir)
    if not root.is_dir():
        report.errors.append(f"{root}: not a directory")
        return report
    metas = sorted(root.glob("*/metadata.json"))
    if not metas:
        report.errors.append(f"{root}: no <workflow_type>/metadata.json found")
    renderer = Renderer()
    for meta_file in metas:
        wdir = meta_file.parent
        try:
            meta = load_metadata(wdir)
        except DefinitionError as exc:
            report.errors.append(str(exc))
            continue
        report.workflows.append(meta.workflow_type)
        if not meta.static_phases and not meta.dynamic_phases:
            report.errors.append(f"{meta_file}: no phases defined")
        for phase in meta.static_phases:
            pdir = static_phase_dir(wdir, phase)
            _collect(report, lambda pdir=pdir: renderer.check(pdir / "phase.md"))
            for _, task_file in static_phase_tasks(wdir, phase):
                _collect(report, lambda f=task_file: renderer.check(f))
            gate_file = pdir / "gate-definition.yaml"
            if not gate_file.is_file():
                report.warnings.append(f"{gate_file}: absent; requirements parsed from phase.md")
            _collect(report, lambda pdir=pdir: _gate_with_text(pdir))
        if meta.dynamic_phases:
            cfg = meta.dynamic_config
            if cfg is None:
                report.errors.append(f"{meta_file}: dynamic_phases without dynamic_config")
                continue
            for key in ("phase", "task"):
                tpl = cfg.templates.get(key)
                if not tpl:
                    report.errors.append(f"{meta_file}: dynamic_config.templates.{key} missing")
                    continue
                _collect(report, lambda t=tpl, wdir=wdir: renderer.check(wdir / t))
            base = wdir / "phases" / "dynamic" / "gate-definition.yaml"
            if base.is_file():
                _collect(report, lambda base=base: load_gate_file(base))
    return report


def _gate_with_text(pdir: Path) -> GateDefinition:
    phase_md = pdir / "phase.md"
    text = phase_md.read_text(encoding="utf-8") if phase_md.is_file() else ""
    return load_gate_file(pdir / "gate-definition.yaml", fallback_markdown=text)


def _collect(report: CheckReport, fn: Callable[[], object]) -> None:
    try:
        fn()
    except DefinitionError as exc:
        report.errors.append(str(exc))
