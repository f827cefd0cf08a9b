"""The developer step's activities: the spec its gated session runs, and the coding agent.

An orchestration's developer works through a child ``GatedSession`` running
``spec_execution_v1`` over a tasks.md written for it:

- :func:`write_dev_spec` writes that spec under the workspace,
  ``<working_dir>/.phasegate/orchestrations/<orchestration id>/dev-<attempt>/``:
  ``tasks.md`` (the architect's ``plan_markdown`` when the tasks parser reads phases
  with tasks in it, else one phase built from the plan's list items, or from the
  issue) and ``README.md`` (the design document phase 0 asks for: issue, goal, plan,
  review comments). Review comments of an earlier pass become the tasks of a last
  phase. The spec lies inside the target, so the session's spec rules accept it.
- :func:`run_coding_agent` runs a coding-agent CLI (``claude -p {prompt}``,
  ``codex exec {prompt}``) in the workspace, told by ``PHASEGATE_SESSION`` which
  session to complete (:func:`coding_agent_env` lists its whole environment). It
  runs as ``verify`` commands do (``activities/_verify_run.py``): its own process
  group with a watchdog, so a cancelled activity, a timeout or a dead worker kills
  the agent and everything it started; it heartbeats every 2 seconds; only the
  last :data:`OUTPUT_TAIL_BYTES` of its output return, with the secret values of
  its environment redacted.

Trust (ARCHITECTURE.md "Who can do what"): the coding agent holds level 3 (a shell
in the workspace, a Temporal client for its session); the session's gates decide
what counts as done, never the agent's exit code or its words. Approvals stay with
people: the agent has no approver's private key.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from markdown_it import MarkdownIt
from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.exceptions import ApplicationError

from phasegate.activities._verify_run import CheckFailed, run_process
from phasegate.activities.tasks_parser import parse_tasks_md
from phasegate.domain.agents import Issue, PlanOutput
from phasegate.domain.errors import SpecParseError
from phasegate.domain.limits import MAX_PATH_CHARS
from phasegate.domain.orchestration_gates import digest
from phasegate.domain.spec import ParsedSpec
from phasegate.domain.verify_contain import is_secret_name, redact
from phasegate.temporal import load_settings

__all__ = [
    "OUTPUT_TAIL_BYTES",
    "SPEC_FOLDER",
    "CodingAgentRequest",
    "CodingAgentRun",
    "DevSpec",
    "DevSpecRequest",
    "coding_agent_env",
    "dev_tasks_md",
    "fill_command",
    "list_items",
    "orchestration_folder",
    "run_coding_agent",
    "tail",
    "write_dev_spec",
]

OUTPUT_TAIL_BYTES = 16 * 1024
"""Output of the coding agent kept in its result (the end: where it says how it ended)."""

SPEC_FOLDER = (".phasegate", "orchestrations")
"""Where, under the working directory, the developer's specs are written."""

_MAX_TASKS = 50  # tasks of a fallback phase, and review comments taken as tasks
_MAX_TASK_CHARS = 300
_MAX_COMMENT_CHARS = 4000  # one review comment in README.md
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_PLACEHOLDER = re.compile(r"\{(prompt|session_id|python)\}")
_TASK_MARK = re.compile(  # a checkbox, then a task id: "[ ] 1.2 ", "T001 ", "**Task 1.1**: "
    r"^(?:\[[ xX~-]\]\*?\s*)?"
    r"(?:(?:\*\*)?(?:Task\s+)?(?:[A-Z]{1,3}\d+|\d+\.\d+)(?:\.\d+)*(?:\*\*)?[:.)]?\s+)?"
)
_OPEN_BOX = re.compile(r"^(\s*(?:[-*+]|\d+[.)])\s+)\[ \]", re.MULTILINE)


# --------------------------------------------------------------------------- messages


