"""``phasegate library check``: load every workflow in a folder as a session would.

Separate from ``activities.library`` (which ``activities.templates`` builds on)
so that neither imports the other.

Every template is rendered with sample data, through the same sandboxed renderer a
session uses: static ``phase.md`` and task files with their phase's context, dynamic
phase and task templates over a sample spec (:func:`_library_samples.sample_spec`).

Errors are what a session cannot serve (unparseable files, a phase with neither
``phase.md`` nor task files, a dynamic workflow phasegate cannot build, a dynamic
template that fails to render). Warnings are where phasegate serves a folder
differently from what it says: ``metadata.json`` keys it does not read (with the key
probably meant), a static file served verbatim because it does not render (with the
variables available), an evidence example that fails its own gate, and prAxIs
disagreements. Each names the file (and line or field), what is wrong, and what
phasegate does or what to do.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phasegate.activities._library_samples import (
    KNOWN_KEYS,
    SAMPLE_TARGET,
    sample_spec,
    suggest_key,
    undefined_hint,
)
from phasegate.activities._phase_render import phase_context, session_context, task_context
from phasegate.activities._session_commands import SAMPLE_COMMANDS, workflow_uses_commands
from phasegate.activities._spec_phases import dynamic_context, dynamic_gate
from phasegate.activities.definitions import render_static_phase
from phasegate.activities.library import (
    WorkflowDir,
    example_evidence,
    is_workflow_dir,
    load_gate_file,
    load_metadata,
    read_text,
    workflow_issues,
)
from phasegate.activities.templates import Renderer
from phasegate.domain.commands import SessionCommands, bind_gate
from phasegate.domain.errors import DefinitionError, TemplateNotFound
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gates import GateDefinition
from phasegate.domain.library import LibraryIssue, WorkflowMetadata
from phasegate.domain.session.messages import DefinitionRef

__all__ = ["CheckReport", "check_library", "check_workflow"]

_SPEC_SOURCE = "spec_tasks_md"
_VERBATIM = "template render failed"


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
    report.add(_unknown_keys(wdir / "metadata.json"))
    wf = WorkflowDir(wdir, meta)
    total = len(meta.static_phases) + (2 if meta.dynamic_phases else 0)
    ref = DefinitionRef(
        workflow_type=meta.workflow_type,
        target=SAMPLE_TARGET,
        total_phases=total,
        static_phase_count=len(meta.static_phases),
        commands=SAMPLE_COMMANDS if workflow_uses_commands(wf) else None,
    )
    session = session_context(ref, 0)
    for index, phase in enumerate(meta.static_phases):
        pdir = wdir / "phases" / str(phase.phase_number)
        if not _servable(pdir):
            continue  # already an error from workflow_issues
        try:
            rendered, issues = render_static_phase(renderer, wf, session, index)
        except DefinitionError as exc:
            report.errors.append(str(exc))
            continue
        ctx = phase_context(session, _static_phase_ctx(meta, index), index)
        report.add([_with_variables(i, ctx) for i in issues])
        gate = bind_gate(rendered.gate, ref.commands, None) if ref.commands else rendered.gate
        report.add(_example_issues(rendered.example_evidence, gate, pdir / "phase.md"))
    if meta.dynamic_phases:
        _check_dynamic(wdir, meta, report, renderer, session, ref.commands)


def _servable(pdir: Path) -> bool:
    return pdir.is_dir() and ((pdir / "phase.md").is_file() or any(pdir.glob("task-[0-9]*.md")))


def _unknown_keys(meta_file: Path) -> list[LibraryIssue]:
    """A warning per metadata.json key phasegate does not read, with the key meant."""
    try:
        data = json.loads(read_text(meta_file))
    except (DefinitionError, ValueError):
        return []  # load_metadata reported it
    found: list[tuple[str, str, str]] = []  # (level, where, key)

    def scan(level: str, obj: Any, where: str) -> None:
        if isinstance(obj, dict):
            found.extend((level, where, k) for k in obj if k not in KNOWN_KEYS[level])

    scan("workflow", data, "")
    for i, phase in enumerate(data.get("phases") or []):
        scan("phase", phase, f"phases[{i}].")
        tasks = phase.get("tasks") if isinstance(phase, dict) else None
        for k, task in enumerate(tasks if isinstance(tasks, list) else []):
            scan("task", task, f"phases[{i}].tasks[{k}].")
    cfg = data.get("dynamic_config")
    scan("dynamic_config", cfg, "dynamic_config.")
    if isinstance(cfg, dict):
        scan("templates", cfg.get("templates"), "dynamic_config.templates.")
    issues = []
    for level, where, key in found:
        meant = suggest_key(level, key)
        guess = f"did you mean {meant!r}? " if meant else ""
        does = (
            f"phasegate reads no such key (task files see it as {{{{ task.{key} }}}})"
            if level == "task"
            else "phasegate ignores it"
        )
        issues.append(
            LibraryIssue(
                "warning",
                f"{meta_file}: {where}{key}",
                "unknown key",
                f"{guess}{does}; docs/authoring.md lists the keys it reads",
            )
        )
    return issues


def _static_phase_ctx(meta: WorkflowMetadata, index: int) -> dict[str, Any]:
    """The names a static phase's context holds (values do not matter for the hint)."""
    phase = meta.static_phases[index]
    return {
        "number": index,
        "label": str(phase.phase_number),
        "name": phase.phase_name,
        "description": phase.purpose,
        "estimated_duration": phase.estimated_effort,
        "tasks": [{**t.model_dump(), "id": str(t.task_number)} for t in phase.tasks[:1]],
        "validation_gate": [],
    }


