"""``phasegate start | status | phase | submit | list | sessions prune | watch``:
start a session and follow it through its phases (all need Temporal). A phase's tasks:
``client/cli/tasks.py`` (``phasegate task ...``)."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from typing import Any

from phasegate.client.cli._common import (
    EXIT_ERROR,
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    JSON,
    SESSION,
    Ctx,
    Parser,
    abspath,
    approver_key,
    echo,
    echo_err,
    remote,
    web_ui_hint,
)
from phasegate.client.cli._evidence import key_value, read_evidence
from phasegate.client.cli._progress import (
    ProgressPrinter,
    printer_for,
    progress_lines,
    wait_with_progress,
)
from phasegate.client.cli._render import (
    render_checkpoint,
    render_listings,
    render_other_runs,
    render_phase,
    render_status,
    render_violation,
    to_json,
)
from phasegate.domain.errors import PhasegateError

__all__ = ["register"]

_FINISHED = ("completed", "abandoned")


def register(sub: Any) -> None:
    """Add the session commands to ``sub`` (the ``phasegate`` subparsers)."""
    _start_parser(sub)
    sub.add_parser("status", parents=[JSON, SESSION], help="progress of a session").set_defaults(
        func=remote(status)
    )
    s = sub.add_parser("phase", parents=[JSON, SESSION], help="a phase's content, tasks and gate")
    s.add_argument("phase", metavar="N", type=int, nargs="?", help="default: the current phase")
    s.set_defaults(func=remote(phase))
    _submit_parser(sub)
    s = sub.add_parser("list", parents=[JSON], help="sessions from Temporal visibility")
    s.add_argument("--status", help="e.g. active, awaiting_approval, completed")
    s.add_argument("--workflow", help="workflow type")
    s.add_argument("--limit", type=int, default=50)
    s.add_argument(
        "--failed",
        action="store_true",
        help="only sessions that failed to start, with why (remove them: phasegate sessions prune)",
    )
    s.set_defaults(func=remote(list_sessions))
    sessions = sub.add_parser("sessions", help="housekeeping of sessions")
    sessions_sub = sessions.add_subparsers(
        dest="sessions_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    s = sessions_sub.add_parser(
        "prune",
        parents=[JSON],
        help="delete sessions that failed to start (lists them without --yes)",
    )
    s.add_argument("--yes", action="store_true", help="delete them (no prompt)")
    s.add_argument("--workflow", help="only sessions of this workflow type")
    s.add_argument(
        "--older-than", metavar="AGE", help="only those started before AGE ago (30m, 12h, 7d)"
    )
    s.add_argument("--limit", type=int, default=500, help="most to delete at once (default 500)")
    s.set_defaults(func=remote(sessions_prune))
    s = sub.add_parser("watch", parents=[JSON, SESSION], help="follow a session's progress")
    s.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    s.add_argument("--once", action="store_true", help="print the status once and exit")
    s.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="stop following after SECONDS (exit 1; the session goes on)",
    )
    s.add_argument(
        "--no-progress",
        action="store_true",
        help="print no progress lines (no worker polling, verify running), only the status",
    )
    s.set_defaults(func=remote(watch))


def _start_parser(sub: Any) -> None:
    s = sub.add_parser("start", parents=[JSON], help="start a session")
    s.add_argument("workflow_type", metavar="WORKFLOW_TYPE")
    s.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        help="project directory (default: the current directory)",
    )
    s.add_argument("--spec", help="dynamic workflows: tasks.md or its directory")
    s.add_argument(
        "--test-command",
        metavar="COMMAND",
        help="the project's test command, e.g. 'python -m pytest -q' (no shell); default: "
        "the project's phasegate.toml, PHASEGATE_TEST_COMMAND, else found in the project. "
        "Listed in phase 0: the lead approves it",
    )
    s.add_argument("--id", help="session id (default <workflow_type>-<random>)")
    s.add_argument(
        "--approver",
        action="append",
        default=[],
        metavar="NAME",
        help="narrow who may approve (repeatable): only names the gates also allow",
    )
    s.add_argument(
        "--approver-key",
        action="append",
        default=[],
        metavar="NAME[=PUBKEY]",
        help="require signed decisions by these keys (repeatable): keys the worker names, "
        "or any key where the worker accepts unsigned approvals",
    )
    s.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="session option (repeatable; JSON values)",
    )
    s.add_argument(
        "--no-prefetch",
        action="store_true",
        help="render each next phase only when it is reached (sealed deployments: no future "
        "phase in history; advances are slower)",
    )
    s.add_argument(
        "--task-files",
        action="store_true",
        help="write the task board to .workflow/WFS-<slug>/ in TARGET as the session goes "
        "(views, never read back; on by default for a .workflow task folder as --spec)",
    )
    s.add_argument("--no-wait", action="store_true", help="do not wait for the definition")
    s.add_argument(
        "--no-check",
        action="store_true",
        help="skip the local checks of TARGET, --spec and WORKFLOW_TYPE (when the worker "
        "sees other paths or another library than this machine)",
    )
    s.set_defaults(func=remote(start))


def _submit_parser(sub: Any) -> None:
    s = sub.add_parser("submit", parents=[JSON, SESSION], help="submit checkpoint evidence")
    s.add_argument("--phase", type=int, help="default: the current phase")
    s.add_argument("--file", help="evidence JSON object ('-' reads stdin)")
    s.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="evidence field (repeatable; JSON values, else strings)",
    )
    s.add_argument("--id", help="submission id: a repeat returns the first result")
    s.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="give up waiting after SECONDS (default: wait for the answer)",
    )
    s.add_argument(
        "--no-progress",
        action="store_true",
        help="print no progress on stderr (no worker polling, verify checks running)",
    )
    s.set_defaults(func=remote(submit))


# ---------------------------------------------------------------- handlers


async def start(ctx: Ctx) -> int:
    from pydantic import ValidationError

    from phasegate.domain.session.messages import SessionOptions

    a = ctx.args
    opts = dict(key_value(item, "--option") for item in a.option)
    if a.spec:
        opts["spec_path"] = abspath(a.spec)
    if a.approver:
        opts["approvers"] = a.approver
    if a.approver_key:
        opts["approver_keys"] = [approver_key(item) for item in a.approver_key]
    if a.no_prefetch:
        opts["prefetch"] = False
    if a.test_command:
        opts["test_command"] = a.test_command
    if a.task_files:
        opts["task_files"] = True
    opts.setdefault("interface", "cli")  # phase text names the CLI's commands
    try:
        options = SessionOptions.model_validate(opts)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise PhasegateError(first["msg"], where=f"--option {loc}") from None
    target = abspath(a.target or ".")
    if not a.no_check:  # a typo must not leave a failed workflow behind
        from phasegate.client.cli._start_checks import check_start

        check_start(
            a.workflow_type,
            target,
            opts,
            library_paths=ctx.settings.library_paths,
            spec_roots=ctx.settings.spec_roots,
        )
    pg = await ctx.client()
    sid = a.id or f"{a.workflow_type}-{uuid.uuid4().hex[:10]}"
    await pg.start(a.workflow_type, target, options=options, session_id=sid, wait=False)
    view = None
    if not a.no_wait:  # says so when no worker polls, instead of a silent minute
        printer = printer_for(True)
        view = await wait_with_progress(pg, sid, pg.wait_started(sid), printer=printer)
    url = ctx.web_ui(sid)  # the UI of the server used; None when unknown
    if a.json:
        data: dict[str, Any] = {"session_id": sid, "status": view.status if view else "starting"}
        if view:
            data.update(
                current_phase=view.current_phase,
                current_phase_name=view.current_phase_name,
                total_phases=view.total_phases,
            )
        data["ui_url"] = url
        echo(json.dumps(data, indent=2))
        return EXIT_OK
    lines = [f"session {sid}"]
    if view:
        lines.append(
            f"{view.name or view.workflow_type}: {view.total_phases} phases; "
            f"phase {view.current_phase}: {view.current_phase_name}"
        )
        lines.append(f"next: phasegate phase {sid}")
    else:
        lines.append(f"starting (check with: phasegate status {sid})")
    lines.append(f"web UI: {url or web_ui_hint(ctx.settings)}")
    echo("\n".join(lines))
    return EXIT_OK


async def status(ctx: Ctx) -> int:
    pg = await ctx.client()
    sid = ctx.args.session_id
    view = await wait_with_progress(pg, sid, pg.status(sid), printer=printer_for(True))
    # The run chain and any other run under the id come from the server's records.
    view = view.model_copy(update={"run_chain": await pg.run_chain(sid)})
    others = await pg.other_runs(sid, view.run_chain)
    text = "\n".join([render_status(ctx.args.session_id, view), *render_other_runs(others)])
    ctx.emit(view, text)
    return EXIT_OK


async def phase(ctx: Ctx) -> int:
    pg = await ctx.client()
    view = await pg.phase(ctx.args.session_id, ctx.args.phase)
    return _show_or_refuse(ctx, view, render_phase)


def _show_or_refuse(ctx: Ctx, view: Any, show: Callable[[Any], str]) -> int:
    """Print a phase/task view, or the refusal a future one gets (exit 3)."""
    from phasegate.domain.session.messages import SequenceViolation

    if isinstance(view, SequenceViolation):
        if ctx.args.json:
            echo(to_json(view))
        echo_err(f"refused: {render_violation(ctx.args.session_id, view)}")
        return EXIT_REFUSED
    ctx.emit(view, show(view))
    return EXIT_OK


async def submit(ctx: Ctx) -> int:
    a = ctx.args
    evidence = read_evidence(a.file, a.set, a.session_id)  # file errors need no server
    if a.timeout is not None and a.timeout <= 0:
        raise PhasegateError("must be a number of seconds above 0", where="--timeout")
    pg = await ctx.client()
    # With --timeout the submission gets an id now, so the error can say how to fetch
    # its result later (a worker may still take it).
    sub_id = a.id or (uuid.uuid4().hex if a.timeout is not None else None)

    known: dict[str, int] = {} if a.phase is None else {"phase": a.phase}

    async def run() -> tuple[int, Any]:
        if "phase" not in known:
            known["phase"] = (await pg.status(a.session_id)).current_phase
        phase = known["phase"]
        return phase, await pg.submit(a.session_id, phase, evidence, submission_id=sub_id)

    again = f"`phasegate submit {a.session_id} ... --id {sub_id}`" if sub_id else "submit again"
    phase, result = await wait_with_progress(
        pg,
        a.session_id,
        run(),
        phase=lambda: known.get("phase"),
        printer=printer_for(not a.no_progress),
        timeout=a.timeout,
        timeout_hint=f"a worker may still take this submission: {again} returns its result; "
        f"`phasegate status {a.session_id}` shows where the session is",
    )
    ctx.emit(result, render_checkpoint(a.session_id, phase, result))
    return EXIT_OK if result.passed else EXIT_GATE_FAILED


async def list_sessions(ctx: Ctx) -> int:
    a = ctx.args
    pg = await ctx.client()
    if a.failed:
        rows = await pg.failed_starts(workflow_type=a.workflow, limit=a.limit)
    else:
        rows = await pg.list(status=a.status, workflow_type=a.workflow, limit=a.limit)
    ctx.emit(rows, render_listings(rows, failed=a.failed))
    return EXIT_OK


def _dumps(rows: list[Any]) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") for r in rows]


async def sessions_prune(ctx: Ctx) -> int:
    """``phasegate sessions prune``: delete sessions that failed to start (with --yes)."""
    from phasegate.client._executions import parse_age

    a = ctx.args
    older = parse_age(a.older_than) if a.older_than else None
    pg = await ctx.client()
    rows = await pg.failed_starts(workflow_type=a.workflow, older_than=older, limit=a.limit)
    if not a.yes:
        if a.json:
            echo(to_json({"deleted": [], "would_delete": _dumps(rows)}))
        elif rows:
            echo(render_listings(rows, failed=True))
            echo(f"would delete {len(rows)} failed start(s); run again with --yes to delete")
        else:
            echo("no sessions that failed to start")
        return EXIT_OK
    for row in rows:
        await pg.delete(row)
    if a.json:
        echo(to_json({"deleted": _dumps(rows), "would_delete": []}))
    else:
        lines = [f"deleted {r.session_id} (run {r.run_id})" for r in rows]
        lines.append(
            f"deleted {len(rows)} failed start(s); Temporal removes them in the background "
            "(within about a minute)"
        )
        echo("\n".join(lines))
    return EXIT_OK


async def watch(ctx: Ctx) -> int:
    import time
    from datetime import datetime

    from phasegate.domain.errors import SessionNotActive

    a = ctx.args
    if a.timeout is not None and not a.timeout > 0:
        raise PhasegateError("must be a number of seconds above 0", where="--timeout")
    deadline = None if a.timeout is None else time.monotonic() + a.timeout
    pg = await ctx.client()
    # Progress (no worker, verify checks running) goes with the text; with --json,
    # stdout is one status object per line, so progress goes to stderr.
    printer = ProgressPrinter(sys.stderr if a.json else sys.stdout)
    last: dict[str, Any] | None = None
    phase: int | None = None
    while True:
        if deadline is not None and last is not None and time.monotonic() > deadline:
            printer.close()  # (after the status was shown once)
            echo_err(
                f"watch: stopped after {a.timeout:g} s (--timeout); the session goes on: "
                f"`phasegate watch {a.session_id}` follows it again"
            )
            return EXIT_ERROR
        lines = [] if a.no_progress else await progress_lines(pg, a.session_id, phase)
        if lines and lines[0].startswith("no worker is polling"):
            printer.show(lines)  # a status query would only wait for a worker
            await asyncio.sleep(max(a.interval, 1.0))
            continue
        try:
            view = await pg.status(a.session_id)
        except SessionNotActive as exc:
            if "loading its definition" not in exc.message:
                raise
            printer.show(lines or [f"session {a.session_id} is loading its definition"])
            await asyncio.sleep(a.interval)  # started with --no-wait: not loaded yet
            continue
        phase = view.current_phase
        dump = view.model_dump(mode="json")
        if dump != last:
            printer.close()
            if a.json:
                echo(json.dumps(dump))  # one object per line: easy to stream
            else:
                stamp = "" if a.once else f"[{datetime.now():%H:%M:%S}] "
                sep = "\n" if last is not None else ""
                echo(f"{sep}{stamp}{render_status(a.session_id, view)}")
            last = dump
        if a.once or view.status in _FINISHED:
            return EXIT_OK
        printer.show(lines)  # the phase of verify lines is the one before this status
        await asyncio.sleep(a.interval)
