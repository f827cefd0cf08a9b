"""``phasegate orchestrate`` and ``phasegate plan show``: orchestrations from the CLI.

- ``orchestrate ISSUE.md [--profile P] [--workdir DIR] [--id ID] [--json] [--no-wait]``
  has the worker check the profile (a profile it cannot run starts nothing: exit 1
  with every problem), then starts an orchestration and follows it: the plan, each
  step starting and finishing, gates waiting for a person (with the exact command
  that decides them), the developer's gated sessions (with ``phasegate phase
  SESSION``, the spec, and in mcp mode the command that prints the agent's prompt),
  sessions a replan replaced, replans. Exit 0 completed, 1 failed (the reason on
  stderr), 3 with ``--no-wait`` when it waits on something outside it: a person (a
  gate, or a developer session's phase awaiting approval) or, in developer mode mcp,
  the coding agent that drives the session (``waiting_on`` in ``--json``).
- ``orchestrate watch ID`` follows one already started (the same output and exits).
- ``orchestrate prompt ID`` prints what the open developer session's coding agent is
  told (to hand an outside agent: ``claude -p "$(phasegate orchestrate prompt ID)"``).
- ``orchestrate approve ID --as NAME [--reject] [--comment C]`` decides the open gate,
  signed with your key NAME when you hold it (as ``phasegate approve``).
- ``orchestrate replan ID --reason R [--as NAME]`` asks the planner for a new plan.
- ``plan show ID`` prints the plan with the current step marked, outputs, usage,
  the last decision and the history's tail.

Progress goes to stdout, or to stderr with ``--json`` (stdout is then one JSON
document: the ``state`` query's answer plus ``history``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from phasegate.client import _session_text as session_text
from phasegate.client.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    JSON,
    Ctx,
    Parser,
    echo,
    echo_err,
    remote,
    signer,
    web_ui_hint,
)
from phasegate.client.cli._orchestrate_render import (
    entry_line,
    gate_lines,
    render_plan,
    session_lines,
    sessions_of,
    usage_line,
)
from phasegate.client.cli._progress import printer_for, wait_with_progress
from phasegate.client.cli._render import one_line, table, terminal_safe, to_json
from phasegate.domain.errors import PhasegateError, SessionError

if TYPE_CHECKING:
    from phasegate.client.api import PhasegateClient
    from phasegate.client.orchestrations import OrchestrationClient
    from phasegate.domain.orchestration.messages import (
        DeveloperSession,
        HistoryEntry,
        OrchestrationView,
    )
    from phasegate.domain.settings import Settings

__all__ = ["EXIT_WAITING", "default_subcommand", "register"]

EXIT_WAITING = 3
POLL_SECONDS = 0.5
HISTORY_TAIL = 10
_SUBCOMMANDS = ("run", "watch", "approve", "replan", "list", "prompt", "-h", "--help")
_GLOBAL_VALUED = ("--address", "--namespace", "--task-queue")
_FINISHED = ("completed", "failed")
_CHILD_WAITING = ("awaiting_approval", "approval_overdue")
_CHECK_NOTICE_SECONDS = 3.0  # then say the CLI waits for a worker to check the profile


# ---------------------------------------------------------------- parser


def default_subcommand(argv: Sequence[str]) -> list[str]:
    """``orchestrate ISSUE.md ...`` is ``orchestrate run ISSUE.md ...``."""
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _GLOBAL_VALUED:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        if arg == "orchestrate" and (i + 1 == len(args) or args[i + 1] not in _SUBCOMMANDS):
            args.insert(i + 1, "run")
        return args
    return args


def register(sub: Any) -> None:
    """Add ``orchestrate`` (run, watch, approve, replan) and ``plan show`` to ``sub``."""
    o = sub.add_parser(
        "orchestrate",
        help="work an issue with planned agents (ISSUE.md, or: watch, approve, replan)",
        description="`phasegate orchestrate ISSUE.md` starts an orchestration and follows it.",
    )
    osub = o.add_subparsers(
        dest="orchestrate_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    s = osub.add_parser("run", parents=[JSON], help="(default) start an orchestration of ISSUE.md")
    s.add_argument("issue", metavar="ISSUE.md", help="the issue: `# Title`, `Labels: a, b`, body")
    s.add_argument(
        "--profile",
        metavar="P",
        help="profile file (YAML or JSON) or a shipped profile: demo, default (the default)",
    )
    s.add_argument("--workdir", metavar="DIR", help="project folder (default: the profile's, or .)")
    s.add_argument("--id", help="orchestration id (default orch-<issue id>-<random>)")
    _follow_options(s)
    s.set_defaults(func=_remote(run))
    s = osub.add_parser("watch", parents=[JSON], help="follow an orchestration")
    s.add_argument("orchestration_id", metavar="ID")
    _follow_options(s)
    s.set_defaults(func=_remote(watch))
    s = osub.add_parser("approve", parents=[JSON], help="approve (or --reject) the open gate")
    s.add_argument("orchestration_id", metavar="ID")
    s.add_argument(
        "--as",
        dest="as_name",
        metavar="NAME",
        help="approver (default $PHASEGATE_APPROVER or your user name); signed with your "
        "key NAME when you hold it",
    )
    s.add_argument("--reject", action="store_true", help="reject: the orchestration fails")
    s.add_argument("--comment", default="", help="why (required with --reject)")
    s.add_argument(
        "--gate", type=int, metavar="N", help="the gate you mean (default: the open one)"
    )
    s.set_defaults(func=remote(decide))
    s = osub.add_parser("list", parents=[JSON], help="orchestrations on this task queue")
    s.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (newest first)")
    s.set_defaults(func=remote(orchestrate_list))
    s = osub.add_parser(
        "prompt",
        parents=[JSON],
        help="what the open developer session's coding agent is told (--agent: an LLM agent)",
    )
    s.add_argument("orchestration_id", metavar="ID")
    s.add_argument(
        "--agent",
        metavar="KEY",
        help="an LLM step's prompt instead: its output key (analyst_0, reviewer_1...) or "
        "planner, as its model request recorded it in the current run",
    )
    s.set_defaults(func=remote(prompt))
    s = osub.add_parser("replan", parents=[JSON], help="ask the planner for a new plan")
    s.add_argument("orchestration_id", metavar="ID")
    s.add_argument("--reason", required=True, help="what the new plan must take into account")
    s.add_argument("--as", dest="as_name", metavar="NAME", help="who asks (as for approve)")
    s.set_defaults(func=remote(replan))

    plan = sub.add_parser("plan", help="orchestration plans")
    psub = plan.add_subparsers(
        dest="plan_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    s = psub.add_parser("show", parents=[JSON], help="plan, outputs, usage and history")
    s.add_argument("orchestration_id", metavar="ID")
    s.add_argument("--history", type=int, default=HISTORY_TAIL, metavar="N", help="entries shown")
    s.set_defaults(func=remote(plan_show))


def _follow_options(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--no-wait",
        action="store_true",
        help="stop when it waits on something outside it (exit 3): a person's decision, or "
        "(developer mode mcp) the coding agent that drives the developer's session",
    )


def _remote(handler: Any) -> Any:
    """:func:`remote` plus a Ctrl-C that says the orchestration goes on."""
    inner = remote(handler)

    def run_it(args: argparse.Namespace, settings: Settings) -> int:
        try:
            return inner(args, settings)
        except KeyboardInterrupt:
            oid = getattr(args, "started_id", None) or getattr(args, "orchestration_id", None)
            if oid:
                echo_err(
                    f"stopped following; orchestration {oid} goes on "
                    f"(`phasegate orchestrate watch {oid}` follows it again)"
                )
            return 130

    return run_it


# ---------------------------------------------------------------- handlers


def _clients(pg: PhasegateClient) -> OrchestrationClient:
    from phasegate.client.orchestrations import OrchestrationClient

    return OrchestrationClient(pg.temporal, pg.task_queue)


async def run(ctx: Ctx) -> int:
    from phasegate.client.cli._issue_files import PROFILES_DIR, load_profile, read_issue

    a = ctx.args
    issue = read_issue(a.issue)  # file errors need no server
    profile, source = load_profile(a.profile, workdir=a.workdir)
    pg = await ctx.client()
    oc = _clients(pg)
    starting = asyncio.ensure_future(oc.start(issue, profile, orchestration_id=a.id))
    done, _ = await asyncio.wait([starting], timeout=_CHECK_NOTICE_SECONDS)
    if not done:  # the worker checks the profile first: is there one?
        echo_err(
            f"waiting for a phasegate worker on task queue {ctx.settings.task_queue!r} to "
            "check the profile (`phasegate dev` or `phasegate worker` runs one)"
        )
    oid = await starting
    a.started_id = oid
    out = sys.stderr if a.json else sys.stdout
    url = ctx.web_ui(oid) or web_ui_hint(ctx.settings)
    shipped = source.parent == PROFILES_DIR
    where = f"shipped library/profiles/{source.name}" if shipped else str(source)
    print(
        terminal_safe(
            f"orchestration {oid}: issue {issue.id}: {one_line(issue.title)}\n"
            f"profile {profile.name} ({where}); working in {profile.working_dir}\nweb UI: {url}"
        ),
        file=out,
        flush=True,
    )
    return await _Follower(ctx, pg, oc, oid, out).run()


async def orchestrate_list(ctx: Ctx) -> int:
    rows = await _clients(await ctx.client()).list_orchestrations(limit=ctx.args.limit)
    if ctx.args.json:
        echo(to_json(rows))
        return EXIT_OK
    if not rows:
        echo(f"no orchestrations on task queue {ctx.settings.task_queue!r}")
        return EXIT_OK
    cells = [
        (
            r.session_id,
            r.status or r.execution_status,
            "-" if r.phase is None else str(r.phase),
            r.execution_status,
            r.started_at.astimezone().strftime("%Y-%m-%d %H:%M") if r.started_at else "-",
        )
        for r in rows
    ]
    echo(table(("ID", "STATUS", "STEP", "TEMPORAL", "STARTED"), cells))
    return EXIT_OK


async def prompt(ctx: Ctx) -> int:
    oc = _clients(await ctx.client())
    oid = ctx.args.orchestration_id
    if ctx.args.agent:
        return await _agent_prompt(ctx, oc, oid, ctx.args.agent)
    got = await oc.developer_prompt(oid)
    if not got.session_id:
        view = await oc.state(oid)
        raise PhasegateError(
            f"orchestration {oid} has no developer session open (it is {view.status})",
            hint=f"a developer step's session has a prompt while the step waits on it; "
            f"`phasegate plan show {oid}` shows where the orchestration is",
        )
    if not got.prompt:
        raise PhasegateError(
            f"developer session {got.session_id} has no prompt recorded: its run started "
            "before phasegate rendered one in developer mode mcp",
            hint=f"its spec is {got.spec_path}; `phasegate phase {got.session_id}` shows "
            "its current phase",
        )
    echo(to_json(got) if ctx.args.json else got.prompt)
    return EXIT_OK


async def _agent_prompt(ctx: Ctx, oc: OrchestrationClient, oid: str, key: str) -> int:
    """An LLM agent's instructions and user message, as its model request recorded them."""
    prompts = await oc.agent_prompts(oid)
    got = prompts.get(key)
    if got is None:
        recorded = ", ".join(prompts) or "none yet"
        raise PhasegateError(
            f"orchestration {oid} has no prompt recorded for {key!r} in its current run "
            f"(recorded: {recorded})",
            where="--agent",
            hint=f"name an LLM step's output key or planner; `phasegate plan show {oid}` lists "
            "the steps (a run recorded before prompts were kept has none)",
        )
    if ctx.args.json:
        echo(to_json(got))
    else:
        echo(f"{got.instructions.rstrip()}\n\n---\n\n{got.prompt.rstrip()}")
    return EXIT_OK