def _with_variables(issue: LibraryIssue, ctx: dict[str, Any]) -> LibraryIssue:
    """A file served verbatim because a name is undefined: say which names exist."""
    if _VERBATIM not in issue.problem:
        return issue
    is_task = Path(issue.where.rsplit(":", 1)[0]).name.startswith("task-")
    task = {**(ctx["phase"]["tasks"] or [{"id": "1"}])[0], "number": 1}  # as task files get
    hint = undefined_hint(issue.problem, task_context(ctx, task) if is_task else ctx)
    if hint is None:
        return issue
    return LibraryIssue(issue.severity, issue.where, issue.problem, f"{issue.action} ({hint})")


def _example_issues(example: str | None, gate: GateDefinition, where: Path) -> list[LibraryIssue]:
    """A warning when the evidence example a phase shows fails that phase's gate."""
    if not example:
        return []
    try:
        data = json.loads(example)
    except ValueError:
        return []
    if not isinstance(data, dict) or not gate.fields:
        return []
    result = evaluate_gate(gate, data)
    if result.passed:
        return []
    problems = "; ".join(f"{p.field}: {p.message}" for p in result.problems[:3])
    return [
        LibraryIssue(
            "warning",
            str(where),
            f"the evidence example fails its gate ({problems})",
            "agents copy it: fix the example or the gate",
        )
    ]


def _check_dynamic(
    wdir: Path,
    meta: WorkflowMetadata,
    report: CheckReport,
    renderer: Renderer,
    session: dict[str, Any],
    commands: SessionCommands | None = None,
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
    templates = {}
    for key in ("phase", "task"):
        tpl = cfg.templates.get(key)
        if not tpl:
            report.errors.append(f"{meta_file}: dynamic_config.templates.{key} missing")
            continue
        path = wdir / tpl
        if _collect(report, functools.partial(renderer.check, path)):
            templates[key] = path
    base_file = wdir / "phases" / "dynamic" / "gate-definition.yaml"
    base = GateDefinition(source=f"{base_file} (absent)")
    if base_file.is_file() and not _collect(report, lambda: load_gate_file(base_file)):
        return
    base = load_gate_file(base_file)
    if set(templates) != {"phase", "task"}:
        return
    spec = sample_spec(f"{SAMPLE_TARGET}/specs/sample/tasks.md")
    static = len(meta.static_phases)
    for spec_index, sp in enumerate(spec.phases):
        ctx = dynamic_context(session, spec, static + spec_index, spec_index, base, commands)
        content = _render(report, renderer, templates["phase"], ctx)
        for task in ctx["phase"]["tasks"]:
            _render(report, renderer, templates["task"], task_context(ctx, task))
        if content is not None:
            gate = dynamic_gate(
                base,
                sp,
                source=f"{spec.source}:{sp.line}",
                commands=commands,
                spec_index=spec_index,
            )
            issues = _example_issues(example_evidence(content), gate, templates["phase"])
            report.add([i for i in issues if str(i) not in report.warnings])
            if len(report.errors) > 20:
                return


def _render(report: CheckReport, renderer: Renderer, path: Path, ctx: dict[str, Any]) -> str | None:
    """Render a dynamic template with sample data: a failure is an error (a session
    would fail on it), told with the variables available."""
    try:
        return renderer.render(path, ctx)
    except TemplateNotFound as exc:
        report.errors.append(str(exc))
    except DefinitionError as exc:
        hint = undefined_hint(exc.message, ctx) or exc.hint
        error = DefinitionError(exc.message, where=exc.where, hint=f"with sample data; {hint}")
        seen = f"{exc.where}: {exc.message}"
        if not any(e.startswith(seen) for e in report.errors):  # once, for the first sample
            report.errors.append(str(error))
    return None


def _collect(report: CheckReport, fn: Callable[[], object]) -> bool:
    try:
        fn()
    except DefinitionError as exc:
        report.errors.append(str(exc))
        return False
    return True
