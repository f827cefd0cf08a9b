"""``verify`` checks: evidence checked against the real workspace.

A gate's ``verify:`` list names checks an activity runs after the evidence
passes the schema (``activities/verify.py``), so an agent cannot claim "tests
pass" when they do not. This module holds the models and the pure helpers:
:func:`parse_checks` validates a gate's list at load time (errors name the gate
file and ``verify[i].<field>``) and returns typed checks, one model per
``kind`` (:data:`VerifyCheck`, a discriminated union); gates, the workflow and
the activity pass those typed checks around (:data:`VerifyChecks`).
:func:`render` (``domain/verify_template.py``) fills the restricted templates,
:func:`excerpt` trims captured output.

Templates: ``{{ evidence.<field> }}``, ``{{ session.id }}`` and
``{{ session.target }}`` are the only references allowed, and only in the
fields listed in :data:`TEMPLATED_FIELDS`; a reference may declare a type,
``{{ evidence.test_path | path }}`` (``path``, ``name`` or ``int``). A value is
substituted as text into the one string it appears in: an argv element stays
one argument (no shell), and inside a regex or glob the value is escaped, so it
matches literally. One check reads evidence without a template:
``files_exist`` takes each item of an evidence list as a path (``| path`` rules,
and relative to the workspace).

What evidence can do to a check (ARCHITECTURE.md "Who can do what"): nothing
beyond filling those slots, at levels 1-3 alike, because the checks come from
the definition and the workflow decides. Each value is checked against its
slot before anything runs (``domain/verify_contain.py``): ``| path`` resolves,
symlinks followed, inside the workspace; no value may start with ``-`` or
``@`` (an option, a pytest ``@args`` file) or hold NUL or a line break; an
untyped argv value may not be absolute or climb with ``..``. A refused value is
a failed check that names the field and what to send instead. What the
workspace's own code can do when a command runs it is bounded by the worker's
OS user, not by this module (docs/sealed-verify.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from phasegate.domain.errors import GateDefinitionError
from phasegate.domain.regex import check_regex
from phasegate.domain.verify_contain import Slot
from phasegate.domain.verify_template import TEMPLATE_HINT, render, template_refs, typed_refs

__all__ = [
    "CHECK_MODELS",
    "PATH_FIELDS",
    "READ_KINDS",
    "TEMPLATED_FIELDS",
    "CommandCheck",
    "FileContainsCheck",
    "FileExistsCheck",
    "FilesExistCheck",
    "GitChangedCheck",
    "GlobCountCheck",
    "JsonValueCheck",
    "SessionCommandCheck",
    "VerifyCheck",
    "VerifyChecks",
    "VerifyReport",
    "VerifyRequest",
    "VerifyResult",
    "VerifySection",
    "budget_seconds",
    "excerpt",
    "parse_checks",
    "reads_only",
    "render",
    "template_refs",
]

CompareOp = Literal["==", "!=", ">=", ">", "<=", "<"]


def _regex(value: str) -> str:
    """Compile-check a regex unless it holds a template (checked after rendering)."""
    if "{{" not in value:
        check_regex(value)
    return value


Regex = Annotated[str, AfterValidator(_regex)]


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Shown in results; defaults to '<kind>_<n>'.")

    def budget_seconds(self) -> float:
        """How long this check may run on its own (beyond the activity's fixed slack)."""
        return 0.0


class CommandCheck(_Check):
    """Run a program (argv list, never a shell) and check its exit code and output."""

    kind: Literal["command"]
    argv: list[str] = Field(min_length=1, description="Program and arguments; templated.")
    cwd: str = Field(".", description="Working directory, relative to the workspace.")
    timeout_seconds: float = Field(300, gt=0, le=3600, allow_inf_nan=False)
    expect_exit: int | list[int] = Field(
        0, description="The exit code that passes, or a list of them (pytest: [0, 5])."
    )
    stdout_pattern: Regex | None = Field(
        None, description="Regex that stdout+stderr must contain (re.search); templated."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Fixed values added to the check's allowlisted env."
    )

    @field_validator("argv")
    @classmethod
    def _program(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program (argv[0]) is empty")
        return value

    def budget_seconds(self) -> float:
        return self.timeout_seconds

    @property
    def ok_exits(self) -> list[int]:
        """The exit codes that pass."""
        return [self.expect_exit] if isinstance(self.expect_exit, int) else self.expect_exit


class SessionCommandCheck(_Check):
    """Run the session's own commands (``domain/commands.py``), fixed when it started and
    listed in phase 0: ``test`` the project's test command, ``checkpoints`` the commands
    the spec's Validation Gate / Checkpoint of this phase names. Replaced by command
    checks when the phase renders (a session without such a command runs nothing here)."""

    kind: Literal["session_command"]
    command: Literal["test", "checkpoints"] = "test"
    timeout_seconds: float | None = Field(None, gt=0, le=3600, allow_inf_nan=False)

    def budget_seconds(self) -> float:
        return self.timeout_seconds or 900.0


class FileExistsCheck(_Check):
    """A file exists at ``path`` (relative to the workspace)."""

    kind: Literal["file_exists"]
    path: str = Field(min_length=1)


class GlobCountCheck(_Check):
    """The number of files matching a glob lies within ``min``..``max``.

    With neither bound given, at least one file must match.
    """

    kind: Literal["glob_count"]
    pattern: str = Field(min_length=1, description="pathlib glob, relative to the workspace.")
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=0)


class FileContainsCheck(_Check):
    """A file's text contains a regex match (re.search, with ``^``/``$`` matching at lines)."""

    kind: Literal["file_contains"]
    path: str = Field(min_length=1)
    pattern: Regex = Field(min_length=1)


class GitChangedCheck(_Check):
    """At least ``min_files`` files changed under ``paths`` since the session began."""

    kind: Literal["git_changed"]
    paths: list[str] = Field(default_factory=lambda: ["."], min_length=1)
    min_files: int = Field(1, ge=0)


class FilesExistCheck(_Check):
    """Every path an evidence list names is a file in the workspace, or, in a git
    workspace, one git reports deleted (or renamed away) since the session began.

    Each item follows the ``| path`` rules and must be relative to the workspace;
    a list longer than ``max_files`` fails.
    """

    kind: Literal["files_exist"]
    evidence_field: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_]*$", description="The evidence list, e.g. files_changed."
    )
    max_files: int = Field(1000, ge=1, le=10_000, description="Most paths the list may hold.")


