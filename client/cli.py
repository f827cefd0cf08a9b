"""The ``phasegate`` command line: run the dev server and worker, drive sessions.

Read commands print compact text by default and the message model's JSON with
``--json``. Exit codes are meant for scripts:

====  ==========================================================
0     success (``submit``: the checkpoint passed)
1     an error; one line ``error: ...`` on stderr, never a traceback
2     ``submit``: the gate refused the evidence (problems printed)
3     ``phase``/``task``: the phase is in the future (refused)
====  ==========================================================

Global options (before the subcommand) override the environment:
``--address`` (TEMPORAL_ADDRESS), ``--namespace`` (TEMPORAL_NAMESPACE),
``--task-queue`` (PHASEGATE_TASK_QUEUE).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import hashlib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from client import _cli_render as render
from domain.errors import PhasegateError

if TYPE_CHECKING:
    from client.api import PhasegateClient
    from domain.settings import Settings

__all__ = ["EXIT_ERROR", "EXIT_GATE_FAILED", "EXIT_OK", "EXIT_REFUSED", "build_parser", "main"]

EXIT_OK, EXIT_ERROR, EXIT_GATE_FAILED, EXIT_REFUSED = 0, 1, 2, 3
_FINISHED = ("completed", "abandoned")
_UNREACHABLE_MARKS = ("connecterror", "connection refused", "tcp connect", "dns error", "timed out")


# ---------------------------------------------------------------- small helpers


def _out(text: str) -> None:
    print(text, flush=True)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _abspath(value: str) -> str:
    return str(Path(value).expanduser().resolve())


def _json_or_text(value: str) -> Any:
    """``3`` -> 3, ``true`` -> True, ``["a"]`` -> ["a"]; anything else stays a string."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def _key_value(item: str, flag: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise PhasegateError(f"{flag} expects key=value, got {item!r}", where=flag)
    return key.strip(), _json_or_text(value)


def _approver(name: str | None) -> str:
    if name:
        return name
    if os.environ.get("PHASEGATE_APPROVER"):
        return os.environ["PHASEGATE_APPROVER"]
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in a bare container
        raise PhasegateError("who is deciding?", hint="pass --as NAME") from None


def _target_host(settings: Settings) -> str:
    try:
        from temporalio.envconfig import ClientConfig

        return str(ClientConfig.load_client_connect_config().get("target_host") or "") or (
            settings.temporal_address
        )
    except (RuntimeError, ValueError, OSError):  # a broken profile must not hide the real error
        return settings.temporal_address


def _unreachable(settings: Settings, detail: str = "") -> PhasegateError:
    host = _target_host(settings)
    if detail and not any(m in detail.lower() for m in _UNREACHABLE_MARKS):
        return PhasegateError(f"cannot connect to Temporal at {host}: {detail}")
    return PhasegateError(
        f"cannot reach Temporal at {host}", hint="start it with `phasegate server`"
    )


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


# ---------------------------------------------------------------- commands needing Temporal


class _Ctx:
    """What a remote command gets: parsed args, settings and a lazy connection."""

    def __init__(self, args: argparse.Namespace, settings: Settings) -> None:
        self.args = args
        self.settings = settings

    async def client(self) -> PhasegateClient:
        from client.api import PhasegateClient
        from client.connect import connect

        try:
            temporal = await connect(self.settings)
        except RuntimeError as exc:  # temporalio: "Failed client connect: ..."
            raise _unreachable(self.settings, str(exc)) from None
        return PhasegateClient(temporal, self.settings.task_queue)

    def emit(self, model: Any, text: str) -> None:
        _out(render.to_json(model) if self.args.json else text)