async def watch(ctx: Ctx) -> int:
    pg = await ctx.client()
    out = sys.stderr if ctx.args.json else sys.stdout
    return await _Follower(ctx, pg, _clients(pg), ctx.args.orchestration_id, out).run()


async def decide(ctx: Ctx) -> int:
    a = ctx.args
    if a.reject and not a.comment.strip():
        raise PhasegateError(
            "a rejection needs a reason", where="--comment", hint="add --comment WHY"
        )
    name, signed = signer(a.as_name)
    oc = _clients(await ctx.client())
    oid = a.orchestration_id
    before = await oc.state(oid)
    gate = before.awaiting
    if signed and gate is not None:
        echo_err(f"signing gate {gate.gate} ({gate.kind} of {gate.agent}) as {name}")
    view = await oc.decide(
        oid,
        "reject" if a.reject else "approve",
        as_key=name if signed else None,
        approver=name,
        comment=a.comment,
        gate=a.gate,
    )
    verb = "rejected" if a.reject else "approved"
    what = f"gate {gate.gate} ({gate.kind} of {gate.agent})" if gate else "the gate"
    ctx.emit(
        view,
        f"{verb} {what} by {name}{' (signed)' if signed else ''}\n"
        f"orchestration {oid} is {view.status}",
    )
    return EXIT_OK