class DevSpecRequest(BaseModel):
    """Input of :func:`write_dev_spec`."""

    working_dir: str = Field(max_length=MAX_PATH_CHARS)
    orchestration_id: str = Field(min_length=1, max_length=255)
    attempt: int = Field(1, ge=1, description="The developer's pass: 1, then 2 after a rejection.")
    issue: Issue
    plan: PlanOutput | None = None
    plan_ref: str | None = Field(
        None, max_length=MAX_PATH_CHARS, description="The plan's file when it is kept by reference."
    )
    plan_sha256: str | None = Field(
        None, max_length=64, description="The digest the orchestration recorded for that plan."
    )
    review_ref: str | None = Field(
        None, max_length=MAX_PATH_CHARS, description="The review's file, kept by reference."
    )
    review_sha256: str | None = Field(None, max_length=64)
    review_comments: list[str] = Field(default_factory=list, max_length=_MAX_TASKS)


class DevSpec(BaseModel):
    """Output of :func:`write_dev_spec`: the tasks.md to start ``spec_execution_v1`` with."""

    spec_path: str
    phases: int
    tasks: int
    from_plan: bool = Field(
        False, description="True when the plan's markdown is the tasks.md as written."
    )


class CodingAgentRequest(BaseModel):
    """Input of :func:`run_coding_agent`."""

    command: list[str] = Field(min_length=1, max_length=64)
    working_dir: str = Field(max_length=MAX_PATH_CHARS)
    session_id: str = Field(min_length=1, max_length=255)
    prompt: str = Field("", max_length=256 * 1024)
    timeout_minutes: float = Field(60, gt=0, le=24 * 60)
    temporal_address: str | None = Field(
        None,
        description="What the agent connects to; default: the address in the worker's "
        "environment (TEMPORAL_ADDRESS, the Temporal profile, the running phasegate dev).",
    )
    namespace: str | None = Field(None, description="Default: the activity's namespace.")
    task_queue: str = Field(min_length=1, max_length=255)


class CodingAgentRun(BaseModel):
    """Output of :func:`run_coding_agent`. Says how the process ended, not whether the
    work is done: the session's status says that."""

    exit_code: int = Field(description="The exit status; -N when killed by signal N.")
    output_tail: str = Field(description="The last 16 KiB of stdout and stderr, redacted.")
    seconds: float
    timed_out: bool = False


# --------------------------------------------------------------------------- the spec


@activity.defn
def write_dev_spec(req: DevSpecRequest) -> DevSpec:
    """Write the developer's spec (tasks.md + README.md) into the workspace.

    Idempotent: the same request writes the same bytes (a retried activity is harmless).

    Returns:
        The tasks.md path and what the tasks parser finds in it.

    Raises:
        ApplicationError: Non-retryable, type ``developer_invalid``: the working
            directory is not a folder, or the spec folder would lie outside it (a
            symlink under ``.phasegate/``).
    """
    root = Path(req.working_dir)
    if not req.working_dir or not root.is_dir():
        raise _invalid(
            f"the working directory {req.working_dir!r} is not a folder",
            "set the profile's working_dir to the project's folder",
        )
    folder = orchestration_folder(req.working_dir, req.orchestration_id, f"dev-{req.attempt}")
    plan = req.plan or (_plan_from(req.plan_ref, req.plan_sha256, root) if req.plan_ref else None)
    comments = req.review_comments
    if req.review_ref:  # the whole review: the copy in history was shortened
        comments = [str(c) for c in _recorded(req.review_ref, req.review_sha256, root)["comments"]]
    text, from_plan = dev_tasks_md(req.issue, plan, comments)
    spec = parse_tasks_md(text, source=str(folder / "tasks.md"))  # dev_tasks_md checked it
    _write(folder / "README.md", _readme(req))
    _write(folder / "tasks.md", text)
    ignore = root.joinpath(*SPEC_FOLDER, ".gitignore")
    if not ignore.exists():  # the orchestration's files, not the project's: keep git quiet
        _write(ignore, "# phasegate orchestration specs (not project files)\n*\n")
    return DevSpec(
        spec_path=str(folder / "tasks.md"),
        phases=len(spec.phases),
        tasks=sum(len(p.tasks) for p in spec.phases),
        from_plan=from_plan,
    )