async def _start(ctx: _Ctx) -> int:
    from pydantic import ValidationError

    from domain.messages import SessionOptions

    a = ctx.args
    opts = dict(_key_value(item, "--option") for item in a.option)
    if a.spec:
        opts["spec_path"] = _abspath(a.spec)
    if a.approver:
        opts["approvers"] = a.approver
    try:
        options = SessionOptions.model_validate(opts)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise PhasegateError(first["msg"], where=f"--option {loc}") from None
    target = _abspath(a.target) if a.target else ""
    pg = await ctx.client()
    sid = await pg.start(a.workflow_type, target, options=options, session_id=a.id,
                         wait=not a.no_wait)
    view = None if a.no_wait else await pg.status(sid)
    url = render.ui_url(ctx.settings.ui_port, ctx.settings.namespace, sid)
    if a.json:
        data: dict[str, Any] = {"session_id": sid, "status": view.status if view else "starting"}
        if view:
            data.update(current_phase=view.current_phase, current_phase_name=view.current_phase_name,
                        total_phases=view.total_phases)
        data["ui_url"] = url
        _out(json.dumps(data, indent=2))
        return EXIT_OK
    lines = [f"session {sid}"]
    if view:
        lines.append(f"{view.name or view.workflow_type}: {view.total_phases} phases; "
                     f"phase {view.current_phase}: {view.current_phase_name}")
        lines.append(f"next: phasegate phase {sid}")
    else:
        lines.append(f"starting (check with: phasegate status {sid})")
    lines.append(f"web UI: {url}")
    _out("\n".join(lines))
    return EXIT_OK


async def _status(ctx: _Ctx) -> int:
    pg = await ctx.client()
    view = await pg.status(ctx.args.session_id)
    ctx.emit(view, render.render_status(ctx.args.session_id, view))
    return EXIT_OK


async def _phase(ctx: _Ctx) -> int:
    from domain.messages import SequenceViolation

    pg = await ctx.client()
    view = await pg.phase(ctx.args.session_id, ctx.args.phase)
    if isinstance(view, SequenceViolation):
        if ctx.args.json:
            _out(render.to_json(view))
        _err(f"refused: {render.render_violation(ctx.args.session_id, view)}")
        return EXIT_REFUSED
    ctx.emit(view, render.render_phase(view))
    return EXIT_OK


async def _task(ctx: _Ctx) -> int:
    from domain.messages import SequenceViolation

    pg = await ctx.client()
    view = await pg.task(ctx.args.session_id, ctx.args.phase, ctx.args.task)
    if isinstance(view, SequenceViolation):
        if ctx.args.json:
            _out(render.to_json(view))
        _err(f"refused: {render.render_violation(ctx.args.session_id, view)}")
        return EXIT_REFUSED
    ctx.emit(view, render.render_task(view))
    return EXIT_OK


def _read_evidence(file: str | None, sets: list[str]) -> dict[str, Any]:
    evidence: dict[str, Any] = {}
    if file:
        where = "stdin" if file == "-" else file
        try:
            text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise PhasegateError(f"cannot read evidence: {exc.strerror or exc}",
                                 where=where) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PhasegateError(f"invalid JSON: {exc.msg}", where=f"{where}:{exc.lineno}",
                                 hint="evidence is one JSON object") from None
        if not isinstance(data, dict):
            raise PhasegateError("evidence must be a JSON object", where=where,
                                 hint='e.g. {"tests_run": 12}')
        evidence.update(data)
    evidence.update(_key_value(item, "--set") for item in sets)
    return evidence


async def _submit(ctx: _Ctx) -> int:
    a = ctx.args
    evidence = _read_evidence(a.file, a.set)  # before connecting: file errors need no server
    pg = await ctx.client()
    phase = a.phase if a.phase is not None else (await pg.status(a.session_id)).current_phase
    result = await pg.submit(a.session_id, phase, evidence, submission_id=a.id)
    ctx.emit(result, render.render_checkpoint(a.session_id, phase, result))
    return EXIT_OK if result.passed else EXIT_GATE_FAILED


