"""``phasegate task list | next | start | done | block | split | show``: work a session's
tasks (docs/tasks.md).

``SESSION`` may be left out in a project whose ``.workflow/`` folder marks an active
session (``phasegate session use SESSION``; found walking up from the current folder);
``--as AGENT`` defaults to ``$PHASEGATE_AGENT``. Every result ends with the exact
command to run next. Exit codes as for ``submit``: 0 done, 1 an error or a refusal
(claimed by someone else, dependencies not complete, ...: the message says which and
what to run), 2 the session recorded the message but the task did not get there
(``done``: a criterion failed; ``next``/``start``: a pre-analysis step failed and the
task is blocked), 3 ``show --phase`` of a phase not reached.

The one-task read of earlier releases, ``phasegate task SESSION PHASE TASK`` (what
phase text names), still works: it is ``task show SESSION TASK --phase PHASE``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from phasegate.client import _task_text as task_text
from phasegate.client.cli._common import (
    EXIT_ERROR,
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    JSON,
    Ctx,
    Parser,
    echo,
    echo_err,
    remote,
)
from phasegate.client.cli._progress import printer_for, wait_with_progress
from phasegate.client.cli._render import render_task, render_violation, to_json
from phasegate.client.cli._task_render import (
    Commands,
    render_block,
    render_board,
    render_claim,
    render_completion,
    render_split,
    render_task_state,
)
from phasegate.domain.errors import PhasegateError

if TYPE_CHECKING:
    from phasegate.client.api import PhasegateClient

__all__ = ["SUBCOMMANDS", "legacy_words", "register", "session_for"]

SUBCOMMANDS = ("list", "next", "start", "done", "block", "split", "show")
AGENT_ENV = "PHASEGATE_AGENT"
_EVIDENCE_FILE_BYTES = 64 * 1024  # read bound; a session takes at most 16 KB as compact JSON
_GLOBAL_VALUED = ("--address", "--namespace", "--task-queue")
T = TypeVar("T")


def legacy_words(argv: Sequence[str]) -> list[str]:
    """``task SESSION PHASE TASK`` (earlier releases' one-task read) is ``task show
    SESSION TASK --phase PHASE``; every other command line is returned as it is."""
    args = list(argv)
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GLOBAL_VALUED else 1
    if i >= len(args) or args[i] != "task":
        return args
    rest = args[i + 1 :]
    words = [w for w in rest if not w.startswith("-")]
    if len(words) == 3 and words[0] not in SUBCOMMANDS and words[1].isdigit():
        flags = [w for w in rest if w.startswith("-")]
        session, phase, task = words
        return [*args[: i + 1], "show", session, task, "--phase", phase, *flags]
    return args


# ---------------------------------------------------------------- parsers


def register(sub: Any) -> None:
    """Add ``phasegate task ...`` to ``sub`` (the ``phasegate`` subparsers)."""
    group = sub.add_parser(
        "task",
        help="work a session's tasks: list, next, start, done, block, split, show",
        description="Claim, complete, block and split a session's tasks (docs/tasks.md). "
        "SESSION defaults to the project's active session (`phasegate session use`).",
    )
    cmds = group.add_subparsers(
        dest="task_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    session = Parser(add_help=False)
    session.add_argument(
        "session_id",
        metavar="SESSION",
        nargs="?",
        help="session id (default: the project's active session, `phasegate session current`)",
    )
    agent = Parser(add_help=False)
    agent.add_argument(
        "--as", dest="agent", metavar="AGENT", help=f"who works (default: ${AGENT_ENV})"
    )
    both = [JSON, session, agent]

    s = cmds.add_parser("list", parents=[JSON, session], help="the tasks, their status and claims")
    which = s.add_mutually_exclusive_group()
    which.add_argument("--phase", type=int, metavar="N", help="default: the current phase")
    which.add_argument("--all", action="store_true", help="every phase reached so far")
    s.add_argument("--offset", type=int, default=0, help="skip this many tasks (a page)")
    s.add_argument("--limit", type=int, default=100, help="tasks a page (default 100)")
    s.set_defaults(func=remote(list_tasks))

    s = cmds.add_parser("next", parents=both, help="claim the next ready task and start it")
    s.set_defaults(func=remote(next_task))

    s = cmds.add_parser("start", parents=both, help="claim a task and start it")
    s.add_argument("task", metavar="ID")
    s.set_defaults(func=remote(start_task))

    s = cmds.add_parser("done", parents=both, help="complete a task: its criteria are checked")
    s.add_argument("task", metavar="ID")
    s.add_argument("--summary", required=True, help="what was done (the summary file)")
    s.add_argument(
        "--evidence-file", metavar="FILE", help="a JSON object to record with it ('-': stdin)"
    )
    s.set_defaults(func=remote(done_task))

    s = cmds.add_parser("block", parents=both, help="mark a task blocked, with the reason")
    s.add_argument("task", metavar="ID")
    s.add_argument("--reason", required=True)
    s.set_defaults(func=remote(block_task))

    s = cmds.add_parser("split", parents=both, help="add a subtask to a top-level task")
    s.add_argument("parent", metavar="PARENT")
    s.add_argument("--title", required=True)
    s.add_argument("--description", default="")
    s.add_argument(
        "--acceptance",
        action="append",
        default=[],
        metavar="TEXT",
        help="an acceptance criterion (repeatable): `path` contains `text`, `path` exists, "
        "`command` exits 0 (a command the session was started with), or prose (a claim)",
    )
    s.add_argument("--depends-on", action="append", default=[], metavar="ID", help="(repeatable)")
    s.set_defaults(func=remote(split_task))

    s = cmds.add_parser("show", parents=[JSON, session], help="one task in full")
    s.add_argument("task", metavar="ID")
    s.add_argument(
        "--phase",
        type=int,
        metavar="N",
        help="the phase's task text instead (ID as written or its 1-based number)",
    )
    s.set_defaults(func=remote(show_task))


# ---------------------------------------------------------------- helpers


def session_for(given: str | None, cwd: Path | None = None) -> str:
    """``given``, else the active session of the project around ``cwd``.

    Raises:
        SessionError: No session given and none marked active (what to run).
    """
    if given:
        return given
    return task_text.session_near(cwd or Path.cwd()).session_id


def _agent(given: str | None) -> str:
    agent = given or os.environ.get(AGENT_ENV, "").strip()
    if not agent:
        raise PhasegateError(
            "who is working on the task?",
            where="--as",
            hint=f"pass --as AGENT (e.g. --as claude-1), or set {AGENT_ENV}",
        )
    return agent


async def _wait(pg: PhasegateClient, session_id: str, work: Awaitable[T]) -> T:
    """``work``, with what the session waits on printed to stderr after a second."""
    return await wait_with_progress(pg, session_id, work, printer=printer_for(True))


def _evidence(file: str | None) -> dict[str, Any]:
    """``--evidence-file``: one JSON object, read here (errors name the flag)."""
    if not file:
        return {}
    import sys

    from phasegate.activities import _safe_read as safe_read

    where = f"--evidence-file {file}"
    hint = 'a JSON object, e.g. {"tests": "12 passed", "files": ["src/app.py"]}'
    try:
        if file == "-":
            data = sys.stdin.buffer.read(_EVIDENCE_FILE_BYTES + 1)
        else:
            data = safe_read.read_bytes(
                Path(file).expanduser(),
                limit=_EVIDENCE_FILE_BYTES,
                what="evidence file",
                hint=hint,
            )
    except FileNotFoundError:
        raise PhasegateError("no such file", where=where, hint=hint) from None
    except PhasegateError as exc:
        raise PhasegateError(exc.message, where=where, hint=exc.hint or hint) from None
    if len(data) > _EVIDENCE_FILE_BYTES:
        raise PhasegateError(f"more than {_EVIDENCE_FILE_BYTES // 1024} KiB", where=where)
    try:
        parsed = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise PhasegateError("binary data, not JSON text", where=where, hint=hint) from None
    except json.JSONDecodeError as exc:
        raise PhasegateError(
            f"invalid JSON: {exc.msg} (column {exc.colno})", where=f"{where}:{exc.lineno}"
        ) from None
    if not isinstance(parsed, dict):
        raise PhasegateError("the evidence must be a JSON object", where=where, hint=hint)
    return parsed


# ---------------------------------------------------------------- handlers


async def list_tasks(ctx: Ctx) -> int:
    a = ctx.args
    sid = session_for(a.session_id)
    pg = await ctx.client()
    phase = -1 if a.all else a.phase
    view = await _wait(pg, sid, pg.tasks(sid, phase=phase, offset=a.offset, limit=a.limit))
    ctx.emit(view, render_board(view, Commands(sid, os.environ.get(AGENT_ENV)), all_phases=a.all))
    return EXIT_OK


async def _claim(ctx: Ctx, task: str | None) -> int:
    a = ctx.args
    agent = _agent(a.agent)
    sid = session_for(a.session_id)
    pg = await ctx.client()
    result = await _wait(pg, sid, pg.start_task(sid, agent, task))
    state = None
    if result.ok:  # what the task asks for: its description and acceptance criteria
        state = (await _wait(pg, sid, pg.tasks(sid, task=result.task.id, limit=1))).task
    if a.json:
        data = result.model_dump(mode="json")
        data["state"] = state.model_dump(mode="json") if state else None
        echo(to_json(data))
    else:
        echo(render_claim(sid, result, state, Commands(sid, agent)))
    return EXIT_OK if result.ok else EXIT_GATE_FAILED


async def next_task(ctx: Ctx) -> int:
    return await _claim(ctx, None)


async def start_task(ctx: Ctx) -> int:
    return await _claim(ctx, ctx.args.task)


async def done_task(ctx: Ctx) -> int:
    a = ctx.args
    agent = _agent(a.agent)
    evidence = _evidence(a.evidence_file)  # file errors need no server
    sid = session_for(a.session_id)
    pg = await ctx.client()
    result = await _wait(pg, sid, pg.complete_task(sid, agent, a.task, a.summary, evidence))
    ctx.emit(result, render_completion(result, Commands(sid, agent)))
    return EXIT_OK if result.ok else EXIT_GATE_FAILED


async def block_task(ctx: Ctx) -> int:
    a = ctx.args
    agent = _agent(a.agent)
    sid = session_for(a.session_id)
    pg = await ctx.client()
    result = await _wait(pg, sid, pg.block_task(sid, agent, a.task, a.reason))
    ctx.emit(result, render_block(result, Commands(sid, agent)))
    return EXIT_OK


async def split_task(ctx: Ctx) -> int:
    a = ctx.args
    agent = _agent(a.agent)
    sid = session_for(a.session_id)
    pg = await ctx.client()
    work = pg.add_subtask(
        sid,
        agent,
        a.parent,
        a.title,
        acceptance=a.acceptance,
        depends_on=a.depends_on,
        description=a.description,
    )
    result = await _wait(pg, sid, work)
    ctx.emit(result, render_split(result, Commands(sid, agent)))
    return EXIT_OK


async def show_task(ctx: Ctx) -> int:
    from phasegate.domain.session.messages import SequenceViolation

    a = ctx.args
    sid = session_for(a.session_id)
    pg = await ctx.client()
    if a.phase is not None:  # the phase's rendered task, as `phasegate task S P T` was
        got = await _wait(pg, sid, pg.task(sid, a.phase, a.task))
        if isinstance(got, SequenceViolation):
            if a.json:
                echo(to_json(got))
            echo_err(f"refused: {render_violation(sid, got)}")
            return EXIT_REFUSED
        ctx.emit(got, render_task(got))
        return EXIT_OK
    # The current phase's lines give the task's live status (a container's is derived)
    # and its subtasks; a task of an earlier phase needs that phase's lines.
    view = await _wait(pg, sid, pg.tasks(sid, task=a.task, limit=1000))
    if view.task is None:  # the board answers an unknown task with an error
        echo_err(f"error: no task {a.task} in session {sid}")
        return EXIT_ERROR
    if view.task.phase != view.current_phase:
        view = await _wait(pg, sid, pg.tasks(sid, phase=view.task.phase, task=a.task, limit=1000))
    assert view.task is not None
    line = next((t for t in view.lines if t.id == a.task), None)
    status = line.status if line is not None else view.task.status
    subtasks = [t for t in view.lines if t.parent == a.task]
    ctx.emit(view.task, render_task_state(view.task, status, subtasks))
    return EXIT_OK
