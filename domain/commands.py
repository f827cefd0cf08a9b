"""The commands a session runs to check the work, fixed when it starts.

A gate claims ("tests_passing: true"); a command check proves. A session of a
workflow whose gates hold ``kind: session_command`` checks runs two sorts of
command (``activities/_session_commands.py`` finds them when the session starts):

- the project's **test command**, at every phase whose gate asks for it: from the
  start option (``--test-command``, MCP ``start_session``'s ``options``), a file
  in the project (``phasegate.toml`` or ``[tool.phasegate]`` in pyproject.toml:
  ``test_command = "..."``), the deployment (``PHASEGATE_TEST_COMMAND``), or found
  in the project (pytest, npm/pnpm/yarn test, go test, cargo test, make test);
- a **checkpoint command** for each Validation Gate / Checkpoint item of the spec
  that names a command in backticks (`` - [ ] `npm run lint` passes ``) or starts
  with a test runner (``**Checkpoint**: python -m pytest -q runs green``), run at
  that spec phase.

Who can choose them (ARCHITECTURE.md, "Who can do what"): the starter, the spec
and the project may all be the agent's (levels 1-3). So the commands are fixed at
start (:class:`SessionCommands` travels in the session's definition reference,
never re-read), listed in phase 0's view and, through a phase-0 gate field named
``session_commands`` whose only accepted value is that list, inside the evidence
the lead's signed approval of phase 0 binds (holds at level 3 while the lead's
key is out of reach). A deployment may allow only listed commands
(``PHASEGATE_ALLOWED_COMMANDS``): a session naming another is refused at start,
and the verify activity refuses to run one (:func:`allowed`). Nothing here runs
anything: the text is split like a shell would split words, but no shell ever
sees it, and text that needs one (pipes, ``&&``, ``$VAR``) is refused.
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from phasegate.domain.gates import GateDefinition
from phasegate.domain.verify import CommandCheck, SessionCommandCheck, VerifyCheck

__all__ = [
    "MAX_ARGS",
    "MAX_COMMANDS",
    "SESSION_COMMANDS_FIELD",
    "CommandRefused",
    "SessionCommand",
    "SessionCommands",
    "allowed",
    "bind_gate",
    "commands_in_item",
    "failure_summary",
    "is_pytest",
    "parse_allowlist",
    "resolve_checks",
    "split_command",
    "uses_commands",
]

MAX_COMMANDS = 32
"""Most commands one session runs (the test command plus checkpoint commands)."""
MAX_ARGS = 64
_MAX_ARG_CHARS = 1000
_MAX_TEXT = 4000
TEST_TIMEOUT_SECONDS = 900.0

Arg = Annotated[str, StringConstraints(min_length=1, max_length=_MAX_ARG_CHARS)]
Argv = Annotated[list[Arg], Field(min_length=1, max_length=MAX_ARGS)]


class CommandRefused(ValueError):
    """Command text phasegate will not run; the message says why and what to write."""


class SessionCommand(BaseModel):
    """One command a session runs, and where it came from."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64, description="The check's name in results.")
    argv: Argv
    source: str = Field(max_length=300, description="Where it was named: tasks.md:42, ...")
    spec_phase: int | None = Field(
        None, description="Checkpoint commands: the spec phase (0-based position) it checks."
    )
    phase_label: str = Field("", max_length=64, description="That phase as tasks.md numbers it.")
    ok_exits: list[int] = Field(default_factory=lambda: [0], min_length=1, max_length=8)
    task: str | None = Field(
        None,
        max_length=64,
        description="A task's command: an acceptance criterion's (run when the task is "
        "completed) or a pre-analysis step's (run when it starts; ``[name]`` words are "
        "filled in then, each one whole argument).",
    )
    role: Literal["checkpoint", "acceptance", "pre_analysis"] = "checkpoint"

    @property
    def text(self) -> str:
        """The command as a person reads it (quoted like a shell would)."""
        return shlex.join(self.argv)

    def shown(self) -> str:
        """One line of phase 0's list: what runs, when, and who named it."""
        when = (
            f"{self.role.replace('_', '-')} of task {self.task}"
            if self.task is not None
            else "tests, at every phase that claims them"
            if self.spec_phase is None
            else f"checkpoint of spec phase {self.phase_label}"
        )
        return f"{self.text}  ({when}; from {self.source})"