async def replan(ctx: Ctx) -> int:
    a = ctx.args
    name, signed = signer(a.as_name)
    oc = _clients(await ctx.client())
    view = await oc.request_replan(
        a.orchestration_id, a.reason, as_key=name if signed else None, requested_by=name
    )
    ctx.emit(
        view,
        f"replan requested by {name}{' (signed)' if signed else ''}: the planner plans again "
        f"after the current step (follow it: phasegate orchestrate watch {a.orchestration_id})",
    )
    return EXIT_OK


async def plan_show(ctx: Ctx) -> int:
    pg = await ctx.client()
    oc = _clients(pg)
    oid = ctx.args.orchestration_id
    view = await oc.state(oid)
    history = await oc.history(oid)
    if ctx.args.json:
        echo(_document(view, history))
    else:
        echo(render_plan(view, history, tail=max(ctx.args.history, 0)))
    return EXIT_OK


def _document(
    view: OrchestrationView, history: list[HistoryEntry], waiting_on: str | None = None
) -> str:
    """The ``--json`` document: the ``state`` query's answer plus ``history`` (and, when
    ``--no-wait`` stopped, ``waiting_on``: ``person`` or ``coding_agent``)."""
    data = view.model_dump(mode="json")
    data["history"] = [h.model_dump(mode="json") for h in history]
    if waiting_on:
        data["waiting_on"] = waiting_on
    return json.dumps(data, indent=2, ensure_ascii=False)