class JsonValueCheck(_Check):
    """A value in a JSON file compares with ``op`` to ``value`` or to an evidence field."""

    kind: Literal["json_value"]
    path: str = Field(min_length=1)
    field: str = Field(min_length=1, description="Dotted path; list indexes as digits.")
    op: CompareOp = "=="
    value: Any = None
    evidence_field: str | None = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9_]*$")


VerifyCheck = Annotated[
    CommandCheck
    | FileExistsCheck
    | GlobCountCheck
    | FileContainsCheck
    | GitChangedCheck
    | FilesExistCheck
    | JsonValueCheck
    | SessionCommandCheck,
    Field(discriminator="kind"),
]


def _default_names(value: Any) -> Any:
    """Name unnamed checks ``<kind>_<n>`` (n from 1), as :func:`parse_checks` does, so a
    list stored before checks were typed (raw gate YAML in history) still loads."""
    if not isinstance(value, list):
        return value
    return [
        {"name": f"{item['kind']}_{i + 1}", **item}
        if isinstance(item, dict) and "name" not in item and isinstance(item.get("kind"), str)
        else item
        for i, item in enumerate(value)
    ]


#: A gate's checks, as carried in gates, workflow state and the activity's input.
VerifyChecks = Annotated[list[VerifyCheck], BeforeValidator(_default_names)]


#: Kinds that run no command of the workspace: they read files (git_changed, and
#: files_exist for a missing path, ask git). Where the session worker sees the
#: workspace these run there, without a trip to the verify task queue.
READ_KINDS = frozenset(
    {"file_exists", "files_exist", "glob_count", "json_value", "file_contains", "git_changed"}
)


def reads_only(checks: Iterable[_Check]) -> bool:
    """True when there are checks and every one is of a :data:`READ_KINDS` kind."""
    kinds = [getattr(check, "kind", None) for check in checks]
    return bool(kinds) and all(kind in READ_KINDS for kind in kinds)


