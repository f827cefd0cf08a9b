"""``phasegate start`` checks its inputs here before it starts a workflow.

A typo in the target, the spec or the workflow type used to start a session that
failed on the worker (a traceback in the worker's terminal, a failed execution left
in the list). These checks read the same files the worker will, the same way: the
bounded reader (``activities._safe_read``), the tasks.md parser, the spec
containment (inside TARGET, or a folder of PHASEGATE_SPEC_ROOTS) and the workflow
library. Each error names the argument (``TARGET``, ``--spec``, ``WORKFLOW_TYPE``)
and, for a spec, ``file:line``.

They run on the CLI's machine with its settings. When the worker sees other paths or
another library (a container, a remote worker), ``phasegate start --no-check`` skips
them and the worker's own checks decide, as for every other client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phasegate.domain.errors import PhasegateError

__all__ = ["check_start"]

_SKIP = "`phasegate start --no-check` skips this check when the worker sees other paths"


def _target(target: str) -> None:
    path = Path(target)
    if not path.exists():
        raise PhasegateError(
            "no such folder",
            where=f"TARGET {target}",
            hint="pass the project folder as TARGET (default: the current directory); " + _SKIP,
        )
    if not path.is_dir():
        raise PhasegateError(
            "is a file, not a folder",
            where=f"TARGET {target}",
            hint="pass the project folder (the spec goes in --spec)",
        )


def _spec(spec: str, target: str, extra_roots: list[str]) -> None:
    import phasegate.activities._safe_read as safe_read
    from phasegate.activities.tasks_md import read_spec, spec_roots

    where = f"--spec {spec}"
    hint = "pass the spec's tasks.md, or the folder holding it"
    path = Path(spec)
    if not path.exists():
        raise PhasegateError("no such file or folder", where=where, hint=hint)
    from phasegate.activities.task_folders import is_task_folder, read_source

    folder = path.is_dir() and is_task_folder(path)  # a .workflow/WFS-* task folder
    if path.is_dir() and not folder:
        path = path / "tasks.md"
        if not path.exists():
            raise PhasegateError(
                "the folder holds no tasks.md (nor a .task/ folder of task JSON files)",
                where=where,
                hint=hint + ", or a .workflow/WFS-* task folder",
            )
    roots = spec_roots(target, extra_roots)
    if not safe_read.inside(path, roots):
        real = safe_read.real_path(path)
        really = f" (it resolves to {real})" if real != path else ""
        raise PhasegateError(
            f"the spec is outside TARGET {target}{really}",
            where=where,
            hint="put the spec inside the target folder, or list its folder in "
            "PHASEGATE_SPEC_ROOTS (the worker's setting; set it here too)",
        )
    try:  # the one way a spec is read (as the worker will)
        if folder:
            read_source(path, target=target, extra_roots=extra_roots)
        else:
            read_spec(path, target=target, extra_roots=extra_roots)
    except PhasegateError as exc:
        at = exc.where or str(path)
        raise PhasegateError(exc.message, where=f"--spec {at}", hint=exc.hint) from None


def _workflow(workflow_type: str, library_paths: list[str], options: dict[str, Any]) -> None:
    from phasegate.activities.library import find_workflow

    try:
        wf = find_workflow(workflow_type, library_paths)
    except PhasegateError as exc:
        where = "WORKFLOW_TYPE" if exc.where == "workflow_type" else f"WORKFLOW_TYPE: {exc.where}"
        hint = f"{exc.hint}; `phasegate library list` shows them" if exc.hint else None
        raise PhasegateError(exc.message, where=where, hint=hint) from None
    meta = wf.metadata
    key = meta.dynamic_config.source_path_key if meta.dynamic_config else "spec_path"
    if meta.dynamic_phases and not options.get(key):
        flag = "--spec" if key == "spec_path" else f"--option {key}=PATH"
        raise PhasegateError(
            f"workflow {workflow_type} builds its phases from a spec",
            where=flag,
            hint=f"pass {flag} with the spec's tasks.md or the folder holding it",
        )


def check_start(
    workflow_type: str,
    target: str,
    options: dict[str, Any],
    *,
    library_paths: list[str],
    spec_roots: list[str],
) -> None:
    """Refuse a start the worker would fail, before any workflow exists.

    Args:
        workflow_type: WORKFLOW_TYPE as given.
        target: The absolute TARGET folder.
        options: The session options as given (``spec_path`` absolute, from --spec).
        library_paths: Where this machine finds workflows (PHASEGATE_LIBRARY).
        spec_roots: Extra folders specs may come from (PHASEGATE_SPEC_ROOTS).

    Raises:
        PhasegateError: Naming TARGET, --spec (with ``file:line`` of a parse error) or
            WORKFLOW_TYPE, and what to do.
    """
    _target(target)
    _workflow(workflow_type, library_paths, options)
    command = options.get("test_command")
    if isinstance(command, str):
        from phasegate.domain.commands import CommandRefused, split_command

        try:
            split_command(command)
        except CommandRefused as exc:
            raise PhasegateError(
                str(exc), where="--test-command", hint="e.g. --test-command 'python -m pytest -q'"
            ) from None
    spec = options.get("spec_path")
    if isinstance(spec, str) and spec:
        # The worker takes a relative spec_path (``--option``) against the target.
        _spec(str(Path(target) / Path(spec).expanduser()), target, spec_roots)