# ---------------------------------------------------------------- following


class _Follower:
    """Polls an orchestration and prints what changed, until it finishes (or, with
    ``--no-wait``, until it waits on something outside it: a person or a coding agent)."""

    def __init__(
        self, ctx: Ctx, pg: PhasegateClient, oc: OrchestrationClient, oid: str, out: TextIO
    ) -> None:
        self.ctx, self.pg, self.oc, self.oid, self.out = ctx, pg, oc, oid, out
        self.seq = -1
        self.gate: int | None = None
        self.children: set[str] = set()
        self.replaced: set[str] = set()
        self.finished_children: set[str] = set()
        self.child_gates: set[tuple[str, int]] = set()
        self.history: list[HistoryEntry] = []
        self.printer = printer_for(True)

    def say(self, text: str) -> None:
        print(terminal_safe(text), file=self.out, flush=True)

    async def run(self) -> int:
        while True:
            view = await wait_with_progress(
                self.pg, self.oid, self.oc.state(self.oid, timeout=60), printer=self.printer
            )
            await self._news()
            person = self._gate(view)
            waits = await self._developer(view)
            if view.status in _FINISHED:
                return self._finish(view)
            if await self.oc.closed(self.oid):
                # It may have finished after the state above was read: the result wins
                # (a failure raises with its reason; terminated, timed out: no state says so).
                final = await self.oc.result(self.oid)
                if final.status in _FINISHED:
                    with contextlib.suppress(PhasegateError):
                        await self._news()  # the steps it took since the history above
                    return self._finish(final)
                raise PhasegateError(f"orchestration {self.oid} has closed without finishing")
            if (person or waits) and self.ctx.args.no_wait:
                return self._stop(view, "person" if person else waits or "")
            await asyncio.sleep(POLL_SECONDS)

    async def _news(self) -> None:
        """Print the run's history entries not printed yet."""
        self.history = await self.oc.history(self.oid)
        for entry in self.history:
            if entry.seq > self.seq:
                self.seq = entry.seq
                self.say(entry_line(entry))

    def _stop(self, view: OrchestrationView, waiting_on: str) -> int:
        """``--no-wait``: say what the run waits on and what to run next; exit 3."""
        again = f"follow it again with `phasegate orchestrate watch {self.oid}`"
        if waiting_on == "person":
            self.say(f"waiting for a person (--no-wait): {again}")
        else:
            session = next(s for s in sessions_of(view) if s.status == "open")
            self.say(
                f"waiting for a coding agent (developer mode mcp): session {session.session_id} "
                f"waits for its agent's next checkpoint (--no-wait)\n"
                f"  give your agent its prompt: phasegate orchestrate prompt {self.oid}\n"
                f"  then {again}"
            )
        self._emit(view, waiting_on)
        return EXIT_WAITING

    def _gate(self, view: OrchestrationView) -> bool:
        gate = view.awaiting
        if gate is None:
            self.gate = None
            return False
        if gate.gate != self.gate:
            self.gate = gate.gate
            self.say("\n".join(gate_lines(view)))
        return True

    async def _developer(self, view: OrchestrationView) -> str | None:
        """Name each developer session (a replaced one as replaced); what the open one
        waits on: ``person`` (its phase awaits approval, with the command that decides
        it) or, in mcp mode, ``coding_agent``; None when nothing outside the run."""
        from phasegate.domain.errors import SessionNotActive

        waits: str | None = None
        for session in sessions_of(view):
            sid = session.session_id
            if session.status == "replaced":
                if sid not in self.replaced:
                    self.replaced.add(sid)
                    self.say(f"  developer session {sid} was replaced by a replan: {_GONE}")
                continue
            self._announce(session)
            if session.status != "open" or sid in self.finished_children:
                continue
            try:
                status = await self.pg.status(sid)
            except (SessionNotActive, SessionError):
                continue  # still loading its definition
            if status.status in ("completed", "abandoned"):
                self.finished_children.add(sid)
            elif status.status in _CHILD_WAITING:
                waits = "person"
                self._child_gate(sid, status)
            elif status.status == "active" and session.mode == "mcp":
                waits = waits or "coding_agent"
        return waits

    def _child_gate(self, child: str, status: Any) -> None:
        key = (child, status.current_phase)
        if key not in self.child_gates:
            self.child_gates.add(key)
            names = status.awaiting_approval_from
            who = names[0] if len(names) == 1 else "NAME"
            self.say(
                f"  session {child} phase {status.current_phase} "
                f"({one_line(status.current_phase_name)}) waits for approval by "
                f"{session_text.who_approves(names, one_line)}:\n"
                f"    phasegate approve {child} --as {who} --comment 'plan looks right'"
            )

    def _announce(self, session: DeveloperSession) -> None:
        child = session.session_id
        if child in self.children:
            return
        self.children.add(child)
        self.say("\n".join(session_lines(session, self.oid)))

    def _finish(self, view: OrchestrationView) -> int:
        self.say(
            f"{view.status}: {len(view.outputs)} outputs "
            f"({', '.join(o.key for o in view.outputs)}); {usage_line(view.usage)}"
        )
        self._emit(view)
        if view.status == "failed":
            echo_err(
                f"error: orchestration {self.oid} failed: {one_line(view.failure)} "
                f"(hint: `phasegate plan show {self.oid}` shows the plan and history)"
            )
            return EXIT_ERROR
        return EXIT_OK

    def _emit(self, view: OrchestrationView, waiting_on: str | None = None) -> None:
        if self.ctx.args.json:
            echo(_document(view, self.history, waiting_on))


_GONE = "nothing waits on it any more"