class SessionCommands(BaseModel):
    """Every command a session will run, fixed at start."""

    model_config = ConfigDict(extra="forbid")

    test: SessionCommand | None = None
    notes: list[Annotated[str, StringConstraints(max_length=600)]] = Field(
        default_factory=list,
        max_length=MAX_COMMANDS + 1,
        description="What phase 0 should say besides: no test command found, a checkpoint "
        "line that names a command phasegate cannot run (it stays a claim).",
    )
    checkpoints: list[SessionCommand] = Field(default_factory=list, max_length=MAX_COMMANDS)

    def all(self) -> list[SessionCommand]:
        """The test command first, then the checkpoint commands in spec order."""
        return ([self.test] if self.test else []) + list(self.checkpoints)

    def listing(self) -> list[str]:
        """What phase 0 shows, and the only value its ``session_commands`` field takes."""
        return [c.shown() for c in self.all()]


def split_command(text: str) -> list[str]:
    """Words of a command as a POSIX shell would split them, for a run without a shell.

    Args:
        text: E.g. ``python -m pytest -q "tests/unit"``.

    Returns:
        The argv.

    Raises:
        CommandRefused: Empty, too long, unbalanced quotes, a template (``{{``), a
            variable assignment, or shell syntax (``|``, ``&&``, ``;``, ``>``, ``$``,
            backquotes) that only a shell would understand.
    """
    if not text.strip():
        raise CommandRefused("the command is empty")
    if len(text) > _MAX_TEXT:
        raise CommandRefused(f"the command is {len(text)} characters; at most {_MAX_TEXT}")
    if re.search(r"[\x00\r\n]", text):
        raise CommandRefused("the command holds a line break or NUL; write one command a line")
    if re.search(r"\{[{%#]", text):
        raise CommandRefused("the command holds a template ({{ ... }}); write the command itself")
    try:
        argv = shlex.split(text)
        # Operators outside quotes (`a;b`, `a|b`) are tokens of their own here.
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        operators = [t for t in lexer if t and set(t) <= set("();<>|&")]
    except ValueError as exc:
        raise CommandRefused(f"the command cannot be split into words: {exc}") from None
    for word in operators + argv:
        if word in _SHELL_WORDS or re.match(r"^\d?[<>]", word) or "$" in word or "`" in word:
            raise CommandRefused(
                f"{word!r} needs a shell, and phasegate runs commands without one; name one "
                "command (e.g. `make check` that runs the others)"
            )
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
        raise CommandRefused(
            f"{argv[0]!r} sets a variable, which needs a shell; name the command alone"
        )
    if len(argv) > MAX_ARGS:
        raise CommandRefused(f"the command has {len(argv)} words; at most {MAX_ARGS}")
    if any(len(word) > _MAX_ARG_CHARS for word in argv):
        raise CommandRefused(f"a word of the command is over {_MAX_ARG_CHARS} characters")
    return argv


_SHELL_WORDS = frozenset({"|", "||", "&&", "&", ";", ";;", "(", ")", "!"})

# Programs that run checks: a checkpoint line starting with one names a command even
# without backquotes ("python -m pytest -q runs green").
_RUNNERS = (
    r"python[0-9.]*|pytest|uv|tox|nox|npm|pnpm|yarn|npx|bun|deno|go|cargo|make|just|mvn"
    r"|gradle|\./gradlew|dotnet|bundle|rake|rspec|mix|ruff|mypy|pyright|flake8|pylint|black"
    r"|eslint|prettier|tsc|vitest|jest|phpunit|ctest"
)
# Words (just after the program) that make a command an action, not a check.
_ACTIONS = frozenset(
    [
        "install",
        "i",
        "add",
        "remove",
        "rm",
        "uninstall",
        "publish",
        "push",
        "deploy",
        "release",
        "upgrade",
        "update",
        "init",
        "commit",
        "clean",
        "login",
        "link",
        "unlink",
        "pip",
        "venv",
        "migrate",
    ]
)
_LEADING = re.compile(
    rf"^(?P<cmd>(?:{_RUNNERS})(?:\s+[^\s`]+)*?)\s+(?:runs?|pass(?:es)?|succeeds?|is|are|"
    r"exits?|returns?|should|must|reports?|shows?|gives?|green|clean|ok|works?)\b",
    re.IGNORECASE,
)
_CODE = re.compile(r"`([^`\n]+)`")