def budget_seconds(checks: Iterable[_Check]) -> float:
    """Seconds the checks may run in all: the sum of the command timeouts.

    Args:
        checks: Typed checks.

    Returns:
        The sum of :meth:`budget_seconds` (0 for checks that only read files or git).
    """
    return sum(check.budget_seconds() for check in checks)


CHECK_MODELS: dict[str, type[_Check]] = {
    "command": CommandCheck,
    "file_exists": FileExistsCheck,
    "glob_count": GlobCountCheck,
    "file_contains": FileContainsCheck,
    "git_changed": GitChangedCheck,
    "files_exist": FilesExistCheck,
    "json_value": JsonValueCheck,
    "session_command": SessionCommandCheck,
}

#: Per kind, the fields whose strings may hold ``{{ ... }}`` references.
TEMPLATED_FIELDS: dict[str, tuple[str, ...]] = {
    "command": ("argv", "stdout_pattern"),
    "file_exists": ("path",),
    "glob_count": ("pattern",),
    "file_contains": ("path", "pattern"),
    "git_changed": ("paths",),
    "files_exist": (),
    "json_value": ("path", "value"),
    "session_command": (),
}

#: Fields whose references may be typed ``| path`` (and where untyped values follow
#: the strict rule): an argv element, or a path the activity resolves.
PATH_FIELDS: dict[str, Slot] = {"argv": "argv", "path": "path", "paths": "path"}


class VerifySection(BaseModel):
    """A gate file's ``verify:`` as written: a list of mappings, before
    :func:`parse_checks` types each one (its errors name ``verify.<i>``)."""

    verify: list[dict[str, Any]]


class VerifyResult(BaseModel):
    """The outcome of one check."""

    name: str
    kind: str
    passed: bool
    message: str = Field(description="What was expected and what happened.")
    exit_code: int | None = None
    excerpt: str = Field("", description="Captured output (head and tail), or matched files.")
    duration_ms: int = 0


class VerifyRequest(BaseModel):
    """Input of the ``run_verify_checks`` activity."""

    workspace: str = Field(description="The directory the checks run against.")
    checks: VerifyChecks = Field(description="The gate's checks, as parse_checks returned them.")
    evidence: dict[str, Any] = Field(default_factory=dict)
    base_commit: str | None = Field(None, description="git HEAD when the session started.")
    session_id: str = ""
    target: str = Field("", description="The session's target, for {{ session.target }}.")


class VerifyReport(BaseModel):
    """Output of ``run_verify_checks``: one result per check, in check order."""

    results: list[VerifyResult] = Field(default_factory=list)
    passed: bool = Field(description="True when every check passed.")


# --------------------------------------------------------------------------- parsing


def parse_checks(
    raw: list[dict[str, Any]],
    *,
    source: str,
    known_fields: Iterable[str] | None = None,
) -> list[VerifyCheck]:
    """Validate a gate's ``verify:`` list.

    Args:
        raw: The list as loaded from YAML.
        source: Where it came from (the gate file), for error messages.
        known_fields: When given, the evidence fields the gate declares;
            references to other fields are errors.

    Returns:
        One model per check; a missing ``name`` becomes ``"<kind>_<n>"`` (n from 1).

    Raises:
        GateDefinitionError: The list or a check is malformed, a kind is
            unknown, a template reference is not allowed, or two checks share a
            name. ``where`` is ``"<source>: verify[<i>].<field>"``.
    """
    if not isinstance(raw, list):
        raise _error(
            source,
            "verify",
            f"expected a list of checks, got {type(raw).__name__}",
            "each check is a mapping with a kind: key",
        )
    known = None if known_fields is None else set(known_fields)
    checks: list[VerifyCheck] = []
    names: dict[str, int] = {}
    for i, item in enumerate(raw):
        path = f"verify[{i}]"
        if not isinstance(item, dict):
            hint = "e.g. {kind: command, argv: [pytest, -q]}"
            raise _error(source, path, f"expected a mapping, got {type(item).__name__}", hint)
        kind = item.get("kind")
        model = CHECK_MODELS.get(kind) if isinstance(kind, str) else None
        if model is None:
            kinds = list(CHECK_MODELS)
            close = difflib.get_close_matches(str(kind), kinds, n=1)
            message = "missing required key 'kind'" if kind is None else f"unknown kind {kind!r}"
            hint = f"did you mean '{close[0]}'?" if close else f"known kinds: {', '.join(kinds)}"
            raise _error(source, f"{path}.kind", message, hint)
        check = _validated(model, {"name": f"{kind}_{i + 1}", **item}, source, path)
        _check_templates(check, source, path, known)
        if check.name in names:
            hint = f"give each check a unique name: (verify[{names[check.name]}] has it)"
            raise _error(source, f"{path}.name", f"duplicate check name {check.name!r}", hint)
        names[check.name] = i
        checks.append(check)  # type: ignore[arg-type]
    return checks