def dev_tasks_md(
    issue: Issue, plan: PlanOutput | None, review_comments: Sequence[str] = ()
) -> tuple[str, bool]:
    """The developer's tasks.md, and whether it is the plan's markdown as written.

    The plan's ``plan_markdown`` is used when the tasks parser reads it into phases
    and at least as many tasks (phase 0's gate needs ``tasks_found >= phases_found``);
    else one phase named after the plan's goal (or the issue) whose
    tasks are the plan's list items (or the goal, or the issue's title). Review
    comments (a later pass) add a last phase, one task per comment, and mark the
    plan's tasks done, so the developer re-checks them instead of redoing them.
    """
    from_plan = False
    if plan is not None and _parsed(plan.plan_markdown) is not None:
        text, from_plan = plan.plan_markdown.rstrip() + "\n", True
    else:
        items = list_items(plan.plan_markdown) if plan is not None else []
        title = _one_line(issue.title) or f"Issue {issue.id}"
        name = (_one_line(plan.goal) if plan is not None else "") or title
        items = items or [name]
        text = f"# Issue {issue.id}: {title}\n\n## Phase 1: {name}\n\n"
        text += "".join(f"- [ ] 1.{k} {item}\n" for k, item in enumerate(items, start=1))
    base = _parsed(text)
    comments = [c for c in map(_one_line, review_comments) if c][:_MAX_TASKS]
    if base is not None and comments:
        next_number = max(p.number for p in base.phases) + 1
        marked = _OPEN_BOX.sub(r"\1[x]", text)
        text = marked if _shape(_parsed(marked)) == _shape(base) else text
        review = f"\n## Phase {next_number}: Address the review comments\n\n"
        review += "".join(f"- [ ] {next_number}.{k} {c}\n" for k, c in enumerate(comments, 1))
        if _shape(_parsed(text + review)) != [*_shape(base), (next_number, len(comments))]:
            text = _render(base)  # the appended phase changed how the plan reads
        text += review
    if _parsed(text) is None:  # sanitised lines always parse; never start a broken session
        raise _invalid("the developer's tasks.md does not parse", "report this phasegate bug")
    return text, from_plan


def list_items(markdown: str) -> list[str]:
    """The list items of ``markdown`` (nested ones too, code blocks skipped), one line
    each, checkboxes removed, at most 50."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    items: list[str] = []
    for i, token in enumerate(tokens[:-2]):
        if token.type == "list_item_open" and tokens[i + 1].type == "paragraph_open":
            item = _TASK_MARK.sub("", tokens[i + 2].content.strip())
            if item := _one_line(item):
                items.append(item)
    return items[:_MAX_TASKS]


def _parsed(text: str) -> ParsedSpec | None:
    """The parse of ``text`` when it holds phases and at least as many tasks, else None."""
    try:
        spec = parse_tasks_md(text)
    except SpecParseError:
        return None
    tasks = sum(len(p.tasks) for p in spec.phases)
    return spec if spec.phases and tasks >= len(spec.phases) else None


def _shape(spec: ParsedSpec | None) -> list[tuple[int, int]]:
    """Phase numbers and task counts: what must not change when text is added."""
    return [(p.number, len(p.tasks)) for p in spec.phases] if spec is not None else []


def _render(spec: ParsedSpec) -> str:
    """``spec`` written plainly (phase headings, done checkbox tasks, validation gates)."""
    out = [f"# {_one_line(spec.title)}\n"] if spec.title.strip() else []
    for phase in spec.phases:
        out.append(f"## Phase {phase.number}: {_one_line(phase.name) or 'Phase'}\n")
        out.append("".join(
            f"- [x]{'*' if t.optional else ''} {t.id} {_one_line(t.name) or t.id}\n"
            for t in phase.tasks
        ))  # fmt: skip
        if phase.validation_gate:
            gate = "".join(f"- [ ] {_one_line(g)}\n" for g in phase.validation_gate)
            out.append(f"**Validation Gate:**\n\n{gate}")
    return "\n".join(out)


def _one_line(text: str) -> str:
    """A task's text: one line, no heading or list markers, at most 300 characters."""
    line = " ".join(text.split()).lstrip("#>*-+ ")
    return line[:_MAX_TASK_CHARS].rstrip()


