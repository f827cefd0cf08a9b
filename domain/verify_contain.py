"""What evidence and the workspace can do to a ``verify`` check, and what they cannot.

Threat model (ARCHITECTURE.md, "Who can do what"). Checks come only from the
workflow definition; the workflow decides what runs (holds at levels 1-3).
What the agent controls is *evidence* (at every level: it is what it submits)
and the *workspace* (its work: files, tests, ``conftest.py``, ``pytest.ini``,
symlinks). Evidence reaches a check only through the ``{{ ... }}`` slots the
gate wrote, and each filled value is checked here before anything runs:

- a slot may declare a type, ``{{ evidence.f | path }}``, ``| name`` or
  ``| int`` (:data:`ARG_TYPES`); ``path`` is resolved, symlinks followed,
  inside the workspace (by the activity, which owns the file system);
- no value may start with ``-`` (an option: ``--deselect=...``) or ``@`` (a
  file of options: pytest's ``@args``), and none may hold NUL or a line break
  (an ``int`` may be negative);
- an untyped value in ``argv`` may not be an absolute path or climb with
  ``..``; a gate that wants a path says ``| path``.

A refused value is an :class:`EvidenceRefused`; the activity reports it as a
failed check naming the field and what to send instead.

The workspace is different: a command check runs code the agent wrote, with
the verify worker's OS privileges. phasegate gives that code a scrubbed
environment (:func:`check_environment`: an allowlist, no ``PHASEGATE_*``,
``TEMPORAL_*`` or credentials), a scratch ``HOME``, and redacts key material
and the scrubbed values from what it returns (:func:`redact`). It does not
stop the code from opening any file the worker's user can read: at level 3,
or against a hostile test suite at any level, only running the verify worker
as another OS user or in a container contains it (docs/sealed-verify.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "ARG_TYPES",
    "ENV_ALLOW",
    "EvidenceRefused",
    "Slot",
    "check_environment",
    "checked_report",
    "is_secret_name",
    "redact",
    "scrubbed_values",
    "typed_value",
    "validate_pass_env",
]

#: Types a template slot may declare: ``{{ evidence.field | <type> }}``.
ARG_TYPES = ("path", "name", "int")

#: Where a value lands: an ``argv`` element, a path the activity reads (``path``,
#: ``paths``), or data that is escaped or compared (regex, glob, ``value``).
Slot = Literal["argv", "path", "text"]

_CONTROL = re.compile(r"[\x00\n\r]")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,199}")
_INT = re.compile(r"[+-]?[0-9]{1,18}")

_INSTEAD = {
    None: "send plain text that does not start with '-' or '@' (evidence names things; "
    "it cannot pass options)",
    "path": "send a path inside the workspace, relative to it (e.g. tests/test_app.py)",
    "name": "send a name of letters, digits and _ . : / - (not starting with '-', '.' or '/')",
    "int": "send a whole number, e.g. 3",
}


class EvidenceRefused(ValueError):
    """An evidence value a slot does not accept.

    Attributes:
        ref: The reference, e.g. ``"evidence.test_path"``.
        reason: What is wrong with the value.
        instead: What to send instead.
    """

    def __init__(self, ref: str, value: Any, reason: str, instead: str) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:79] + "…"
        super().__init__(f"{ref} = {shown} is refused: {reason}; {instead}")
        self.ref, self.reason, self.instead = ref, reason, instead


def typed_value(
    ref: str,
    value: Any,
    kind: str | None,
    slot: Slot,
    resolve_path: Callable[[str], str] | None = None,
) -> str:
    """The text a reference's value becomes, or a refusal.

    Args:
        ref: The reference, e.g. ``"evidence.test_path"``.
        value: Its value (not missing: the caller reports missing values).
        kind: The declared type (one of :data:`ARG_TYPES`) or None.
        slot: Where the text lands.
        resolve_path: For ``| path``: the workspace-bound resolver; it raises
            ``ValueError`` (with the reason) for a path outside the workspace.

    Returns:
        The text to substitute (for ``| path`` the resolved path).

    Raises:
        EvidenceRefused: The value breaks the slot's rule.
    """
    instead = _INSTEAD.get(kind, _INSTEAD[None])

    def refuse(reason: str) -> EvidenceRefused:
        return EvidenceRefused(ref, value, reason, instead)

    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise refuse(f"it is a {type(value).__name__}, not a whole number")
        if isinstance(value, str) and _INT.fullmatch(value) is None:
            raise refuse("it is not a whole number")
        return str(int(value))
    text = value if isinstance(value, str) else json.dumps(value)
    if kind is None and (slot == "text" or ref == "session.target"):
        return text  # escaped or compared data; the target is the workspace itself
    if _CONTROL.search(text):
        raise refuse("it holds a control character (NUL or a line break)")
    if text.startswith("-"):
        raise refuse("it starts with '-', so a program would read it as an option")
    if text.startswith("@"):
        raise refuse(
            "it starts with '@', which pytest and other programs read as a file of options"
        )
    if kind == "name":
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise refuse(f"it is a {type(value).__name__}, not a name")
        if _NAME.fullmatch(text) is None or ".." in text.split("/"):
            raise refuse("it is not a name")
        return text
    if kind == "path":
        if not isinstance(value, str):
            raise refuse(f"it is a {type(value).__name__}, not a path")
        if resolve_path is None:
            raise refuse("a path is not accepted in this field")
        try:
            return resolve_path(text)
        except ValueError as exc:
            raise refuse(str(exc)) from None
    if slot == "argv":
        if text.startswith(("/", "~")):
            raise refuse("it is an absolute path")
        if ".." in re.split(r"[/\\]", text):
            raise refuse("it climbs out with '..'")
    return text


# --------------------------------------------------------------------------- environment

#: Variables a check inherits from the worker (plus every ``LC_*``).
ENV_ALLOW = ("PATH", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME")

_SECRET_PREFIXES = ("PHASEGATE_", "TEMPORAL_", "AWS_", "AZURE_", "GOOGLE_", "GCP_")
_SECRET_WORDS = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION|CERT|DSN", re.IGNORECASE
)
_HARMLESS = {"HOME", "PWD", "OLDPWD", "SHELL", "TERM", "SHLVL", "HOSTNAME", "_", "MAIL"}
_HARMLESS_SUFFIXES = ("_HOME", "_ROOT", "_DIR", "_DIRS", "PATH")


def is_secret_name(name: str) -> bool:
    """Whether a variable's name says it holds phasegate's own settings or a credential."""
    return name.upper().startswith(_SECRET_PREFIXES) or bool(_SECRET_WORDS.search(name))


def validate_pass_env(names: Iterable[str]) -> tuple[str, ...]:
    """Names a worker operator lets checks inherit, refusing phasegate's and credentials.

    Raises:
        ValueError: A name is phasegate's own (``PHASEGATE_*``, ``TEMPORAL_*``) or
            looks like a credential (``*_KEY``, ``*_TOKEN``, ``*_SECRET``, ``AWS_*``, ...).
    """
    names = tuple(names)
    for name in names:
        if is_secret_name(name):
            raise ValueError(
                f"pass_env {name!r} would hand a credential or phasegate's own settings to "
                "code the agent wrote; give checks no credentials (set fixed values in the "
                "gate's env: instead)"
            )
    return names


def check_environment(
    environ: Mapping[str, str],
    *,
    home: str,
    tmp: str,
    declared: Mapping[str, str] | None = None,
    pass_env: Iterable[str] = (),
) -> dict[str, str]:
    """The environment a check's command gets: an allowlist, never the worker's secrets.

    Args:
        environ: The worker's environment.
        home: A scratch directory for ``HOME``.
        tmp: A scratch directory for ``TMPDIR``/``TEMP``/``TMP``.
        declared: The gate's ``env:`` (fixed values from the definition).
        pass_env: Further names the operator lets through (see :func:`validate_pass_env`).

    Returns:
        ``ENV_ALLOW`` and ``LC_*`` from ``environ``, the passed names, the scratch
        directories, then the gate's values.
    """
    passed = set(pass_env)
    env = {
        name: value
        for name, value in environ.items()
        if name in ENV_ALLOW or name.startswith("LC_") or name in passed
    }
    env.update(HOME=home, TMPDIR=tmp, TEMP=tmp, TMP=tmp)
    env.update(declared or {})
    return env


def scrubbed_values(environ: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Values of the worker's variables a check did not get, to redact from its output.

    Plain locations (``HOME``, ``*_HOME``, ``*PATH``, ...) are left readable unless the
    name looks like a credential; short values (under 8 characters, 4 for a credential's
    name) are not redacted, so "1" or "true" stay intact.
    """
    kept = set(env.values())
    found = {}
    for name, value in environ.items():
        if name in env or value in kept:
            continue
        secret = is_secret_name(name)
        if not secret and (name in _HARMLESS or name.upper().endswith(_HARMLESS_SUFFIXES)):
            continue
        if len(value) >= (4 if secret else 8):
            found[name] = value
    return found


