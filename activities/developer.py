"""The developer step's activities: the spec its gated session runs, and the coding agent.

Both are methods of :class:`DeveloperActivities`, built per worker with its coding
agents and target roots (``Settings.coding_agents``, ``Settings.target_roots``).
An orchestration's developer works through a child ``GatedSession`` running
``spec_execution_v1`` over a tasks.md written for it:

- :meth:`DeveloperActivities.write_dev_spec` writes that spec under the workspace,
  ``<working_dir>/.phasegate/orchestrations/<orchestration id>/dev-<attempt>/``:
  ``tasks.md`` (the architect's ``plan_markdown`` when the tasks parser reads phases
  with tasks in it, else one phase built from the plan's list items, or from the
  issue) and ``README.md`` (the design document phase 0 asks for: issue, goal, plan,
  review comments). Review comments of an earlier pass become the tasks of a last
  phase. The spec lies inside the target, so the session's spec rules accept it.
- :meth:`DeveloperActivities.run_coding_agent` runs one of the worker's coding agents
  (``claude -p {prompt}``, ``codex exec {prompt}``, the scripted one), named by the
  request, in the workspace, told by ``PHASEGATE_SESSION`` which session to complete.
  It runs as ``verify`` commands do (``activities/_verify_run.py``): its own process
  group with a watchdog, so a cancelled activity, a timeout or a dead worker kills
  the agent and everything it started; it heartbeats every 2 seconds; only the
  last :data:`OUTPUT_TAIL_BYTES` of its output return, with the secret values of
  its environment redacted.

Trust (ARCHITECTURE.md "Who can do what"): any workflow with a Temporal client can
schedule these activities (level 2), so neither trusts its input for power: the
coding agent is a name resolved on the worker (``activities/_coding_agent.py``: never
an argv from the request, Python started isolated, an allowlisted environment), and
the working directory is re-checked against the worker's target roots on every call.
A coding agent holds level 3 (a shell in the workspace): every file written here goes
through ``activities/_workspace_files.py`` (no symlink followed, no predictable temp
name) and outputs kept by reference are read through the bounded reader (a regular
file, no link, no FIFO, a size cap, the digest history recorded). The session's gates
decide what counts as done, never the agent's exit code or its words; approvals stay
with people (the agent has no approver's private key).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from temporalio import activity
from temporalio.exceptions import ApplicationError

from phasegate.activities._coding_agent import (
    SESSION_VARS,
    coding_agent_env,
    command_ref,
    fill_command,
    isolated,
    resolve,
    tail,
)
from phasegate.activities._safe_read import MiB, read_bytes
from phasegate.activities._verify_run import CheckFailed, run_process
from phasegate.activities._workspace_files import (
    SPEC_FOLDER,
    WorkspaceFolder,
    WorkspaceRefused,
    checked_root,
    orchestration_parts,
)
from phasegate.activities.tasks_md import parse_tasks_md
from phasegate.domain.errors import DefinitionError, SpecParseError
from phasegate.domain.orchestration.activities import (  # the activities' messages
    MAX_DEV_TASKS,
    CodingAgentRequest,
    CodingAgentRun,
    DevSpec,
    DevSpecRequest,
)
from phasegate.domain.orchestration.agents import Issue, PlanOutput
from phasegate.domain.orchestration.gates import digest
from phasegate.domain.settings import CodingAgent, Settings
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
    "DeveloperActivities",
    "coding_agent_env",
    "command_ref",
    "dev_tasks_md",
    "fill_command",
    "list_items",
    "tail",
]

OUTPUT_TAIL_BYTES = 16 * 1024
"""Output of the coding agent kept in its result (the end: where it says how it ended)."""

_MAX_TASKS = MAX_DEV_TASKS  # tasks of a fallback phase, and review comments taken as tasks
_MAX_TASK_CHARS = 300
_MAX_COMMENT_CHARS = 4000  # one review comment in README.md
_REF_LIMIT = 4 * MiB  # an output kept by reference (store_output: one payload, <= 2 MB)
_TASK_MARK = re.compile(  # a checkbox, then a task id: "[ ] 1.2 ", "T001 ", "**Task 1.1**: "
    r"^(?:\[[ xX~-]\]\*?\s*)?"
    r"(?:(?:\*\*)?(?:Task\s+)?(?:[A-Z]{1,3}\d+|\d+\.\d+)(?:\.\d+)*(?:\*\*)?[:.)]?\s+)?"
)
_OPEN_BOX = re.compile(r"^(\s*(?:[-*+]|\d+[.)])\s+)\[ \]", re.MULTILINE)


# --------------------------------------------------------------------------- activities


class DeveloperActivities:
    """The developer step's activities, configured per worker.

    Args:
        coding_agents: The coding agents this worker runs, by name
            (``Settings.coding_agents``; a bare argv gets no extra variables). Nothing
            else ever runs.
        target_roots: Folders a working directory must lie in (empty: anywhere but ``/``).
        temporal_address: Where a coding agent reaches Temporal (the worker's own
            cluster); empty: the address the worker's environment names.
        environ: Where the agents' declared variables come from (default: the worker
            process's environment, read at each run).
    """

    def __init__(
        self,
        coding_agents: Mapping[str, CodingAgent | Sequence[str]] | None = None,
        *,
        target_roots: Sequence[str] = (),
        temporal_address: str = "",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.coding_agents = {
            name: agent if isinstance(agent, CodingAgent) else CodingAgent(command=list(agent))
            for name, agent in (coding_agents or {}).items()
        }
        self.target_roots = list(target_roots)
        self.temporal_address = temporal_address
        self._environ = environ

    @classmethod
    def from_settings(
        cls, settings: Settings, *, temporal_address: str = ""
    ) -> DeveloperActivities:
        """The activities of a worker built from ``settings``."""
        return cls(
            settings.coding_agents,
            target_roots=settings.target_roots,
            temporal_address=temporal_address,
        )

    @property
    def activities(self) -> list[Callable[..., Any]]:
        """Both activities, to register on a worker."""
        return [self.write_dev_spec, self.run_coding_agent]

    @activity.defn(name="write_dev_spec")
    def write_dev_spec(self, req: DevSpecRequest) -> DevSpec:
        """Write the developer's spec (tasks.md + README.md) into the workspace.

        Idempotent: the same request writes the same bytes (a retried activity is harmless).

        Returns:
            The tasks.md path and what the tasks parser finds in it.

        Raises:
            ApplicationError: Non-retryable, type ``developer_invalid``: the working
                directory is not a folder or is outside the worker's target roots, a
                folder under ``.phasegate/`` is a symlink or a file, or an output kept
                by reference is not the regular file the orchestration recorded.
        """
        root = self._root(req.working_dir)
        parts = orchestration_parts(req.orchestration_id, f"dev-{req.attempt}")
        plan = req.plan
        if plan is None and req.plan_ref:
            plan = PlanOutput.model_validate(_recorded(req.plan_ref, req.plan_sha256, root, "plan"))
        comments = req.review_comments
        if req.review_ref:  # the whole review: the copy in history was shortened
            review = _recorded(req.review_ref, req.review_sha256, root, "review")
            comments = [str(c) for c in review.get("comments", [])]
        text, from_plan = dev_tasks_md(req.issue, plan, comments)
        tasks_md = root.joinpath(*parts, "tasks.md")
        spec = parse_tasks_md(text, source=str(tasks_md))  # dev_tasks_md checked it
        try:
            with WorkspaceFolder(root, parts) as folder:
                folder.write("README.md", _readme(req).encode("utf-8"))
                folder.write("tasks.md", text.encode("utf-8"))
            with WorkspaceFolder(root, SPEC_FOLDER) as top:
                if not top.exists(".gitignore"):  # orchestration files: keep git quiet
                    top.write(
                        ".gitignore", b"# phasegate orchestration specs (not project files)\n*\n"
                    )
        except WorkspaceRefused as exc:
            raise _invalid(exc.message, exc.hint) from None
        return DevSpec(
            spec_path=str(tasks_md),
            phases=len(spec.phases),
            tasks=sum(len(p.tasks) for p in spec.phases),
            from_plan=from_plan,
        )

    @activity.defn(name="run_coding_agent")
    def run_coding_agent(self, req: CodingAgentRequest) -> CodingAgentRun:
        """Run the coding agent ``req.agent`` names in the workspace until it exits, times
        out or is cancelled (then its whole process group is killed).

        Returns:
            Exit code, output tail and duration. A timeout is a result (``timed_out``).

        Raises:
            ApplicationError: Non-retryable, type ``developer_invalid``: the worker does
                not list the agent, the working directory is not a folder or is outside
                the worker's target roots, the command cannot start (not found, not
                executable).
        """
        found = resolve(self.coding_agents, req.agent)
        if found is None:
            names = ", ".join(sorted(self.coding_agents)) or "none"
            raise _invalid(
                f"the coding agent {req.agent[:80]!r} is not one this worker runs (it runs: "
                f"{names})",
                "name one of them in the profile's developer.agent; the worker's "
                "PHASEGATE_DEVELOPER_COMMANDS lists them",
            )
        name, agent = found
        wd = self._root(req.working_dir)
        env = coding_agent_env(
            os.environ if self._environ is None else self._environ,
            declared=agent.env,
            session_id=req.session_id,
            temporal_address=self.temporal_address or load_settings(os.environ).temporal_address,
            namespace=activity.info().namespace if activity.in_activity() else "default",
            task_queue=req.task_queue,
        )
        argv = fill_command(isolated(agent.command), prompt=req.prompt, session_id=req.session_id)
        started = time.monotonic()
        try:
            output, code, timed_out = run_process(argv, wd, env, req.timeout_minutes * 60)
        except CheckFailed as exc:
            raise _invalid(
                f"the coding agent {name!r} cannot start: {exc}",
                f"fix its command ({agent.command[0]}) in the worker's "
                "PHASEGATE_DEVELOPER_COMMANDS",
            ) from None
        secrets = {k: v for k, v in env.items() if is_secret_name(k) and len(v) >= 4}
        for var in SESSION_VARS:
            secrets.pop(var, None)  # the session id and address are no secret to the reader
        return CodingAgentRun(
            exit_code=code,
            output_tail=tail(redact(output, secrets), OUTPUT_TAIL_BYTES),
            seconds=round(time.monotonic() - started, 2),
            timed_out=timed_out,
        )

    def _root(self, working_dir: str) -> Path:
        """The working directory, re-checked: the caller may be any workflow (level 2)."""
        try:
            return checked_root(working_dir, self.target_roots)
        except WorkspaceRefused as exc:
            raise _invalid(exc.message, exc.hint) from None


# --------------------------------------------------------------------------- the spec


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
        out.append(
            "".join(
                f"- [x]{'*' if t.optional else ''} {t.id} {_one_line(t.name) or t.id}\n"
                for t in phase.tasks
            )
        )
        if phase.validation_gate:
            gate = "".join(f"- [ ] {_one_line(g)}\n" for g in phase.validation_gate)
            out.append(f"**Validation Gate:**\n\n{gate}")
    return "\n".join(out)


def _one_line(text: str) -> str:
    """A task's text: one line, no heading or list markers, at most 300 characters."""
    line = " ".join(text.split()).lstrip("#>*-+ ")
    return line[:_MAX_TASK_CHARS].rstrip()


