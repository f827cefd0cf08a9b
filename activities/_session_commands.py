"""Find the commands a session will run, once, when it starts (``domain/commands.py``).

The test command comes from, first found: the start option (``--test-command``), the
project (``phasegate.toml``'s ``test_command``, or ``[tool.phasegate] test_command`` in
pyproject.toml), the deployment (``PHASEGATE_TEST_COMMAND``), else what the project's
files show: pytest configuration (``[tool.pytest.ini_options]``, ``pytest.ini``,
``[tool:pytest]`` in setup.cfg, ``[pytest]`` in tox.ini, a root ``conftest.py``), a
package.json ``test`` script (npm, pnpm or yarn by lock file), ``go.mod``,
``Cargo.toml``, a Makefile ``test:`` target. Checkpoint commands come from the spec's
Validation Gate / Checkpoint items. Files are read bounded, inside the target only.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import phasegate.activities._safe_read as safe_read
from phasegate.activities.library import WorkflowDir, load_gate_file, static_phase_dir
from phasegate.domain.commands import (
    MAX_COMMANDS,
    CommandRefused,
    SessionCommand,
    SessionCommands,
    allowed,
    commands_in_item,
    is_pytest,
    split_command,
    uses_commands,
)
from phasegate.domain.errors import DefinitionError
from phasegate.domain.spec import ParsedSpec
from phasegate.domain.tasks.criteria import command_of

__all__ = ["SAMPLE_COMMANDS", "checkpoint_items", "find_commands", "workflow_uses_commands"]

SAMPLE_COMMANDS = SessionCommands(
    test=SessionCommand(
        name="tests_pass",
        argv=["python3", "-m", "pytest", "-q"],
        source="pyproject.toml in the project ([tool.pytest])",
        ok_exits=[0, 5],
    )
)
"""The commands ``phasegate library check`` renders templates with."""

_PROJECT_FILE_LIMIT = 256 * safe_read.KiB
_NPM_DEFAULT = "no test specified"
_ALLOW_HINT = (
    "ask the operator to add it to PHASEGATE_ALLOWED_COMMANDS, or start the session with "
    "--test-command naming an allowed command (MCP start_session: options.test_command)"
)


def find_commands(
    target: str,
    *,
    option: str | None,
    deployment: str | None,
    spec: ParsedSpec | None,
    allowlist: list[list[str]] | None,
) -> SessionCommands:
    """The session's commands, fixed from here on.

    Args:
        target: The project folder (the session's workspace).
        option: ``SessionOptions.test_command``.
        deployment: ``Settings.test_command``.
        spec: The parsed spec (its checkpoint items), if the workflow has one.
        allowlist: The deployment's allowed commands (None: any).

    Returns:
        The test command (None when none is named or found; ``notes`` says so) and the
        spec's checkpoint commands.

    Raises:
        DefinitionError: A named command cannot run without a shell, or is not on
            the deployment's list; ``where`` names who named it.
    """
    notes: list[str] = []
    test = _test_command(Path(target) if target else None, option, deployment, notes)
    checkpoints = _checkpoints(spec, notes) if spec is not None else []
    if spec is not None:
        checkpoints += _task_commands(spec, notes, room=MAX_COMMANDS - 1 - len(checkpoints))
    found = SessionCommands(test=test, checkpoints=checkpoints, notes=notes)
    for command in found.all():
        if not allowed(command.argv, allowlist):
            raise DefinitionError(
                f"`{command.text}` is not on this deployment's list of allowed commands",
                where=command.source,
                hint=_ALLOW_HINT,
            )
    return found


def workflow_uses_commands(wf: WorkflowDir) -> bool:
    """Whether any gate of the workflow runs or lists the session's commands
    (``kind: session_command`` checks, a ``session_commands`` field)."""
    gates = [wf.path / "phases" / "dynamic" / "gate-definition.yaml"]
    gates += [
        static_phase_dir(wf.path, p) / "gate-definition.yaml" for p in wf.metadata.static_phases
    ]
    return any(uses_commands(load_gate_file(g)) for g in gates if g.is_file())


def checkpoint_items(texts: list[str]) -> list[tuple[str, list[str]]]:
    """Each Validation Gate item with the check commands it names (none: a claim)."""
    return [(text, commands_in_item(text)) for text in texts]


def _test_command(
    root: Path | None, option: str | None, deployment: str | None, notes: list[str]
) -> SessionCommand | None:
    named = [("--test-command (MCP: options.test_command)", option)]
    if root is not None and root.is_dir():
        named.append(_project_setting(root))
    named.append(("PHASEGATE_TEST_COMMAND", deployment))
    for source, text in named:
        if text:
            return _command("tests_pass", text, source)
    detected = _detect(root) if root is not None and root.is_dir() else None
    if detected is None:
        _note(
            notes,
            "no test command: none was named (--test-command, phasegate.toml, "
            "PHASEGATE_TEST_COMMAND) and none was found in the project, so tests_passing "
            "is the agent's claim only",
        )
        return None
    argv, source, ok_exits = detected
    return SessionCommand(name="tests_pass", argv=argv, source=source, ok_exits=ok_exits)


def _command(name: str, text: str, source: str, **kw: Any) -> SessionCommand:
    try:
        argv = split_command(text)
    except CommandRefused as exc:
        raise DefinitionError(
            f"the test command {text!r} cannot run: {exc}",
            where=source,
            hint="name one program with its arguments, e.g. python -m pytest -q",
        ) from None
    return SessionCommand(name=name, argv=argv, source=source, **kw)


def _project_setting(root: Path) -> tuple[str, str | None]:
    """``test_command`` from phasegate.toml, else from pyproject.toml's [tool.phasegate]."""
    for name, keys in (("phasegate.toml", ()), ("pyproject.toml", ("tool", "phasegate"))):
        data = _toml(root / name)
        for key in keys:
            inner = data.get(key)
            data = inner if isinstance(inner, dict) else {}
        value = data.get("test_command")
        if value is None:
            continue
        if not isinstance(value, str):
            raise DefinitionError(
                f"test_command is a {type(value).__name__}, not a string",
                where=f"{root / name}: test_command",
                hint='write it as one string: test_command = "python -m pytest -q"',
            )
        return f"{name} in the project (test_command)", value
    return "the project", None


def _detect(root: Path) -> tuple[list[str], str, list[int]] | None:
    """A test command the project's own files show, with where it was seen."""
    python = [".venv/bin/python"] if (root / ".venv" / "bin" / "python").is_file() else ["python3"]
    pytest = [*python, "-m", "pytest", "-q"]
    pyproject = _toml(root / "pyproject.toml")
    tool = pyproject.get("tool") if isinstance(pyproject.get("tool"), dict) else {}
    if isinstance(tool, dict) and "pytest" in tool:
        return pytest, "pyproject.toml in the project ([tool.pytest])", [0, 5]
    for name, marker in (
        ("pytest.ini", ""),
        ("conftest.py", ""),
        ("setup.cfg", "[tool:pytest]"),
        ("tox.ini", "[pytest]"),
    ):
        text = _text(root / name)
        if text is not None and marker in text:
            return pytest, f"{name} in the project", [0, 5]
    if "pytest" in json.dumps(pyproject.get("project", {})) + json.dumps(
        pyproject.get("dependency-groups", {})
    ):
        return pytest, "pyproject.toml in the project (pytest in its dependencies)", [0, 5]
    package = _json(root / "package.json")
    scripts = package.get("scripts") if isinstance(package.get("scripts"), dict) else {}
    script = scripts.get("test") if isinstance(scripts, dict) else None
    if isinstance(script, str) and _NPM_DEFAULT not in script:
        runner = "pnpm" if (root / "pnpm-lock.yaml").exists() else "npm"
        runner = "yarn" if (root / "yarn.lock").exists() else runner
        return [runner, "test"], "package.json in the project (scripts.test)", [0]
    if (root / "go.mod").is_file():
        return ["go", "test", "./..."], "go.mod in the project", [0]
    if (root / "Cargo.toml").is_file():
        return ["cargo", "test"], "Cargo.toml in the project", [0]
    for name in ("GNUmakefile", "makefile", "Makefile"):
        text = _text(root / name)
        if text is not None and re.search(r"^test\s*:", text, re.MULTILINE):
            return ["make", "test"], f"{name} in the project (its test target)", [0]
    return None


def _checkpoints(spec: ParsedSpec, notes: list[str]) -> list[SessionCommand]:
    found: list[SessionCommand] = []
    for index, phase in enumerate(spec.phases):
        label = phase.written_number or str(phase.number)
        where = f"{Path(spec.source).name}:{phase.line} (Checkpoint of phase {label})"
        for command in [c for _, named in checkpoint_items(phase.validation_gate) for c in named]:
            try:
                argv = split_command(command)
            except CommandRefused as exc:
                _note(notes, f"{where}: `{command}` is not run ({exc}); it stays a claim")
                continue
            if len(found) >= MAX_COMMANDS - 1:
                _note(notes, f"{where}: `{command}` is not run: at most {MAX_COMMANDS} commands")
                continue
            slug = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_") or str(index)
            number = sum(1 for c in found if c.spec_phase == index) + 1
            found.append(
                SessionCommand(
                    name=f"checkpoint_{slug}_{number}"[:64],
                    argv=argv,
                    source=where,
                    spec_phase=index,
                    phase_label=label,
                    ok_exits=[0, 5] if is_pytest(argv) else [0],
                )
            )
    return found


def _task_commands(spec: ParsedSpec, notes: list[str], room: int) -> list[SessionCommand]:
    """The commands a task folder's tasks name: acceptance criteria (`cmd` exits 0) and
    pre-analysis steps, each listed with its task (the lead approves them in phase 0)."""
    found: list[SessionCommand] = []
    for index, phase in enumerate(spec.phases):
        for item in phase.tasks:
            task = item.task  # a task folder's task; a tasks.md task has its criteria
            criteria = task.acceptance if task is not None else item.acceptance_criteria
            named: list[tuple[str, str, list[str] | None]] = [
                ("acceptance", text, command_of(text)) for text in criteria
            ]
            for step in task.pre_analysis if task is not None else []:
                if step.command:
                    named.append(("pre_analysis", step.command, _step_argv(step.command)))
            task_id = task.id if task is not None else item.id
            source = (task.source if task is not None else "") or f"{spec.source}:{item.line}"
            for role, text, argv in named:
                where = f"{source} ({task_id} {role.replace('_', '-')})"
                if argv is None:
                    if role == "pre_analysis":
                        _note(
                            notes,
                            f"{where}: `{text[:200]}` cannot run without a shell; "
                            "the step is skipped or fails as its on_error says",
                        )
                    continue
                if len(found) >= room:
                    _note(
                        notes,
                        f"{where}: `{text[:200]}` is not run: at most {MAX_COMMANDS} commands",
                    )
                    continue
                found.append(
                    SessionCommand(
                        name=f"{task_id}_{role}_{len(found) + 1}"[:64],
                        argv=argv,
                        source=where[:300],
                        spec_phase=index,
                        phase_label=phase.written_number or str(phase.number),
                        ok_exits=[0],
                        task=task_id,
                        role=role,
                    )
                )
    return found


def _step_argv(command: str) -> list[str] | None:
    try:
        return split_command(command)
    except CommandRefused:
        return None


def _note(notes: list[str], text: str) -> None:
    """Add a note for phase 0, clipped; past the cap, the last note says how many more."""
    text = text if len(text) <= 590 else text[:589] + "…"
    if len(notes) < MAX_COMMANDS:
        notes.append(text)
    elif len(notes) == MAX_COMMANDS:
        notes.append("more checkpoint lines could not be run; see tasks.md")


def _text(path: Path) -> str | None:
    if not path.is_file():
        return None
    try:
        return safe_read.read_text(path, limit=_PROJECT_FILE_LIMIT, roots=[path.parent.resolve()])
    except DefinitionError:
        return None


def _toml(path: Path) -> dict[str, Any]:
    text = _text(path)
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        if path.name == "phasegate.toml":
            raise DefinitionError(
                f"not valid TOML: {exc}", where=str(path), hint='test_command = "pytest -q"'
            ) from None
        return {}


def _json(path: Path) -> dict[str, Any]:
    text = _text(path)
    try:
        data = json.loads(text) if text is not None else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
