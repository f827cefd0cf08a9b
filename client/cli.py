"""The ``phasegate`` command line: run the dev server and worker, drive sessions.

Read commands print compact text by default and the message model's JSON with
``--json``. Exit codes are meant for scripts:

====  ==========================================================
0     success (``submit``: the checkpoint passed)
1     an error; one line ``error: ...`` on stderr, never a traceback
2     ``submit``: the gate refused the evidence (problems printed)
3     ``phase``/``task``: the phase is in the future (refused);
      ``orchestrate --no-wait``: the orchestration waits for a person
====  ==========================================================

Global options (before the subcommand) override the environment:
``--address`` (TEMPORAL_ADDRESS), ``--namespace`` (TEMPORAL_NAMESPACE),
``--task-queue`` (PHASEGATE_TASK_QUEUE).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from phasegate.client import _cli_commands as cmd
from phasegate.client import _cli_dev as dev
from phasegate.client import _cli_extra as extra
from phasegate.client import _cli_orchestrate as orchestrate
from phasegate.client._cli_commands import EXIT_ERROR, EXIT_GATE_FAILED, EXIT_OK, EXIT_REFUSED
from phasegate.domain.errors import PhasegateError

if TYPE_CHECKING:
    from phasegate.domain.settings import Settings

__all__ = ["EXIT_ERROR", "EXIT_GATE_FAILED", "EXIT_OK", "EXIT_REFUSED", "build_parser", "main"]


@contextlib.contextmanager
def _env_overrides(args: argparse.Namespace) -> Iterator[None]:
    """Global options win over the environment, for this call only (main() is reentrant)."""
    changes = {
        "TEMPORAL_ADDRESS": args.address,
        "TEMPORAL_NAMESPACE": args.namespace,
        "PHASEGATE_TASK_QUEUE": args.task_queue,
    }
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for key, value in changes.items():
            if value:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# ---------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 1: exit code 2 means "gate failed" for ``submit``."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"error: {message}\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        # Usage errors quote the arguments given (an id pasted from an agent's output).
        from phasegate.client._cli_render import terminal_safe

        super()._print_message(terminal_safe(message) if message else message, file)


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every ``phasegate`` command."""
    p = _Parser(prog="phasegate", description="Durable phase-gated workflows on Temporal.")
    p.add_argument("--address", help="Temporal host:port (overrides TEMPORAL_ADDRESS)")
    p.add_argument("--namespace", help="Temporal namespace (overrides TEMPORAL_NAMESPACE)")
    p.add_argument("--task-queue", help="worker task queue (overrides PHASEGATE_TASK_QUEUE)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    js = _Parser(add_help=False)
    js.add_argument("--json", action="store_true", help="print the message model as JSON")
    sid = _Parser(add_help=False)
    sid.add_argument("session_id", metavar="ID", help="session (workflow) id")

    s = sub.add_parser("dev", help="Temporal dev server + worker in one terminal (Ctrl-C stops)")
    _server_options(s)
    s.add_argument(
        "--approver-key",
        action="append",
        default=[],
        metavar="NAME[=PUBKEY]",
        help="the worker accepts approvals signed by this key (repeatable; your key NAME "
        "from `phasegate keys new NAME`), besides PHASEGATE_APPROVER_KEYS",
    )
    s.set_defaults(func=dev.dev)
    s = sub.add_parser("server", help="run the Temporal dev server in the foreground")
    _server_options(s)
    s.set_defaults(func=dev.server)
    s = sub.add_parser("worker", help="run the phasegate worker (sessions and verify checks)")
    s.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics on PORT (overrides PHASEGATE_METRICS_PORT)",
    )
    s.add_argument(
        "--metrics-host", default="0.0.0.0", help="address to serve metrics on (default 0.0.0.0)"
    )
    s.add_argument(
        "--verify-concurrency",
        type=_verify_concurrency,
        metavar="N",
        help="verify checks run at once, 1-64 (overrides PHASEGATE_VERIFY_CONCURRENCY)",
    )
    only = s.add_mutually_exclusive_group()
    only.add_argument(
        "--verify-only",
        action="store_true",
        help="run only the verify checks (task queue <queue>-verify), e.g. as another user",
    )
    only.add_argument(
        "--no-verify",
        action="store_true",
        help="run only the sessions; verify checks need a `--verify-only` worker elsewhere",
    )
    s.set_defaults(func=_worker)

    s = sub.add_parser("start", parents=[js], help="start a session")
    s.add_argument("workflow_type", metavar="WORKFLOW_TYPE")
    s.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        help="project directory (default: the current directory)",
    )
    s.add_argument("--spec", help="dynamic workflows: tasks.md or its directory")
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
    s.add_argument("--no-wait", action="store_true", help="do not wait for the definition")
    s.add_argument(
        "--no-check",
        action="store_true",
        help="skip the local checks of TARGET, --spec and WORKFLOW_TYPE (when the worker "
        "sees other paths or another library than this machine)",
    )
    s.set_defaults(func=cmd.remote(cmd.start))

    sub.add_parser("status", parents=[js, sid], help="progress of a session").set_defaults(
        func=cmd.remote(cmd.status)
    )
    s = sub.add_parser("phase", parents=[js, sid], help="a phase's content, tasks and gate")
    s.add_argument("phase", metavar="N", type=int, nargs="?", help="default: the current phase")
    s.set_defaults(func=cmd.remote(cmd.phase))
    s = sub.add_parser("task", parents=[js, sid], help="one task of a phase")
    s.add_argument("phase", metavar="PHASE", type=int)
    s.add_argument("task", metavar="TASK", help="task id as written or its 1-based number")
    s.set_defaults(func=cmd.remote(cmd.task))

    s = sub.add_parser("submit", parents=[js, sid], help="submit checkpoint evidence")
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
    s.set_defaults(func=cmd.remote(cmd.submit))

    for name, required in (("approve", False), ("reject", True)):
        s = sub.add_parser(name, parents=[js, sid], help=f"{name} the phase awaiting approval")
        s.add_argument(
            "--as",
            dest="as_name",
            metavar="NAME",
            help="approver (default $PHASEGATE_APPROVER or your user name)",
        )
        s.add_argument("--phase", type=int, help="default: the current phase")
        s.add_argument("--comment", required=required, help="why (required to reject)")
        s.set_defaults(func=cmd.remote(cmd.decide), decision=name)

    s = sub.add_parser("control", parents=[js, sid], help="pause, resume, retry or abandon")
    s.add_argument("action", choices=["pause", "resume", "retry_phase", "rollback", "abandon"])
    s.add_argument("--reason", help="why (required to abandon)")
    s.add_argument("--to", type=int, metavar="N", help="rollback: the completed phase to reopen")
    s.add_argument(
        "--as",
        dest="as_name",
        metavar="NAME",
        help="who (default as for approve); signed with your key NAME when you hold one",
    )
    s.set_defaults(func=cmd.remote(cmd.control))

    s = sub.add_parser("list", parents=[js], help="sessions from Temporal visibility")
    s.add_argument("--status", help="e.g. active, awaiting_approval, completed")
    s.add_argument("--workflow", help="workflow type")
    s.add_argument("--limit", type=int, default=50)
    s.add_argument(
        "--failed",
        action="store_true",
        help="only sessions that failed to start, with why (remove them: phasegate sessions prune)",
    )
    s.set_defaults(func=cmd.remote(cmd.list_sessions))

    sessions = sub.add_parser("sessions", help="housekeeping of sessions")
    sessions_sub = sessions.add_subparsers(
        dest="sessions_command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    s = sessions_sub.add_parser(
        "prune",
        parents=[js],
        help="delete sessions that failed to start (lists them without --yes)",
    )
    s.add_argument("--yes", action="store_true", help="delete them (no prompt)")
    s.add_argument("--workflow", help="only sessions of this workflow type")
    s.add_argument(
        "--older-than", metavar="AGE", help="only those started before AGE ago (30m, 12h, 7d)"
    )
    s.add_argument("--limit", type=int, default=500, help="most to delete at once (default 500)")
    s.set_defaults(func=cmd.remote(cmd.sessions_prune))

    s = sub.add_parser("watch", parents=[js, sid], help="follow a session's progress")
    s.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    s.add_argument("--once", action="store_true", help="print the status once and exit")
    s.set_defaults(func=cmd.remote(cmd.watch))

    spec = sub.add_parser("spec", help="tasks.md tools (no server needed)")
    spec_sub = spec.add_subparsers(
        dest="spec_command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    s = spec_sub.add_parser("parse", parents=[js], help="show the phases parsed from tasks.md")
    s.add_argument("path", metavar="PATH", help="tasks.md or its directory")
    s.set_defaults(func=cmd.spec_parse)

    lib = sub.add_parser("library", help="workflow library tools (no server needed)")
    lib_sub = lib.add_subparsers(
        dest="library_command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    lib_sub.add_parser("list", parents=[js], help="workflows on the library path").set_defaults(
        func=cmd.library_list
    )
    s = lib_sub.add_parser("check", parents=[js], help="load every workflow in DIR")
    s.add_argument("dir", metavar="DIR", help="a library folder (holding <type>/metadata.json)")
    s.set_defaults(func=cmd.library_check)

    s = sub.add_parser("index", parents=[js], help="build the retrieval index (incremental)")
    s.add_argument("dirs", nargs="*", metavar="DIR", help="standards folders to include")
    s.set_defaults(func=extra.index)
    s = sub.add_parser("search", parents=[js], help="query the retrieval index")
    s.add_argument("query", metavar="QUERY")
    s.add_argument("--workflow", help="as a session of this workflow type would see it")
    s.add_argument("--max-phase", type=int, help="hide that workflow's phases after N")
    s.add_argument("-k", type=int, default=5, help="most results (default 5)")
    s.add_argument("--tokens", type=int, default=2000, help="token budget (default 2000)")
    s.add_argument("--dir", dest="dirs", action="append", default=[], help="extra standards folder")
    s.set_defaults(func=extra.search)

    keys = sub.add_parser("keys", help="approver signing keys (no server needed)")
    keys_sub = keys.add_subparsers(
        dest="keys_command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    s = keys_sub.add_parser("new", parents=[js], help="create an Ed25519 key pair for NAME")
    s.add_argument("name", metavar="NAME", help="the approver name the key signs as")
    s.add_argument("--force", action="store_true", help="replace an existing key")
    s.set_defaults(func=extra.keys_new)
    keys_sub.add_parser("list", parents=[js], help="keys in the config dir").set_defaults(
        func=extra.keys_list
    )
    s = keys_sub.add_parser("export", help="print {name, public_key} for approver_keys")
    s.add_argument("name", metavar="NAME")
    s.set_defaults(func=extra.keys_export)

    s = sub.add_parser("mcp", help="run the MCP server for coding agents (stdio by default)")
    s.add_argument(
        "--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT"
    )
    s.set_defaults(func=extra.mcp, temporal=True)
    orchestrate.register(sub, js)  # orchestrate ISSUE.md | watch | approve | replan; plan show
    return p


def _server_options(s: argparse.ArgumentParser) -> None:
    """Flags of ``dev`` and ``server``."""
    s.add_argument("--port", type=int, help="Temporal port (default 7233 if free, else any)")
    s.add_argument(
        "--ui-port", type=int, help="Web UI port (default PHASEGATE_UI_PORT or 8233 if free)"
    )
    s.add_argument("--db", help="SQLite file (default <home>/temporal.db; one server per file)")
    s.add_argument("--headless", action="store_true", help="no Web UI")
    s.add_argument(
        "--log-level",
        default="error",
        choices=["debug", "info", "warn", "error"],
        help="server log level (default error; the log is <home>/temporal.log)",
    )


def _bounded(name: str, low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name} must be a number from {low} to {high}")
        return value

    return parse


_port = _bounded("--metrics-port", 0, 65535)
_verify_concurrency = _bounded("--verify-concurrency", 1, 64)


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    """``phasegate worker``: the flags over the settings, then :func:`run_worker`."""
    import asyncio
    import logging

    from phasegate.client._cli_render import TerminalSafeFormatter
    from phasegate.worker import run_worker

    handler = logging.StreamHandler()
    handler.setFormatter(TerminalSafeFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    updates = {"metrics_port": args.metrics_port, "verify_concurrency": args.verify_concurrency}
    settings = settings.model_copy(update={k: v for k, v in updates.items() if v is not None})
    args.temporal = True
    main, verify = not args.verify_only, not args.no_verify
    # an unreachable server raises TemporalUnreachable
    asyncio.run(run_worker(settings, main=main, verify=verify, metrics_host=args.metrics_host))
    return EXIT_OK


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """Run one ``phasegate`` command and return its exit code (see the module docstring).

    Called without ``argv`` (the console script, ``python -m client.cli``) it is the
    whole process: after a command that used the Temporal client it leaves with
    ``os._exit``, because the SDK's Rust threads can abort interpreter shutdown
    (temporalio/sdk-python#300: "PyGILState_Release ... must be current").
    """
    try:
        words = orchestrate.default_subcommand(sys.argv[1:] if argv is None else argv)
        args = build_parser().parse_args(words)
    except SystemExit as exc:  # --help, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    code = _run(args)
    if argv is None and getattr(args, "temporal", False):
        from phasegate.temporal import shutdown_tracing

        shutdown_tracing()  # os._exit skips the span exporter's own exit hook
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from phasegate.temporal import load_settings

    with _env_overrides(args):
        try:
            return args.func(args, load_settings())
        except PhasegateError as exc:
            cmd.echo_err(f"error: {exc}")
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            cmd.echo_err(f"error: {loc}: {first['msg']}" if loc else f"error: {first['msg']}")
        except KeyboardInterrupt:
            return EXIT_OK if args.command == "watch" else 130
        except BrokenPipeError:  # `phasegate phase ID | head`: the reader left, not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
