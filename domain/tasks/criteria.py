"""Acceptance criteria a machine can check, turned into verify checks.

A criterion is prose ("Users can log in"), or names what to check in backticks:

- ``\\`src/app.py\\` contains \\`def login\\``` (or ``'...'``/``"..."``): a
  ``file_contains`` check (the text matched literally);
- ``\\`src/app.py\\` exists``: ``file_exists``;
- ``\\`pytest -q tests/test_login.py\\` exits 0`` (``passes``, ``succeeds``, ``runs
  green``, ``exits N``): a ``command`` check, run only when the session was started
  with that command (its definition named it, phase 0 listed it, the lead's approval
  bound it; ``domain/commands.py``). A command an agent names later stays a claim.

Everything else is a claim: recorded with the completion, checked by nobody.
"""

from __future__ import annotations

import re

from phasegate.domain.commands import CommandRefused, SessionCommands, split_command
from phasegate.domain.tasks.messages import CriterionResult
from phasegate.domain.verify import (
    CommandCheck,
    FileContainsCheck,
    FileExistsCheck,
    VerifyCheck,
    VerifyResult,
)

__all__ = ["Criterion", "command_of", "criteria_checks", "judge", "parse_criterion"]

_TICK = r"`([^`\n]{1,1000})`"
_QUOTED = r"(?:`([^`\n]{1,500})`|'([^'\n]{1,500})'|\"([^\"\n]{1,500})\")"
_CONTAINS = re.compile(
    rf"^\s*(?:file\s+)?{_TICK}\s+(?:contains|includes|has)\s+{_QUOTED}", re.IGNORECASE
)
_EXISTS = re.compile(
    rf"^\s*(?:file\s+)?{_TICK}\s+(?:exists|is present|is created)\b", re.IGNORECASE
)
_COMMAND = re.compile(
    rf"^\s*(?:running\s+|run\s+)?{_TICK}\s+(?:(exits?\s+(?:with\s+)?(?:code\s+)?(\d{{1,3}}))"
    r"|passes|succeeds|runs green|is green|returns 0)\b",
    re.IGNORECASE,
)
_PATHLIKE = re.compile(r"^[\w.@+-][\w./@+-]*$")


class Criterion:
    """A parsed criterion: ``kind`` is ``contains``, ``exists``, ``command`` or ``claim``."""

    __slots__ = ("argv", "exit", "kind", "path", "text")

    def __init__(
        self,
        kind: str,
        text: str,
        *,
        path: str = "",
        argv: list[str] | None = None,
        exit: int = 0,
        needle: str = "",
    ) -> None:
        self.kind, self.path, self.argv, self.exit = kind, path, argv or [], exit
        self.text = needle if kind == "contains" else text


def parse_criterion(text: str) -> Criterion:
    """What ``text`` asks for (see the module); ``claim`` when nothing checkable."""
    found = _CONTAINS.match(text)
    if found and _PATHLIKE.match(found.group(1)):
        needle = next(g for g in found.groups()[1:] if g is not None)
        return Criterion("contains", text, path=found.group(1), needle=needle)
    found = _EXISTS.match(text)
    if found and _PATHLIKE.match(found.group(1)):
        return Criterion("exists", text, path=found.group(1))
    found = _COMMAND.match(text)
    if found:
        try:
            argv = split_command(found.group(1))
        except CommandRefused:
            return Criterion("claim", text)
        code = int(found.group(3)) if found.group(3) else 0
        return Criterion("command", text, argv=argv, exit=code)
    return Criterion("claim", text)


def command_of(text: str) -> list[str] | None:
    """The argv a criterion runs, or None (the session's commands collect these)."""
    parsed = parse_criterion(text)
    return parsed.argv if parsed.kind == "command" else None


def _bound(argv: list[str], commands: SessionCommands | None) -> bool:
    return any(c.argv == argv for c in (commands.all() if commands else []))


def criteria_checks(
    task_id: str, criteria: list[str], commands: SessionCommands | None
) -> tuple[list[VerifyCheck], list[CriterionResult]]:
    """The verify checks a completion of ``task_id`` runs, and one result line per
    criterion (``check`` names its check; a claim, or a command the session was not
    started with, has none and ``passed`` None)."""
    checks: list[VerifyCheck] = []
    lines: list[CriterionResult] = []
    for n, text in enumerate(criteria, start=1):
        c = parse_criterion(text)
        name = f"{task_id}:acceptance_{n}"
        check: VerifyCheck | None = None
        if c.kind == "contains":
            check = FileContainsCheck(
                name=name, kind="file_contains", path=c.path, pattern=re.escape(c.text)
            )
        elif c.kind == "exists":
            check = FileExistsCheck(name=name, kind="file_exists", path=c.path)
        elif c.kind == "command" and _bound(c.argv, commands):
            check = CommandCheck(name=name, kind="command", argv=c.argv, expect_exit=c.exit)
        if check is None:
            lines.append(CriterionResult(criterion=text))
        else:
            checks.append(check)
            lines.append(CriterionResult(criterion=text, check=name))
    return checks, lines


def judge(lines: list[CriterionResult], results: list[VerifyResult]) -> list[CriterionResult]:
    """``lines`` with each checked criterion's verdict from the verify ``results``."""
    by_name = {r.name: r.passed for r in results}
    return [
        line.model_copy(update={"passed": by_name.get(line.check, False)}) if line.check else line
        for line in lines
    ]
