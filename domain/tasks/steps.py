"""Pre-analysis steps: which command a step runs, and its ``[name]`` words filled in.

A step's command comes only from the task's definition, was listed in phase 0 when the
session started (``domain/commands.py``: a ``pre_analysis`` command of that task) and
is run by the verify worker like any command check (no shell; the deployment's
allowed commands apply). ``[name]`` words are filled in at start: from an earlier
step's ``output_to``, or a field of the task (``id``, ``title``, ``focus_paths``,
``target_files``, ``requirements``). Only a whole argument is replaced (a list gives
one argument per item): text inside a word is never spliced into, and a value that
starts with ``-`` is refused unless the command has ``--`` before it, so an output or
a task field can never become an option or a second command.
"""

from __future__ import annotations

import re

from phasegate.domain.commands import CommandRefused, SessionCommands, split_command
from phasegate.domain.tasks.model import PreAnalysisStep, TaskSpec

__all__ = ["StepRefused", "bound_argv", "fill", "task_values"]

_WORD = re.compile(r"^\[([A-Za-z_][A-Za-z0-9_]{0,63})\]$")
_INSIDE = re.compile(r"\[[A-Za-z_][A-Za-z0-9_]{0,63}\]")
MAX_VALUE_CHARS = 4000


class StepRefused(ValueError):
    """A step phasegate will not run; the message says why."""


def task_values(task: TaskSpec) -> dict[str, str | list[str]]:
    return {
        "id": task.id,
        "title": task.title,
        "focus_paths": list(task.focus_paths),
        "target_files": list(task.target_files),
        "requirements": list(task.requirements),
    }


def bound_argv(
    task: TaskSpec, step: PreAnalysisStep, commands: SessionCommands | None
) -> list[str]:
    """The step's argv as the session was started with it (before filling in).

    Raises:
        StepRefused: The command needs a shell, or is not one of the session's commands.
    """
    try:
        argv = split_command(step.command)
    except CommandRefused as exc:
        raise StepRefused(f"`{step.command[:200]}` cannot run without a shell: {exc}") from None
    listed = commands.all() if commands else []
    if not any(c.task == task.id and c.role == "pre_analysis" and c.argv == argv for c in listed):
        raise StepRefused(
            f"`{step.command[:200]}` is not among the commands this session was started with"
        )
    return argv


def fill(argv: list[str], values: dict[str, str | list[str]]) -> list[str]:
    """``argv`` with every ``[name]`` word replaced by its value.

    Raises:
        StepRefused: A name has no value, or ``[name]`` is part of a longer word.
    """
    out: list[str] = []
    options_end = False  # after a `--` word a value can no longer be read as an option
    for word in argv:
        if word == "--":
            options_end = True
        whole = _WORD.match(word)
        if whole is None:
            if _INSIDE.search(word):
                raise StepRefused(f"`{word}`: a [name] is filled in only as a whole argument")
            out.append(word)
            continue
        value = values.get(whole.group(1))
        if value is None:
            known = ", ".join(sorted(values)) or "none"
            raise StepRefused(f"[{whole.group(1)}] has no value (known: {known})")
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item.startswith("-") and not options_end:
                raise StepRefused(
                    f"[{whole.group(1)}] would fill in {item[:60]!r}, which the program would "
                    "read as an option; write `--` before the [name] in the command"
                )
            out.append(item[:MAX_VALUE_CHARS])
    return out