async def _decide(ctx: _Ctx) -> int:
    a = ctx.args
    name = _approver(a.as_name)
    pg = await ctx.client()
    view = await pg.decide(a.session_id, approver=name, decision=a.decision, phase=a.phase,
                           comment=a.comment or "")
    verb = "approved" if a.decision == "approve" else "rejected"
    ctx.emit(view, f"{verb} by {name}\n{render.render_status(a.session_id, view)}")
    return EXIT_OK


async def _control(ctx: _Ctx) -> int:
    from domain.messages import ControlRequest

    a = ctx.args
    req = ControlRequest(action=a.action, reason=a.reason or "", to_phase=a.to,
                         actor=_approver(a.as_name))
    pg = await ctx.client()
    result = await pg.control(a.session_id, req)
    ctx.emit(result, render.render_control(result))
    return EXIT_OK


async def _list(ctx: _Ctx) -> int:
    a = ctx.args
    pg = await ctx.client()
    rows = await pg.list(status=a.status, workflow_type=a.workflow, limit=a.limit)
    ctx.emit(rows, render.render_listings(rows))
    return EXIT_OK


async def _watch(ctx: _Ctx) -> int:
    from datetime import datetime

    a = ctx.args
    pg = await ctx.client()
    last: dict[str, Any] | None = None
    while True:
        view = await pg.status(a.session_id)
        dump = view.model_dump(mode="json")
        if dump != last:
            if a.json:
                _out(json.dumps(dump))  # one object per line: easy to stream
            else:
                stamp = "" if a.once else f"[{datetime.now():%H:%M:%S}] "
                sep = "\n" if last is not None else ""
                _out(f"{sep}{stamp}{render.render_status(a.session_id, view)}")
            last = dump
        if a.once or view.status in _FINISHED:
            return EXIT_OK
        await asyncio.sleep(a.interval)


def _remote(handler: Callable[[_Ctx], Awaitable[int]]) -> Callable[..., int]:
    """Run an async command, turning Temporal client failures into phasegate errors."""

    def run(args: argparse.Namespace, settings: Settings) -> int:
        from temporalio.exceptions import WorkflowAlreadyStartedError
        from temporalio.service import RPCError, RPCStatusCode

        args.temporal = True  # main() skips interpreter shutdown (see its docstring)
        try:
            return asyncio.run(handler(_Ctx(args, settings)))
        except WorkflowAlreadyStartedError as exc:
            raise PhasegateError(f"session {exc.workflow_id} already exists",
                                 hint="pick another --id, or omit it") from None
        except RPCError as exc:
            if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                raise _unreachable(settings, exc.message) from None
            from client.api import error_from

            raise error_from(exc) from None

    return run


# ---------------------------------------------------------------- commands without Temporal


def _server(args: argparse.Namespace, settings: Settings) -> NoReturn:
    from client.devserver import server_command

    db = args.db or str(Path(settings.home) / "temporal.db")
    ui_port = None if args.headless else (args.ui_port or settings.ui_port)
    cmd = server_command(port=args.port, ui_port=ui_port, db=db)
    _out(f"phasegate: Temporal dev server on 127.0.0.1:{args.port}, data in {db}")
    _out(f"web UI: http://localhost:{ui_port}" if ui_port else "web UI: off (--headless)")
    _out("Ctrl-C stops it; in another terminal run `phasegate worker`")
    os.execv(cmd[0], cmd)  # the server owns the terminal: Ctrl-C and SIGTERM reach it directly


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    import logging

    from worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args.temporal = True
    try:
        asyncio.run(run_worker(settings))
    except RuntimeError as exc:
        if "client connect" in str(exc).lower():
            raise _unreachable(settings, str(exc)) from None
        raise
    return EXIT_OK