# --------------------------------------------------------------------------- redaction

_KEY_NOTE = "[redacted: looks like private key material]"
_B64 = "A-Za-z0-9+/"
_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")
_BODY = re.compile(rf"[{_B64}=]*|[A-Za-z-]+: .*")  # a base64 line, or Proc-Type:/DEK-Info:
_INLINE_KEYS = (
    # an Ed25519 PKCS#8 body (DER prefix 302e020100300506032b657004220420), anywhere
    re.compile(rf"MC4CAQAwBQYDK2VwBCIEI[{_B64}=]*"),
    # a bare 32- or 64-byte key in base64 (Ed25519 / X25519 / NaCl seeds, WireGuard)
    re.compile(
        rf"(?<![{_B64}=])(?:[{_B64}]{{42}}[AEIMQUYcgkosw048]=|[{_B64}]{{85}}[AQgw]==)(?![{_B64}=])"
    ),
)


def redact(text: str, secrets: Mapping[str, str] | None = None) -> str:
    """``text`` with key material and the given values replaced by a note.

    Linear in the length of ``text`` (it runs on whole command outputs).

    Args:
        text: Output or a message about to leave the worker.
        secrets: Variable name to value (:func:`scrubbed_values`); each value is
            replaced by ``[redacted $NAME]``.

    Returns:
        The text with private key blocks (also when the output cut them: a
        block's start, or its end), Ed25519 PKCS#8 bodies, bare base64 keys and
        the secret values replaced. Key material that was transformed (reversed,
        hex, split) is not recognised: redaction is a second line, the first is
        that checks cannot read the keys (docs/sealed-verify.md).
    """
    if "PRIVATE KEY-----" in text:
        text = _redact_blocks(text)
    for pattern in _INLINE_KEYS:
        text = pattern.sub(_KEY_NOTE, text)
    for name, value in sorted((secrets or {}).items(), key=lambda item: -len(item[1])):
        if value:
            text = text.replace(value, f"[redacted ${name}]")
    return text


