"""The ``run_verify_checks`` activity: a gate's ``verify:`` checks, run against the workspace.

Checks come only from the workflow definition (``VerifyRequest.checks``, typed
checks that ``domain.verify.parse_checks`` validated when the gate loaded);
evidence is only ever text substituted into one argv element, path, pattern or
value, each checked against its slot first (``domain/verify_contain.py``:
``| path`` resolved inside the workspace with symlinks followed, no option or
``@file`` values), or, for ``files_exist``, a bounded list of paths each checked
like a ``| path`` that must also be relative. Commands run as
``activities/_verify_run.py`` describes: no shell, a scrubbed environment with a
scratch ``HOME``, interpreters the workspace cannot shadow, a process group
killed on timeout, on cancellation, when the command exits and when the worker
dies. Messages and excerpts are redacted of key material and of the worker's
scrubbed values before they leave. Every check yields a :class:`VerifyResult`;
a broken check or a refused value is a failed result, never an exception. The
runners work outside an activity too (tests, CLI): heartbeats are skipped. The
activity does not care which task queue it is registered on.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable
from functools import partial
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import CancelledError

from phasegate.activities._verify_json import compare, follow
from phasegate.activities._verify_run import (
    HEARTBEAT_SECONDS,
    CheckFailed,
    Scratch,
    heartbeat,
    interpreter_argv,
    run_process,
)
from phasegate.domain.commands import allowed, failure_summary
from phasegate.domain.errors import VerifyInvalid
from phasegate.domain.verify import (
    CommandCheck,
    FileContainsCheck,
    FileExistsCheck,
    FilesExistCheck,
    GitChangedCheck,
    GlobCountCheck,
    JsonValueCheck,
    SessionCommandCheck,
    VerifyCheck,
    VerifyReport,
    VerifyRequest,
    VerifyResult,
    excerpt,
    render,
)
from phasegate.domain.verify_contain import (
    EvidenceRefused,
    Slot,
    check_environment,
    redact,
    scrubbed_values,
    typed_value,
    validate_pass_env,
)
from phasegate.temporal import application_error

__all__ = ["VerifyActivities"]

_MAX_READ_BYTES = 32 * 1024 * 1024  # file_contains / json_value read at most this much
_GIT_TIMEOUT = 120.0


class VerifyActivities:
    """Runs ``verify`` checks.

    Args:
        max_output_chars: Length of the output excerpt kept in each result.
        pass_env: Names of further worker variables commands may inherit (e.g.
            ``JAVA_HOME``); phasegate's own and credential-like names are refused.
        allowed_commands: The deployment's command list (``PHASEGATE_ALLOWED_COMMANDS``,
            argv prefixes as ``domain.commands.parse_allowlist`` returns them): a command
            check whose argv it does not allow fails without running. None: any.

    Raises:
        ValueError: ``pass_env`` names ``PHASEGATE_*``, ``TEMPORAL_*`` or a credential.
    """

    def __init__(
        self,
        *,
        max_output_chars: int = 2000,
        pass_env: Iterable[str] = (),
        allowed_commands: list[list[str]] | None = None,
    ) -> None:
        self.max_output_chars = max_output_chars
        self.pass_env = validate_pass_env(pass_env)
        self.allowed_commands = allowed_commands

    @activity.defn(name="run_verify_checks")
    def run_verify_checks(self, req: VerifyRequest) -> VerifyReport:
        """Run every check in order; a failing check does not skip later ones.

        Args:
            req: The workspace, the gate's typed checks, the evidence.

        Returns:
            One result per check, in check order; ``passed`` when all passed.

        Raises:
            ApplicationError: Non-retryable, type ``verify_invalid``: the workspace
                is not a directory. (Malformed checks never get here: the request
                does not decode, and the gate that holds them does not load.)
        """
        try:
            workspace = Path(req.workspace).resolve()
            usable = workspace.is_dir()
        except (OSError, ValueError):
            usable = False
        if not usable:
            raise application_error(
                VerifyInvalid(
                    f"workspace {req.workspace!r} is not a directory",
                    where="workspace",
                    hint="the session's target must be the project's folder",
                )
            )
        run = _Run(self, req, workspace)
        results = []
        for index, check in enumerate(req.checks):
            heartbeat({"check": index, "name": check.name})
            results.append(run.run(check))
        return VerifyReport(results=results, passed=all(r.passed for r in results))


class _Run:
    """One request's run: the rendering context plus one runner per kind."""

    def __init__(self, owner: VerifyActivities, req: VerifyRequest, workspace: Path) -> None:
        self.limit = owner.max_output_chars
        self.pass_env = owner.pass_env
        self.allowlist = owner.allowed_commands
        self.req = req
        self.workspace = workspace
        self.session = {"id": req.session_id, "target": req.target}
        given = check_environment(os.environ, home="", tmp="", pass_env=self.pass_env)
        self.secrets = scrubbed_values(os.environ, given)

    def run(self, check: VerifyCheck) -> VerifyResult:
        runner: Callable[[Any], VerifyResult] = getattr(self, f"_{check.kind}")
        start = time.monotonic()
        try:
            result = runner(check)
        except CheckFailed as exc:
            result = self.result(check, False, str(exc))
        except CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a broken check is a failed check
            result = self.result(check, False, f"check failed to run: {type(exc).__name__}: {exc}")
        elapsed = int((time.monotonic() - start) * 1000)
        return result.model_copy(
            update={
                "duration_ms": elapsed,
                "message": redact(result.message, self.secrets),
                "excerpt": redact(result.excerpt, self.secrets),
            }
        )

    # ---- helpers -------------------------------------------------------

    def text(
        self,
        value: str,
        what: str,
        quote: Callable[[str], str] | None = None,
        *,
        slot: Slot = "text",
        base: Path | None = None,
    ) -> str:
        """``value`` rendered for ``slot``; ``| path`` values resolve from ``base``."""
        resolve = partial(self.contained, base=base or self.workspace)
        try:
            out, missing = render(
                value, self.req.evidence, self.session, quote=quote, slot=slot, resolve_path=resolve
            )
        except EvidenceRefused as exc:
            raise CheckFailed(f"{what}: {exc}") from None
        if missing:
            raise CheckFailed(f"{what} needs {', '.join(missing)}, which is missing or empty")
        return out

    def contained(self, value: str, base: Path) -> str:
        """A ``| path`` value: resolved from ``base`` (symlinks followed) inside the
        workspace, as a path relative to ``base``; ValueError when it leaves."""
        try:
            real = Path(os.path.realpath(base / value))
        except (OSError, ValueError) as exc:
            raise ValueError(f"it is not a usable path ({exc})") from None
        if real != self.workspace and self.workspace not in real.parents:
            raise ValueError(f"it resolves to {real}, outside the workspace")
        rel = os.path.relpath(real, base)
        return f"./{rel}" if rel.startswith(("-", "@")) else rel

    def value(self, value: Any, what: str) -> Any:
        if isinstance(value, str):
            return self.text(value, what)
        if isinstance(value, list):
            return [self.value(v, what) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v, what) for k, v in value.items()}
        return value

    def inside(self, rel: str, what: str) -> Path:
        """``rel`` resolved (symlinks too) under the workspace, or a failure."""
        try:
            path = (self.workspace / rel).resolve()
        except (OSError, ValueError, RuntimeError) as exc:
            raise CheckFailed(f"{what} {rel!r} is not a usable path: {exc}") from None
        if path != self.workspace and self.workspace not in path.parents:
            raise CheckFailed(
                f"{what} {rel!r} resolves to {path}, outside the workspace {self.workspace}; "
                "use a path inside the workspace"
            )
        return path

    def result(self, check: VerifyCheck, passed: bool, message: str, **kw: Any) -> VerifyResult:
        return VerifyResult(name=check.name, kind=check.kind, passed=passed, message=message, **kw)

    def read(self, check: FileContainsCheck | JsonValueCheck) -> tuple[str, str]:
        rel = self.text(check.path, "path", slot="path")
        path = self.inside(rel, "path")
        if not path.is_file():
            state = "is a directory" if path.is_dir() else "does not exist"
            raise CheckFailed(f"{rel} {state}; expected a file there")
        with path.open("rb") as fh:
            data = fh.read(_MAX_READ_BYTES)
        return rel, data.decode("utf-8", errors="replace")

    # ---- runners -------------------------------------------------------

    def _command(self, check: CommandCheck) -> VerifyResult:
        cwd = self.inside(check.cwd, "cwd")
        if not cwd.is_dir():
            raise CheckFailed(f"cwd {check.cwd!r} is not a directory in the workspace")
        argv = [
            self.text(arg, f"argv[{i}]", slot="argv", base=cwd) for i, arg in enumerate(check.argv)
        ]
        pattern = None
        if check.stdout_pattern is not None:
            source = self.text(check.stdout_pattern, "stdout_pattern", re.escape)
            try:
                pattern = re.compile(source)
            except re.error as exc:
                raise CheckFailed(f"stdout_pattern is not a valid regex: {exc}") from None
        shown = _clip(shlex.join(argv), 200)
        if not allowed(argv, self.allowlist):
            raise CheckFailed(
                f"`{shown}` is not on this worker's list of allowed commands "
                "(PHASEGATE_ALLOWED_COMMANDS), so it was not run; ask the operator to add it, "
                "or start the session with an allowed --test-command"
            )
        with Scratch() as scratch:
            env = check_environment(
                os.environ,
                home=str(scratch.home),
                tmp=str(scratch.tmp),
                declared=check.env,
                pass_env=self.pass_env,
            )
            output, code, timed_out = run_process(
                interpreter_argv(argv), cwd, env, check.timeout_seconds
            )
        kept = excerpt(redact(output, self.secrets), self.limit)
        if timed_out:
            message = f"`{shown}` timed out after {check.timeout_seconds:g}s and was killed"
            return self.result(check, False, message, excerpt=kept)
        if code not in check.ok_exits:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
            wanted = " or ".join(str(c) for c in check.ok_exits)
            message = f"`{shown}` {how}, expected exit code {wanted}"
            summary = failure_summary(redact(output, self.secrets))
            message += f": {summary}" if summary else "; see the output"
            return self.result(check, False, message, exit_code=code, excerpt=kept)
        if pattern is not None and not pattern.search(output):
            message = f"`{shown}` exited with {code} but its output has no match for "
            message += f"/{_clip(pattern.pattern, 120)}/"
            return self.result(check, False, message, exit_code=code, excerpt=kept)
        message = f"`{shown}` exited with {code}" + (" and its output matched" if pattern else "")
        if tally := failure_summary(redact(output, self.secrets), 200):
            message += f" ({tally})"
        return self.result(check, True, message, exit_code=code, excerpt=kept)

    def _session_command(self, check: SessionCommandCheck) -> VerifyResult:
        raise CheckFailed(
            f"session_command {check.command!r} reached the worker unresolved: the phase "
            "was rendered without the session's commands; restart the session"
        )

    def _file_exists(self, check: FileExistsCheck) -> VerifyResult:
        rel = self.text(check.path, "path", slot="path")
        path = self.inside(rel, "path")
        if path.is_file():
            return self.result(check, True, f"{rel} exists")
        state = "is a directory, not a file" if path.is_dir() else "does not exist"
        return self.result(check, False, f"{rel} {state}; expected a file there")

    def _glob_count(self, check: GlobCountCheck) -> VerifyResult:
        pattern = self.text(check.pattern, "pattern", glob_escape)
        if pattern.startswith("/") or ".." in Path(pattern).parts:
            raise CheckFailed(f"pattern {pattern!r} leaves the workspace; use a relative pattern")
        matches: list[str] = []
        outside, last = 0, time.monotonic()
        try:
            for found in self.workspace.glob(pattern):
                if time.monotonic() - last >= HEARTBEAT_SECONDS:
                    heartbeat({"glob": pattern, "matched": len(matches)})
                    last = time.monotonic()
                real = found.resolve()
                if real != self.workspace and self.workspace not in real.parents:
                    outside += 1
                elif real.is_file():
                    matches.append(found.relative_to(self.workspace).as_posix())
        except (ValueError, NotImplementedError, OSError) as exc:
            raise CheckFailed(f"pattern {pattern!r} cannot be used: {exc}") from None
        low = 1 if check.min is None and check.max is None else check.min
        wanted = " and ".join(
            f"{word} {n}"
            for word, n in (("at least", low), ("at most", check.max))
            if n is not None
        )
        count = len(matches)
        passed = (low is None or count >= low) and (check.max is None or count <= check.max)
        message = f"{count} file(s) match {pattern!r}; expected {wanted}"
        if outside:
            message += f" ({outside} link(s) pointing outside the workspace not counted)"
        listing = excerpt("\n".join(sorted(matches)), self.limit)
        return self.result(check, passed, message, excerpt=listing)

    def _file_contains(self, check: FileContainsCheck) -> VerifyResult:
        rel, text = self.read(check)
        source = self.text(check.pattern, "pattern", re.escape)
        try:
            match = re.search(source, text, re.MULTILINE)
        except re.error as exc:
            raise CheckFailed(f"pattern is not a valid regex: {exc}") from None
        if match is None:
            return self.result(check, False, f"{rel} has no match for /{_clip(source, 120)}/")
        line = text.count("\n", 0, match.start()) + 1
        return self.result(
            check,
            True,
            f"{rel} matches /{_clip(source, 120)}/ at line {line}",
            excerpt=_clip(match.group(0), self.limit),
        )

    def _git_changed(self, check: GitChangedCheck) -> VerifyResult:
        specs = [
            os.path.relpath(
                self.inside(self.text(raw, f"paths[{i}]", slot="path"), f"paths[{i}]"),
                self.workspace,
            )
            for i, raw in enumerate(check.paths)
        ]
        base = self.req.base_commit
        found = _git(self.workspace, "rev-parse", "--verify", "-q", f"{base or 'HEAD'}^{{commit}}")
        if found.returncode not in (0, 1):  # 128: not a repository, or one git refuses
            raise CheckFailed(
                f"{self.workspace} is not a usable git repository "
                f"({_clip(found.stderr.strip(), 200)}); run `git init` there and "
                "commit, or remove the git_changed check"
            )
        if found.returncode == 0:
            against = found.stdout.strip()
        elif base is None:  # a repository without commits yet: everything is new
            against = _git(self.workspace, "hash-object", "-t", "tree", "/dev/null").stdout.strip()
        else:
            raise CheckFailed(f"base commit {base!r} is not in the repository at {self.workspace}")
        changed: set[str] = set()
        for args in (
            ("diff", "--name-only", "--relative", "-z", against),
            ("diff", "--cached", "--name-only", "--relative", "-z", against),
            ("ls-files", "--others", "--exclude-standard", "-z"),
        ):
            done = _git(self.workspace, *args, "--", *specs)
            if done.returncode != 0:
                raise CheckFailed(f"`git {args[0]}` failed: {_clip(done.stderr.strip(), 300)}")
            changed.update(name for name in done.stdout.split("\0") if name)
        since = f"since {against[:12]}" if base else "in the working tree"
        message = f"{len(changed)} file(s) changed under {', '.join(specs)} {since}; "
        message += f"expected at least {check.min_files}"
        if base is None:
            message += (
                " (no base commit recorded: compared against HEAD, so commits are not counted)"
            )
        listing = excerpt("\n".join(sorted(changed)), self.limit)
        return self.result(check, len(changed) >= check.min_files, message, excerpt=listing)

    def _files_exist(self, check: FilesExistCheck) -> VerifyResult:
        ref = f"evidence.{check.evidence_field}"
        listed = self.req.evidence.get(check.evidence_field)
        if listed is None or listed == []:
            raise CheckFailed(f"{ref} is missing or empty; list the files you changed")
        if not isinstance(listed, list):
            raise CheckFailed(
                f"{ref} is a {type(listed).__name__}, not a list of paths; "
                'send e.g. ["src/app.py", "tests/test_app.py"]'
            )
        if len(listed) > check.max_files:
            raise CheckFailed(
                f"{ref} lists {len(listed)} paths; the gate checks at most "
                f"{check.max_files}: list the files you changed, not whole "
                "generated trees"
            )
        problems, absent, found, last = [], [], [], time.monotonic()
        for i, value in enumerate(listed):
            if time.monotonic() - last >= HEARTBEAT_SECONDS:
                heartbeat({"files_exist": ref, "checked": i})
                last = time.monotonic()
            try:
                rel = typed_value(f"{ref}[{i}]", value, "path", "path", self.relative)
                path = self.workspace / rel
                is_file, is_dir = path.is_file(), path.is_dir()
            except EvidenceRefused as exc:
                problems.append(f"{exc.ref} = {_clip(repr(value), 80)} is refused: {exc.reason}")
                continue
            except OSError as exc:
                problems.append(f"{ref}[{i}] = {_clip(repr(value), 80)} cannot be read: {exc}")
                continue
            if is_file:
                found.append(rel)
            elif is_dir:
                problems.append(f"{rel} is a directory (list the files in it you changed)")
            else:
                absent.append(rel)
        deleted, why = self.deleted() if absent else (set(), "")
        missing = [rel for rel in absent if rel not in deleted]
        if missing:
            problems.append(
                f"{_clip(', '.join(missing), 600)} "
                f"{'does' if len(missing) == 1 else 'do'} not exist{why}"
            )
        gone = [rel for rel in absent if rel in deleted]
        listing = excerpt("\n".join([*found, *(f"{rel} (deleted)" for rel in gone)]), self.limit)
        if problems:
            message = f"{ref} names paths that are not files in the workspace: "
            message += "; ".join(_clip(p, 700) for p in problems[:10])
            message += f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
            message += ". List only the files you created, modified or deleted, as paths "
            message += "relative to the workspace (e.g. src/app.py)"
            return self.result(check, False, message, excerpt=listing)
        message = f"all {len(listed)} path(s) in {ref} are files in the workspace"
        if gone:
            message += f" or deleted since the session began ({_clip(', '.join(gone), 300)})"
        return self.result(check, True, message, excerpt=listing)

    def relative(self, text: str) -> str:
        """A listed path, relative to the workspace, resolved inside it (symlinks followed)."""
        if os.path.isabs(text) or text.startswith("~"):
            raise ValueError("it is an absolute path")
        return self.contained(text, self.workspace)

    def deleted(self) -> tuple[set[str], str]:
        """Paths git reports deleted (renames count: no rename detection) between the
        session's base commit (else HEAD) and the working tree, relative to the workspace;
        and, for a path missing without that, why a deletion cannot be confirmed."""
        base = self.req.base_commit
        try:
            found = _git(
                self.workspace, "rev-parse", "--verify", "-q", f"{base or 'HEAD'}^{{commit}}"
            )
            if found.returncode != 0:
                why = "is not a git repository" if found.returncode != 1 else "has no commits yet"
                if base is not None and found.returncode == 1:
                    why = f"lacks the session's base commit {base[:12]}"
                return set(), f" (the workspace {why}, so no deletion can be confirmed)"
            done = _git(
                self.workspace,
                "diff",
                "--no-renames",
                "--name-only",
                "--relative",
                "--diff-filter=D",
                "-z",
                found.stdout.strip(),
                "--",
            )
        except CheckFailed as exc:
            return set(), f" ({exc}: a deletion cannot be confirmed)"
        if done.returncode != 0:
            return set(), f" (`git diff` failed: {_clip(done.stderr.strip(), 200)})"
        since = f"{base[:12]}, when the session began" if base else "HEAD"
        gone = {name for name in done.stdout.split("\0") if name}
        return gone, f" (and git reports no such deletion since {since})"

    def _json_value(self, check: JsonValueCheck) -> VerifyResult:
        rel, text = self.read(check)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CheckFailed(f"{rel} is not valid JSON: {exc}") from None
        actual = follow(data, check.field, rel)
        if check.evidence_field is not None:
            expected = self.req.evidence.get(check.evidence_field)
            if expected is None:
                raise CheckFailed(f"evidence field {check.evidence_field!r} is missing")
            what = f"evidence.{check.evidence_field} ({expected!r})"
        else:
            expected = self.value(check.value, "value")
            what = repr(expected)
        ok = compare(actual, check.op, expected)
        if ok is None:
            raise CheckFailed(
                f"{rel} {check.field} = {_clip(repr(actual), 80)} cannot be compared "
                f"with {check.op} {what}: not numbers"
            )
        verdict = "satisfied" if ok else "not satisfied"
        message = f"{rel} {check.field} = {_clip(repr(actual), 80)}; expected {check.op} {what}"
        return self.result(check, ok, f"{message} ({verdict})")


# --------------------------------------------------------------------------- git


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git on the workspace with the checks' allowlisted environment (the real HOME, for
    the operator's git config), no fsmonitor hook and, for diffs, no external diff or
    textconv programs: the workspace's .git/config is the agent's to write. (Its clean
    filters still run on changed files: a sealed deployment contains those.)"""
    home = os.environ.get("HOME", "/")
    env = check_environment(os.environ, home=home, tmp=os.environ.get("TMPDIR", "/tmp"))
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    if args[0] == "diff":
        args = (args[0], "--no-ext-diff", "--no-textconv", *args[1:])
    argv = ["git", "--literal-pathspecs", "-c", "core.quotepath=off", "-c", "core.fsmonitor=false",
            *args]  # fmt: skip
    try:
        return subprocess.run(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_GIT_TIMEOUT,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        raise CheckFailed("git is not installed on the worker; install git") from None
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"`git {args[0]}` took longer than {_GIT_TIMEOUT:g}s") from None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