def _spec_parse(args: argparse.Namespace, settings: Settings) -> int:
    from activities.tasks_parser import parse_tasks_md

    path = Path(args.path).expanduser()
    if path.is_dir():
        path = path / "tasks.md"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PhasegateError(f"cannot read spec: {exc.strerror or exc}", where=str(path),
                             hint="pass a tasks.md file or the directory holding it") from None
    spec = parse_tasks_md(data.decode("utf-8", errors="replace"), source=str(path))
    spec.sha256 = spec.sha256 or hashlib.sha256(data).hexdigest()
    _out(render.to_json(spec) if args.json else render.render_spec(spec))
    return EXIT_OK


def _library_list(args: argparse.Namespace, settings: Settings) -> int:
    from activities.library import list_workflows

    workflows = list_workflows(settings.library_paths)
    if args.json:
        _out(render.to_json([
            {"workflow_type": w.metadata.workflow_type, "name": w.metadata.name,
             "description": w.metadata.description, "phases": render.phase_count(w),
             "dynamic": w.metadata.dynamic_phases, "path": str(w.path)}
            for w in workflows
        ]))
    else:
        _out(render.render_library(workflows))
    return EXIT_OK


def _library_check(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from activities.library import check_library

    report = check_library(args.dir)
    if args.json:
        _out(render.to_json(asdict(report)))
    else:
        _out(render.render_check(args.dir, report))
        if not report.workflows and (Path(args.dir) / "metadata.json").is_file():
            parent = Path(args.dir).resolve().parent
            _out(f"hint: {args.dir} is one workflow; check its library: "
                 f"phasegate library check {parent}")
    return EXIT_ERROR if report.errors else EXIT_OK


# ---------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 1: exit code 2 means "gate failed" for ``submit``."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every ``phasegate`` command."""
    p = _Parser(prog="phasegate", description="Durable phase-gated workflows on Temporal.")
    p.add_argument("--address", help="Temporal host:port (overrides TEMPORAL_ADDRESS)")
    p.add_argument("--namespace", help="Temporal namespace (overrides TEMPORAL_NAMESPACE)")
    p.add_argument("--task-queue", help="worker task queue (overrides PHASEGATE_TASK_QUEUE)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           parser_class=_Parser)
    js = _Parser(add_help=False)
    js.add_argument("--json", action="store_true", help="print the message model as JSON")
    sid = _Parser(add_help=False)
    sid.add_argument("session_id", metavar="ID", help="session (workflow) id")

    s = sub.add_parser("server", help="run the Temporal dev server in the foreground")
    s.add_argument("--port", type=int, default=7233)
    s.add_argument("--ui-port", type=int, help="Web UI port (default 8233 or PHASEGATE_UI_PORT)")
    s.add_argument("--db", help="SQLite file (default <home>/temporal.db)")
    s.add_argument("--headless", action="store_true", help="no Web UI")
    s.set_defaults(func=_server)
    sub.add_parser("worker", help="run the phasegate worker").set_defaults(func=_worker)

    s = sub.add_parser("start", parents=[js], help="start a session")
    s.add_argument("workflow_type", metavar="WORKFLOW_TYPE")
    s.add_argument("target", metavar="TARGET", nargs="?", help="project directory")
    s.add_argument("--spec", help="dynamic workflows: tasks.md or its directory")
    s.add_argument("--id", help="session id (default <workflow_type>-<random>)")
    s.add_argument("--approver", action="append", default=[], metavar="NAME",
                   help="allowed approver (repeatable; overrides the gates' lists)")
    s.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="session option (repeatable; JSON values)")
    s.add_argument("--no-wait", action="store_true", help="do not wait for the definition")
    s.set_defaults(func=_remote(_start))

    sub.add_parser("status", parents=[js, sid], help="progress of a session").set_defaults(
        func=_remote(_status))
    s = sub.add_parser("phase", parents=[js, sid], help="a phase's content, tasks and gate")
    s.add_argument("phase", metavar="N", type=int, nargs="?", help="default: the current phase")
    s.set_defaults(func=_remote(_phase))
    s = sub.add_parser("task", parents=[js, sid], help="one task of a phase")
    s.add_argument("phase", metavar="PHASE", type=int)
    s.add_argument("task", metavar="TASK", help="task id as written or its 1-based number")
    s.set_defaults(func=_remote(_task))

    s = sub.add_parser("submit", parents=[js, sid], help="submit checkpoint evidence")
    s.add_argument("--phase", type=int, help="default: the current phase")
    s.add_argument("--file", help="evidence JSON object ('-' reads stdin)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="evidence field (repeatable; JSON values, else strings)")
    s.add_argument("--id", help="submission id: a repeat returns the first result")
    s.set_defaults(func=_remote(_submit))

    for name, required in (("approve", False), ("reject", True)):
        s = sub.add_parser(name, parents=[js, sid], help=f"{name} the phase awaiting approval")
        s.add_argument("--as", dest="as_name", metavar="NAME",
                       help="approver (default $PHASEGATE_APPROVER or your user name)")
        s.add_argument("--phase", type=int, help="default: the current phase")
        s.add_argument("--comment", required=required, help="why (required to reject)")
        s.set_defaults(func=_remote(_decide), decision=name)

    s = sub.add_parser("control", parents=[js, sid], help="pause, resume, retry or abandon")
    s.add_argument("action", choices=["pause", "resume", "retry_phase", "rollback", "abandon"])
    s.add_argument("--reason", help="why (required to abandon)")
    s.add_argument("--to", type=int, metavar="N", help="rollback: the completed phase to reopen")
    s.add_argument("--as", dest="as_name", metavar="NAME", help="who (default as for approve)")
    s.set_defaults(func=_remote(_control))

    s = sub.add_parser("list", parents=[js], help="sessions from Temporal visibility")
    s.add_argument("--status", help="e.g. active, awaiting_approval, completed")
    s.add_argument("--workflow", help="workflow type")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(func=_remote(_list))

    s = sub.add_parser("watch", parents=[js, sid], help="follow a session's progress")
    s.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    s.add_argument("--once", action="store_true", help="print the status once and exit")
    s.set_defaults(func=_remote(_watch))

    spec = sub.add_parser("spec", help="tasks.md tools (no server needed)")
    spec_sub = spec.add_subparsers(dest="spec_command", required=True, metavar="COMMAND",
                                   parser_class=_Parser)
    s = spec_sub.add_parser("parse", parents=[js], help="show the phases parsed from tasks.md")
    s.add_argument("path", metavar="PATH", help="tasks.md or its directory")
    s.set_defaults(func=_spec_parse)

    lib = sub.add_parser("library", help="workflow library tools (no server needed)")
    lib_sub = lib.add_subparsers(dest="library_command", required=True, metavar="COMMAND",
                                 parser_class=_Parser)
    lib_sub.add_parser("list", parents=[js], help="workflows on the library path").set_defaults(
        func=_library_list)
    s = lib_sub.add_parser("check", parents=[js], help="load every workflow in DIR")
    s.add_argument("dir", metavar="DIR", help="a library folder (holding <type>/metadata.json)")
    s.set_defaults(func=_library_check)
    return p


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """Run one ``phasegate`` command and return its exit code (see the module docstring).

    Called without ``argv`` (the console script, ``python -m client.cli``) it is the
    whole process: after a command that used the Temporal client it leaves with
    ``os._exit``, because the SDK's Rust threads can abort interpreter shutdown
    (temporalio/sdk-python#300: "PyGILState_Release ... must be current").
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    code = _run(args)
    if argv is None and getattr(args, "temporal", False):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from client.connect import load_settings

    with _env_overrides(args):
        try:
            return args.func(args, load_settings())
        except PhasegateError as exc:
            _err(f"error: {exc}")
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            _err(f"error: {loc}: {first['msg']}" if loc else f"error: {first['msg']}")
        except KeyboardInterrupt:
            return EXIT_OK if args.command == "watch" else 130
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