def _error(source: str, path: str, message: str, hint: str | None = None) -> GateDefinitionError:
    return GateDefinitionError(message, where=f"{source}: {path}", hint=hint)


def _validated(model: type[_Check], item: dict[str, Any], source: str, path: str) -> _Check:
    try:
        return model.model_validate(item, strict=True)
    except ValidationError as exc:
        err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        hint = None
        if err["type"] == "extra_forbidden":
            known = [k for k in model.model_fields if k != "kind"]
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            message = f"unknown key {err['loc'][-1]!r} for a {item['kind']} check"
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
        elif err["type"] == "missing":
            message = f"missing required key {err['loc'][-1]!r}"
        else:
            message += f" (got {_short(err['input'])})"
            if err["loc"][:1] == ("argv",):
                hint = "argv is a list, one item per argument: [python, -m, pytest, -q]"
        raise _error(source, path + loc, message, hint) from None


def _check_templates(check: _Check, source: str, path: str, known: set[str] | None) -> None:
    templated = TEMPLATED_FIELDS[check.kind]  # type: ignore[attr-defined]
    for key, value in check:
        for where, text in _strings(value, f"{path}.{key}"):
            if "{" not in text and "}" not in text:
                continue
            if key not in templated:
                if "{{" in text or "{%" in text:
                    hint = f"templates are allowed in: {', '.join(templated)}"
                    raise _error(source, where, f"templates are not allowed in {key}", hint)
                continue
            try:
                refs = typed_refs(text)
            except ValueError as exc:
                raise _error(source, where, str(exc), TEMPLATE_HINT) from None
            for ref, kind in refs:
                if kind == "path" and key not in PATH_FIELDS:
                    hint = "| path is for argv, path and paths; use | name or no type here"
                    raise _error(source, where, f"{ref} cannot be a path in {key}", hint)
                field = ref.removeprefix("evidence.")
                if known is not None and ref.startswith("evidence.") and field not in known:
                    hint = f"declare it under evidence_schema (have: {', '.join(sorted(known))})"
                    raise _error(source, where, f"unknown evidence field {field!r}", hint)
    evidence_field = getattr(check, "evidence_field", None)
    if evidence_field is not None:
        if getattr(check, "value", None) is not None:
            hint = "remove value:, or remove evidence_field:"
            raise _error(source, f"{path}.value", "give value or evidence_field, not both", hint)
        if known is not None and evidence_field not in known:
            hint = f"declare it under evidence_schema (have: {', '.join(sorted(known))})"
            raise _error(
                source, f"{path}.evidence_field", f"unknown evidence field {evidence_field!r}", hint
            )
    low, high = getattr(check, "min", None), getattr(check, "max", None)
    if low is not None and high is not None and low > high:
        raise _error(source, f"{path}.min", f"min ({low}) is greater than max ({high})")


def _strings(value: Any, where: str) -> Iterable[tuple[str, str]]:
    """Every string inside ``value`` (nested lists/dicts), with its path."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, f"{where}.{key}")
            yield from _strings(item, f"{where}.{key}")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- output


def excerpt(text: str, limit: int = 2000) -> str:
    """``text`` cut to about ``limit`` characters, keeping the head and (more of) the tail.

    Args:
        text: Captured output.
        limit: Characters to keep; the tail gets 60 %, where failures are summarised.

    Returns:
        The text unchanged if short enough, else head + an omission marker + tail.
    """
    if len(text) <= limit:
        return text
    head = limit * 2 // 5
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n… [{omitted} characters omitted] …\n{text[-tail:]}"