def commands_in_item(text: str) -> list[str]:
    """The check commands a Validation Gate / Checkpoint item names.

    A code span that starts with a checking program (a test runner, linter, type
    checker or build tool: :data:`_RUNNERS`), or an item that starts with one and
    says it passes ("python -m pytest -q runs green"). Code spans that name a gate
    field (`` `coverage_percent` ``) or an action (`` `git commit -m ...` ``,
    `` `npm install` ``: :data:`_ACTIONS`) are not checks; such an item stays a claim.

    Args:
        text: The item's text, checkbox removed.

    Returns:
        The commands as written, in order (empty: the item is a claim).
    """
    found = [span.strip() for span in _CODE.findall(text) if _is_check(span)]
    if not found and (lead := _LEADING.match(text.strip().strip("*_").strip())):
        found = [lead["cmd"]] if _is_check(lead["cmd"]) else []
    return found


def _is_check(command: str) -> bool:
    words = command.split()
    if not words or re.fullmatch(_RUNNERS, words[0], re.IGNORECASE) is None:
        return False
    return not any(w.lower() in _ACTIONS for w in words[1:])


def is_pytest(argv: list[str]) -> bool:
    """Whether ``argv`` runs pytest (whose exit code 5, "no tests ran", is not a failure)."""
    program = argv[0].rsplit("/", 1)[-1]
    return program == "pytest" or (
        re.fullmatch(r"python[0-9.]*", program) is not None and argv[1:3] == ["-m", "pytest"]
    )


def parse_allowlist(entries: list[str | list[str]]) -> list[list[str]]:
    """A deployment's allowed commands as argv prefixes.

    Args:
        entries: Each a command string (``"python -m pytest -q"``) or an argv list;
            a last word ``...`` allows any further arguments.

    Returns:
        One argv per entry.

    Raises:
        CommandRefused: An entry that is not a runnable command (see :func:`split_command`).
    """
    out = []
    for entry in entries:
        argv = split_command(entry) if isinstance(entry, str) else [str(w) for w in entry]
        if not argv or argv == ["..."]:
            raise CommandRefused("an allowed command needs at least the program")
        out.append(argv)
    return out


def allowed(argv: list[str], allowlist: list[list[str]] | None) -> bool:
    """Whether ``argv`` may run: no list allows everything; else it equals an entry,
    or starts with an entry's words before its final ``...``."""
    if allowlist is None:
        return True
    for entry in allowlist:
        if entry[-1:] == ["..."]:
            if argv[: len(entry) - 1] == entry[:-1]:
                return True
        elif argv == entry:
            return True
    return False


def resolve_checks(
    checks: list[VerifyCheck], commands: SessionCommands | None, spec_phase: int | None
) -> list[VerifyCheck]:
    """A gate's checks with each ``session_command`` check replaced by the session's
    commands: ``test`` by the test command (nothing when the session has none),
    ``checkpoints`` by the commands of spec phase ``spec_phase``."""
    if not any(isinstance(c, SessionCommandCheck) for c in checks):
        return checks
    out: list[VerifyCheck] = []
    for check in checks:
        if not isinstance(check, SessionCommandCheck):
            out.append(check)
            continue
        found = commands or SessionCommands()
        chosen = (
            [found.test]
            if check.command == "test" and found.test
            else [c for c in found.checkpoints if c.spec_phase == spec_phase and c.task is None]
            if check.command == "checkpoints" and spec_phase is not None
            else []
        )
        for command in chosen:
            name = check.name if command is found.test else command.name
            out.append(_command_check(command, name, check.timeout_seconds))
    return out