def _recorded(ref: str, sha256: str | None, root: Path, what: str) -> dict[str, Any]:
    """An output kept as a file by reference (``store_output``), exactly as the
    orchestration recorded it: read through the bounded reader (a regular file inside
    the working directory, no symlink, no FIFO or device, at most 4 MiB, never
    blocking), and anyone with a shell in the workspace can edit it, so its digest must
    be the one history holds."""
    path = root / ref
    try:
        raw = read_bytes(
            path, limit=_REF_LIMIT, what=f"{what} file", roots=[root], follow_symlinks=False
        )
        data = json.loads(raw)
    except FileNotFoundError:
        raise _invalid(f"the {what} file {path} does not exist", _PLAN_HINT) from None
    except DefinitionError as err:
        raise _invalid(f"{err.message}: {path}", _PLAN_HINT) from None
    except ValueError as err:
        raise _invalid(f"the {what} file {path} is not JSON ({err})", _PLAN_HINT) from None
    if not isinstance(data, dict) or sha256 is None or digest(data) != sha256:
        raise _invalid(
            f"the {what} file {path} changed since it was written (its digest is not the one "
            "the orchestration recorded)",
            _PLAN_HINT,
        )
    return data


_PLAN_HINT = "ask for a replan (phasegate orchestrate replan ID --reason R --as NAME)"


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
        parts.append(
            "## Review comments\n\n"
            + "".join(
                f"- {c.strip()[:_MAX_COMMENT_CHARS]}\n" for c in req.review_comments if c.strip()
            )
        )
    parts.append("## Tasks\n\nSee tasks.md next to this file; a gated session runs it.\n")
    return "\n".join(parts)


def _invalid(message: str, hint: str) -> ApplicationError:
    return ApplicationError(
        f"{message} ({hint})",
        {"message": message, "hint": hint},
        type="developer_invalid",
        non_retryable=True,
    )