def _redact_blocks(text: str) -> str:
    """Replace PEM/OpenSSH private key blocks, line by line: from ``BEGIN`` to ``END``
    or to the first line that is not key body, and the body lines before an ``END``
    whose ``BEGIN`` is missing."""
    out: list[str] = []
    inside = False
    for line in text.split("\n"):
        begin = _BEGIN.search(line)
        if not inside and begin is not None:
            out.append(line[: begin.start()] + _KEY_NOTE)
            line, inside = line[begin.end() :], True
        if inside:
            end = _END.search(line)
            if end is not None:
                out[-1] += line[end.end() :]
                inside = False
            elif _BODY.fullmatch(line.strip()) is None:
                out.append(line)  # the block was cut; this line is ordinary output
                inside = False
            continue
        end = _END.search(line)
        if end is not None:  # the start was cut: drop the body lines before it
            while out and out[-1].strip() and _BODY.fullmatch(out[-1].strip()) is not None:
                out.pop()
            out.append(line[: end.start()] + _KEY_NOTE + line[end.end() :])
            continue
        out.append(line)
    return "\n".join(out)


def checked_report(checks: Sequence[Any], results: Sequence[Any]) -> list[Any] | None:
    """The report's results if it answers every check of the gate, in order, else None.

    A verify activity can be answered by any worker polling its task queue; one that
    returns fewer results, or results for other checks, has not checked this gate
    (the workflow treats it as checks that could not run: a failed check).

    Args:
        checks: The gate's checks (``VerifyCheck``).
        results: The activity's ``VerifyResult`` list.
    """
    if len(results) != len(checks):
        return None
    for check, result in zip(checks, results, strict=True):
        if (result.name, result.kind) != (check.name, check.kind):
            return None
    return list(results)