def _command_check(command: SessionCommand, name: str, timeout: float | None) -> CommandCheck:
    return CommandCheck(
        name=name,
        kind="command",
        argv=list(command.argv),
        timeout_seconds=timeout or TEST_TIMEOUT_SECONDS,
        expect_exit=command.ok_exits[0] if len(command.ok_exits) == 1 else list(command.ok_exits),
    )


# --------------------------------------------------------------------------- output

# Lines test runners write when tests fail, and their closing tallies.
_SUMMARY = re.compile(
    r"^(?:FAILED |ERROR |E {3}|--- FAIL|FAIL\s|FAIL:|ERROR:|not ok |✗|×|●|"
    r"=+ .*\b(?:failed|passed|errors?|no tests ran)\b.* =+$|"
    r"\d+ (?:failed|passed|errors?)\b.*|Tests?:\s+.*|test result: .*|.*\bpanicked at\b.*|"
    r"(?:npm|make)(?: ERR!|: \*\*\*).*|ok\s+\S+\s+[\d.]+s$)",
)
_TALLY = re.compile(r"\b(?:failed|passed|errors?|no tests ran|test result|Tests?:)\b")


def failure_summary(output: str, limit: int = 600) -> str:
    """The lines of a test run's output that say what failed, and its tally.

    Args:
        output: The command's combined output.
        limit: Characters to return at most.

    Returns:
        Failing tests first (``FAILED tests/test_x.py::test_y - ...``), then the final
        tally (``3 failed, 3 passed in 0.12s``), joined with ``; ``; the last non-empty
        line when nothing is recognised; "" for no output.
    """
    lines = [ln.strip() for ln in output.splitlines()[-400:] if ln.strip()]
    picked = [ln for ln in lines if _SUMMARY.match(ln)]
    failing = [ln for ln in picked if not _TALLY.search(ln) or ln.startswith("FAIL")]
    named = [ln for ln in failing if not ln.startswith("E ")]  # pytest's FAILED/ERROR lines
    failing = (named or failing)[:5]
    tally = [ln.strip("= ") for ln in picked if _TALLY.search(ln)][-1:]
    found = list(dict.fromkeys([*failing, *tally])) or lines[-1:]
    text = "; ".join(found)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- gates

SESSION_COMMANDS_FIELD = "session_commands"
"""A gate field of this name takes exactly the session's command listing: phase 0 asks
for it, so the evidence the lead's signed approval binds names every command."""


def bind_gate(
    gate: GateDefinition, commands: SessionCommands | None, spec_phase: int | None
) -> GateDefinition:
    """``gate`` for one session: its ``session_command`` checks resolved
    (:func:`resolve_checks`) and a ``session_commands`` field, if declared, accepting
    only this session's listing (:meth:`SessionCommands.listing`)."""
    update: dict[str, object] = {}
    verify = resolve_checks(list(gate.verify), commands, spec_phase)
    if verify != gate.verify:
        update["verify"] = verify
    spec = gate.fields.get(SESSION_COMMANDS_FIELD)
    if spec is not None:
        listing = (commands or SessionCommands()).listing()
        shown = "; ".join(listing) if listing else "none: this session runs no command"
        field = spec.model_copy(
            update={
                "type": "list",
                "required": True,
                "enum": [listing],
                "description": "Copy the commands this session runs, exactly as listed "
                f"(the lead approves them with this phase): {shown}",
            }
        )
        update["fields"] = {**gate.fields, SESSION_COMMANDS_FIELD: field}
    return gate.model_copy(update=update) if update else gate


def uses_commands(gate: GateDefinition) -> bool:
    """Whether ``gate`` runs or lists the session's commands."""
    return SESSION_COMMANDS_FIELD in gate.fields or any(
        isinstance(c, SessionCommandCheck) for c in gate.verify
    )