def orchestration_folder(working_dir: str, orchestration_id: str, *parts: str) -> Path:
    """``<working_dir>/.phasegate/orchestrations/<id>/<parts>``, created, and refused
    (``developer_invalid``) when a symlink under it leads out of the working directory."""
    root = Path(working_dir)
    folder = root.joinpath(*SPEC_FOLDER, _folder_name(orchestration_id), *parts)
    real_root = os.path.realpath(root).rstrip("/") + "/"
    for check in (False, True):  # before creating anything, and once it exists
        if check:
            folder.mkdir(parents=True, exist_ok=True)
        if not os.path.realpath(folder).startswith(real_root):
            raise _invalid(
                f"{folder} resolves outside the working directory {real_root.rstrip('/')}",
                f"remove the symlink under {root / SPEC_FOLDER[0]}",
            )
    return folder


def _plan_from(ref: str, sha256: str | None, root: Path) -> PlanOutput:
    """The architect's whole plan, kept as a file by reference (``store_output``)."""
    return PlanOutput.model_validate(_recorded(ref, sha256, root))


def _recorded(ref: str, sha256: str | None, root: Path) -> dict:
    """An output kept as a file by reference, exactly as the orchestration recorded it:
    anyone with a shell in the workspace can edit the file, so its digest must be the
    one history holds."""
    path = os.path.realpath(ref)
    if not path.startswith(os.path.realpath(root).rstrip("/") + "/"):
        raise _invalid(f"the plan file {ref} is outside the working directory", _PLAN_HINT)
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(2 * 1024 * 1024))
    except (OSError, ValueError) as err:
        raise _invalid(f"the plan file {ref} cannot be read: {err}", _PLAN_HINT) from None
    if sha256 is None or digest(data) != sha256:
        raise _invalid(
            f"the plan file {ref} changed since the architect wrote it (its digest is not the "
            "one the orchestration recorded)",
            _PLAN_HINT,
        )
    return data


_PLAN_HINT = "ask for a replan (phasegate orchestrate replan ID --reason R --as NAME)"


def _folder_name(orchestration_id: str) -> str:
    """The orchestration id as one path segment (a short digest keeps changed ids apart)."""
    if _SAFE_ID.fullmatch(orchestration_id) and orchestration_id.strip(".") == orchestration_id:
        return orchestration_id
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", orchestration_id).strip(".-")[:80] or "orchestration"
    return f"{safe}-{hashlib.sha256(orchestration_id.encode()).hexdigest()[:8]}"


def _readme(req: DevSpecRequest) -> str:
    issue = req.issue
    parts = [f"# {_one_line(issue.title)}\n", f"Issue {issue.id}"]
    if issue.labels:
        parts[-1] += " · labels: " + ", ".join(issue.labels)
    parts[-1] += f" · developer pass {req.attempt}\n"
    if issue.body.strip():
        parts.append(f"## Issue\n\n{issue.body.strip()}\n")
    if req.plan is not None:
        parts.append(f"## Goal\n\n{req.plan.goal.strip()}\n")
        parts.append(f"## Plan\n\n{req.plan.plan_markdown.strip()}\n")
    if req.review_comments:
        parts.append("## Review comments\n\n" + "".join(
            f"- {c.strip()[:_MAX_COMMENT_CHARS]}\n" for c in req.review_comments if c.strip()
        ))  # fmt: skip
    parts.append("## Tasks\n\nSee tasks.md next to this file; a gated session runs it.\n")
    return "\n".join(parts)


def _write(path: Path, text: str) -> None:
    """Write ``text`` whole (a reader never sees half a file; a symlink is replaced)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _invalid(message: str, hint: str) -> ApplicationError:
    return ApplicationError(
        f"{message} ({hint})",
        {"message": message, "hint": hint},
        type="developer_invalid",
        non_retryable=True,
    )


# --------------------------------------------------------------------------- the agent


@activity.defn
def run_coding_agent(req: CodingAgentRequest) -> CodingAgentRun:
    """Run the coding agent's command in the workspace until it exits, times out or is
    cancelled (then its whole process group is killed).

    Returns:
        Exit code, output tail and duration. A timeout is a result (``timed_out``).

    Raises:
        ApplicationError: Non-retryable, type ``developer_invalid``: the working
            directory is not a folder, the command cannot start (not found, not
            executable).
    """
    wd = Path(req.working_dir)
    if not req.working_dir or not wd.is_dir():
        raise _invalid(
            f"the working directory {req.working_dir!r} is not a folder",
            "set the profile's working_dir to the project's folder",
        )
    address, namespace = req.temporal_address, req.namespace
    if address is None or namespace is None:
        address, namespace = _worker_server(address, namespace)
    env = coding_agent_env(
        os.environ,
        session_id=req.session_id,
        temporal_address=address,
        namespace=namespace,
        task_queue=req.task_queue,
    )
    argv = fill_command(req.command, prompt=req.prompt, session_id=req.session_id)
    started = time.monotonic()
    try:
        output, code, timed_out = run_process(argv, wd, env, req.timeout_minutes * 60)
    except CheckFailed as exc:
        raise _invalid(str(exc), "fix the profile's developer.command") from None
    secrets = {k: v for k, v in env.items() if is_secret_name(k) and len(v) >= 4}
    for name in _PHASEGATE_VARS:
        secrets.pop(name, None)  # the session id and address are no secret to the reader
    return CodingAgentRun(
        exit_code=code,
        output_tail=tail(redact(output, secrets), OUTPUT_TAIL_BYTES),
        seconds=round(time.monotonic() - started, 2),
        timed_out=timed_out,
    )


_PHASEGATE_VARS = (
    "PHASEGATE_SESSION",
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "PHASEGATE_TASK_QUEUE",
)


def coding_agent_env(
    environ: Mapping[str, str],
    *,
    session_id: str,
    temporal_address: str,
    namespace: str,
    task_queue: str,
) -> dict[str, str]:
    """The coding agent's environment: the worker's, without phasegate's own settings.

    Every ``PHASEGATE_*`` variable of the worker is dropped (approver and operator
    key files, library, spec and target roots, unsigned-approval switches are the
    worker's business), then ``PHASEGATE_SESSION``, ``PHASEGATE_TASK_QUEUE``,
    ``TEMPORAL_ADDRESS`` and ``TEMPORAL_NAMESPACE`` name the session and where it
    lives. The rest stays: the agent needs ``PATH``, ``HOME`` and its own model
    credentials (``ANTHROPIC_API_KEY``...), and the ``TEMPORAL_TLS_*`` /
    ``TEMPORAL_API_KEY`` client settings to reach the session (trust level 2).
    """
    env = {k: v for k, v in environ.items() if not k.upper().startswith("PHASEGATE_")}
    env.update(
        PHASEGATE_SESSION=session_id,
        PHASEGATE_TASK_QUEUE=task_queue,
        TEMPORAL_ADDRESS=temporal_address,
        TEMPORAL_NAMESPACE=namespace,
    )
    return env


def fill_command(command: list[str], *, prompt: str, session_id: str) -> list[str]:
    """``command`` with ``{prompt}`` and ``{session_id}`` filled in each argument (one
    pass: braces in the prompt are left as written; no shell ever parses it)."""
    values = {"prompt": prompt, "session_id": session_id, "python": sys.executable}
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in command]


def tail(text: str, limit: int) -> str:
    """The last ``limit`` bytes of ``text`` (UTF-8), with a note of what was cut."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    kept = data[-limit:].decode("utf-8", errors="ignore")
    return f"[… {len(data) - limit} earlier bytes omitted …]\n{kept}"


def _worker_server(address: str | None, namespace: str | None) -> tuple[str, str]:
    """The server the agent connects to, where the request names none: the address this
    worker's environment names (as ``phasegate worker`` connects: ``TEMPORAL_ADDRESS``,
    the Temporal profile, the running ``phasegate dev``) and the activity's namespace.
    (A sync activity has no client to ask; a worker built from other settings, as in
    tests, passes ``temporal_address``.)"""
    if namespace is None:
        namespace = activity.info().namespace if activity.in_activity() else "default"
    return address or load_settings(os.environ).temporal_address, namespace
