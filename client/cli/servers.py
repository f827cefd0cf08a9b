"""``phasegate dev | server | worker | mcp | which``: the long-running processes, and
which server the other commands reach.

``phasegate worker`` runs the phasegate worker against a Temporal server,
``phasegate mcp`` the MCP server for coding agents (``client.mcp``), ``phasegate which``
says which server commands run here reach and how it was found. ``phasegate
dev`` runs the embedded Temporal dev server and a worker in one process and one
terminal; ``phasegate server`` runs the dev server alone (workers elsewhere). Both:

- take 7233 and the Web UI's 8233 (``PHASEGATE_UI_PORT``) when free, else free
  ports, and print them; ``--port``/``--ui-port`` insist on a port;
- lock the SQLite file (``<db>.lock``, held by the server process): a second
  server on the same file is refused with the running one's address;
- record ``{address, ui_url, pid, command, task_queue}`` in ``<home>/dev.json``, where
  ``phasegate.temporal.load_settings`` finds it from this folder and its subfolders (the
  nearest ``.phasegate/dev.json`` up to the project root, ``client._origin``), so the CLI
  and ``phasegate mcp`` need no ``TEMPORAL_ADDRESS``; the file goes when the server stops;
- keep the server's log in ``<home>/temporal.log`` (``--log-level error``: a clean
  stop prints no WARN lines) and echo only its error lines;
- stop on the first Ctrl-C or SIGTERM: the worker drains, then the server stops.

Threat-model level: a development convenience for one machine (level 3 holds
nothing here that ``phasegate worker`` does not): the worker accepts signed
approvals only from keys named with ``--approver-key`` or ``PHASEGATE_APPROVER_KEYS``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phasegate.client.cli._common import (
    EXIT_ERROR,
    EXIT_OK,
    JSON,
    Ctx,
    approver_key,
    echo,
    echo_err,
    say_server,
    typed_address,
    web_ui_hint,
)
from phasegate.client.cli._render import TerminalSafeFormatter

if TYPE_CHECKING:
    from phasegate.client.codec_server import CodecServer
    from phasegate.client.devserver import DevServer
    from phasegate.domain.settings import Settings

__all__ = ["register"]

WALKTHROUGH_SPEC = "examples/specs/todo-api"


def register(sub: Any) -> None:
    """Add ``dev``, ``server``, ``worker``, ``which`` and ``mcp`` to ``sub``."""
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
    s.add_argument(
        "--ui-codec",
        action="store_true",
        help="the Web UI shows sealed prefetches (PHASEGATE_SEAL_KEYS): a codec endpoint it "
        "calls; whoever reaches the UI reads them, so not with an agent on this machine",
    )
    s.set_defaults(func=dev)
    s = sub.add_parser("server", help="run the Temporal dev server in the foreground")
    _server_options(s)
    s.set_defaults(func=server)
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
    s.set_defaults(func=worker)
    s = sub.add_parser(
        "which",
        parents=[JSON],
        help="which Temporal server commands run here use, how it was found, and its worker",
        description="The Temporal server commands run in this folder talk to, how it was "
        "found (--address, TEMPORAL_ADDRESS, the Temporal profile, the nearest "
        ".phasegate/dev.json up to the project root, or the default localhost:7233), whether "
        "it answers, whether a worker polls the task queue, and its Web UI. Exit 1 when "
        "nothing answers.",
    )
    s.set_defaults(func=which, temporal=True)
    s = sub.add_parser("mcp", help="run the MCP server for coding agents (stdio by default)")
    s.add_argument(
        "--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT"
    )
    s.set_defaults(func=mcp, temporal=True)


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


def worker(args: argparse.Namespace, settings: Settings) -> int:
    """``phasegate worker``: the flags over the settings, then :func:`run_worker`."""
    import logging

    from phasegate.worker import run_worker

    handler = logging.StreamHandler()
    handler.setFormatter(TerminalSafeFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    updates = {"metrics_port": args.metrics_port, "verify_concurrency": args.verify_concurrency}
    settings = settings.model_copy(update={k: v for k, v in updates.items() if v is not None})
    args.temporal = True
    main, verify = not args.verify_only, not args.no_verify
    typed_address(args, settings)
    say_server(settings, always=True, prefix="phasegate worker")
    # an unreachable server raises TemporalUnreachable
    asyncio.run(run_worker(settings, main=main, verify=verify, metrics_host=args.metrics_host))
    return EXIT_OK


def mcp(args: argparse.Namespace, settings: Settings) -> int:
    """``phasegate mcp``: the MCP server for coding agents (stdio, or streamable HTTP
    with --http)."""
    from phasegate.client.mcp import main

    args.temporal = True
    return main(["--http", str(args.http)] if args.http else [])


def which(args: argparse.Namespace, settings: Settings) -> int:
    """``phasegate which``: the server, how it was found, whether it answers, its worker."""
    from phasegate.domain.errors import PhasegateError
    from phasegate.temporal import server_origin

    ctx = Ctx(args, settings)  # records a typed --address as such (typed_address)
    origin = server_origin(settings)
    report: dict[str, Any] = {
        "address": settings.temporal_address,
        "namespace": settings.namespace,
        "found": origin.source if origin else None,
        "how": origin.how if origin else None,
        "dev_file": origin.dev_file if origin else None,
        "command": origin.command if origin else None,
        "note": origin.note if origin and origin.source != "default" else None,
        "task_queue": settings.task_queue,
        "ui_url": settings.ui_url,
        "library": settings.library_paths,
    }
    try:
        report["workers"] = asyncio.run(_workers(ctx))
        report["error"] = None
    except PhasegateError as exc:
        report["workers"], report["error"] = None, str(exc)
        report["hint"] = exc.hint
    if args.json:
        echo(json.dumps(report, indent=2))
    else:
        echo("\n".join(_which_rows(report, settings, origin)))
    return EXIT_OK if report["error"] is None else EXIT_ERROR


async def _workers(ctx: Ctx) -> int:
    """Workers seen polling the settings' task queue in the last 90 s."""
    from datetime import timedelta

    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.service import RPCError

    from phasegate.temporal import connect, phasegate_error

    client = await connect(ctx.settings)  # the report names the server: no stderr line
    try:
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=ctx.settings.namespace,
                task_queue=TaskQueue(name=ctx.settings.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
    except RPCError as exc:
        raise phasegate_error(exc, ctx.settings) from None
    now = datetime.now(UTC)
    return sum(
        now - p.last_access_time.ToDatetime(tzinfo=UTC) < timedelta(seconds=90)
        for p in resp.pollers
    )


def _which_rows(report: dict[str, Any], settings: Settings, origin: Any) -> list[str]:
    how = f" ({report['how']})" if report["how"] else ""
    if report["command"] and report["found"] == "dev.json":
        how = how[:-1] + f", `{report['command']}`)"
    rows = [("Temporal", f"{report['address']}{how}")]
    if report["error"] is not None:
        rows.append(("answers", f"no; {report.pop('hint', None) or report['error']}"))
    else:
        queue, workers = report["task_queue"], report["workers"]
        polling = f"{workers} worker{'s' if workers != 1 else ''} polling"
        if not workers and origin is not None:
            polling += f"; {origin.worker_hint(queue)}"
        rows.append(("worker", f"task queue {queue!r}: {polling}"))
    rows.append(("Web UI", report["ui_url"] or web_ui_hint(settings)))
    rows.append(
        ("library", ", ".join(report["library"]) + " (this shell's; the worker has its own)")
    )
    if report["note"]:
        rows.append(("note", report["note"]))
    return [f"  {label:9} {value}" for label, value in rows]


def dev(args: argparse.Namespace, settings: Settings) -> int:
    """``phasegate dev``: server + worker in one terminal until Ctrl-C."""
    args.temporal = True  # a Temporal client runs here: main() leaves with os._exit
    return _run(args, settings, worker=True)


def server(args: argparse.Namespace, settings: Settings) -> int:
    """``phasegate server``: the dev server alone in the foreground until Ctrl-C."""
    return _run(args, settings, worker=False)


# ---------------------------------------------------------------- the run


def _run(args: argparse.Namespace, settings: Settings, *, worker: bool) -> int:
    from phasegate.client.devserver import DevServer, choose_port, remove_dev_file, write_dev_file

    name = "phasegate dev" if worker else "phasegate server"
    if worker:
        settings = _with_approver_keys(settings, args.approver_key)  # fail before starting
    home = Path(settings.home)
    db = str(Path(args.db or home / "temporal.db").expanduser().resolve())
    log = home / "temporal.log"
    home.mkdir(parents=True, exist_ok=True)
    port = choose_port(args.port, 7233, "--port")
    ui_port = None
    if not args.headless:
        preferred = int(os.environ.get("PHASEGATE_UI_PORT") or 8233)
        ui_port = choose_port(args.ui_port, preferred, "--ui-port")
    codec = _ui_codec(settings, ui_port) if getattr(args, "ui_codec", False) else None
    srv = DevServer(
        port=port,
        ui_port=ui_port,
        db=db,
        log_file=str(log),
        extra=["--ui-codec-endpoint", codec.endpoint] if codec else None,
        log_level=args.log_level,
        owner=name,
    )
    offset = log.stat().st_size if log.is_file() else 0
    with _sigterm_interrupts():
        progress = _Progress(f"{name}: starting Temporal on {srv.address} (data: {_show(db)})")
        srv.start(timeout=60, progress=progress)
        progress.done()
        try:
            write_dev_file(
                settings.dev_file,
                address=srv.address,
                ui_url=srv.ui_url,
                server_pid=srv.proc.pid if srv.proc else None,
                db=db,
                command=name,
                task_queue=settings.task_queue if worker else None,
                started=datetime.now(UTC).isoformat(timespec="seconds"),
            )
            settings = settings.model_copy(
                update={"temporal_address": srv.address, "ui_url": srv.ui_url}
                | ({"ui_port": ui_port} if ui_port else {})
            )
            code = asyncio.run(_serve(srv, settings, db, log, offset, worker=worker))
        finally:
            with _signals_ignored():  # another Ctrl-C must not leave the server running
                remove_dev_file(settings.dev_file)
                srv.stop()
                if codec is not None:
                    codec.stop()
    echo(f"{name}: stopped; sessions stay in {_show(db)}")
    return code


def _ui_codec(settings: Settings, ui_port: int | None) -> CodecServer:
    """The codec endpoint the dev server's Web UI calls to show sealed payloads."""
    from phasegate.client.codec_server import CodecServer
    from phasegate.domain.errors import PhasegateError
    from phasegate.sealing import load_ring

    if ui_port is None or not settings.seal_keys_file:
        raise PhasegateError(
            "--ui-codec needs the Web UI and a seal key ring",
            where="--ui-codec",
            hint="PHASEGATE_SEAL_KEYS=RING phasegate dev --ui-codec (without --headless)",
        )
    origins = [f"http://localhost:{ui_port}", f"http://127.0.0.1:{ui_port}"]
    codec = CodecServer(load_ring(settings.seal_keys_file), origins=origins).start()
    echo(f"phasegate dev: the Web UI opens sealed prefetches through {codec.endpoint}")
    return codec


async def _serve(
    srv: DevServer, settings: Settings, db: str, log: Path, offset: int, *, worker: bool
) -> int:
    """Run until SIGINT/SIGTERM or the server's exit; the worker (if any) drains first."""
    stop = asyncio.Event()
    failed: list[str] = []
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if not stop.is_set():
            echo(f"\nstopping {'(the worker drains, then the server) ' if worker else ''}...")
        stop.set()
        # A second Ctrl-C interrupts the drain (KeyboardInterrupt); SIGTERM stays handled.
        loop.remove_signal_handler(signal.SIGINT)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    watch = asyncio.create_task(_watch_server(srv, log, offset, stop, failed))
    try:
        if worker:
            await _run_worker(settings, srv, db, stop)
        else:
            _announce(settings, srv, db, None)
            await stop.wait()
    finally:
        watch.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    if failed:
        echo_err(f"error: {failed[0]}")
        return EXIT_ERROR
    return EXIT_OK


async def _run_worker(settings: Settings, srv: DevServer, db: str, stop: asyncio.Event) -> None:
    import concurrent.futures
    import logging

    from phasegate.temporal import connect
    from phasegate.worker import MAIN_ACTIVITY_THREADS, build_worker

    handler = logging.StreamHandler()
    handler.setFormatter(TerminalSafeFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    client = await connect(settings)
    with concurrent.futures.ThreadPoolExecutor(max_workers=MAIN_ACTIVITY_THREADS) as executor:
        async with build_worker(client, settings, executor=executor) as workers:
            _announce(settings, srv, db, workers.task_queues)
            await stop.wait()
    echo("worker: drained and stopped")


async def _watch_server(
    srv: DevServer, log: Path, offset: int, stop: asyncio.Event, failed: list[str]
) -> None:
    """Echo the server's log lines (errors only at the default level); notice its exit."""
    while True:
        with contextlib.suppress(OSError):
            with log.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            offset += len(complete)
            for line in complete.decode("utf-8", "replace").splitlines():
                if line.startswith("time="):  # the banner stays in the log
                    echo_err(f"temporal: {line[:400]}")
        if srv.proc is not None and srv.proc.poll() is not None and not stop.is_set():
            failed.append(
                f"the Temporal dev server exited with code {srv.proc.returncode} "
                f"(log: {_show(str(log))})"
            )
            stop.set()
            return
        await asyncio.sleep(0.5)


# ---------------------------------------------------------------- what it prints


def _announce(settings: Settings, srv: DevServer, db: str, queues: list[str] | None) -> None:
    """The addresses, who finds them, and the commands to run next."""
    rows = [
        ("Temporal", srv.address),
        ("Web UI", srv.ui_url or "off (--headless)"),
        ("data", f"{_show(db)} (log: {_show(str(Path(settings.home) / 'temporal.log'))})"),
    ]
    if queues is not None:
        roles = [
            f"{q!r} ({'verify checks' if q.endswith('-verify') else 'sessions'})" for q in queues
        ]
        rows.append(("worker", " and ".join(roles)))
        rows.append(("approvals", _approvals(settings)))
    home = settings.home
    where = "in this folder" if not Path(home).is_absolute() else f"with PHASEGATE_HOME={home}"
    found_by = f"phasegate commands run {where}"
    if not Path(home).is_absolute():
        found_by += " or its subfolders"
    rows.append(("found by", f"{found_by} ({_show(settings.dev_file)}; `phasegate which`)"))
    for label, value in rows:
        echo(f"  {label:10} {value}")
    if os.environ.get("TEMPORAL_ADDRESS") not in (None, "", srv.address):
        echo(
            f"  note: TEMPORAL_ADDRESS={os.environ['TEMPORAL_ADDRESS']} is set here: commands "
            "where it is set go there, not to this server"
        )
    echo(f"\nNext, in another terminal {where}:")
    if queues is None:
        echo("  phasegate worker                 # runs the sessions (or use `phasegate dev`)")
    if Path(WALKTHROUGH_SPEC, "tasks.md").is_file():
        echo(f"  phasegate start spec_execution_v1 {WALKTHROUGH_SPEC} --spec {WALKTHROUGH_SPEC}")
    else:
        echo("  phasegate library list           # workflows you can start")
        echo("  phasegate start WORKFLOW_TYPE [TARGET]")
    echo("  phasegate list                   # sessions")
    echo("  phasegate mcp                    # MCP server for coding agents (stdio)")
    echo(f"Elsewhere: export TEMPORAL_ADDRESS={srv.address}")
    stops = "the worker and the server" if queues is not None else "the server"
    echo(f"Ctrl-C stops {stops}.")


def _approvals(settings: Settings) -> str:
    from phasegate.worker import load_approver_keys

    names = [k.name for k in load_approver_keys(settings.approver_keys_file)]
    if names:
        return f"signed by {', '.join(names)}"
    if settings.allow_unsigned_approvals:
        return "by name, unsigned (PHASEGATE_ALLOW_UNSIGNED_APPROVALS is on)"
    return (
        "none possible: no approver keys (restart with --approver-key NAME; "
        "create one with `phasegate keys new NAME`)"
    )


def _with_approver_keys(settings: Settings, items: list[str]) -> Settings:
    """``--approver-key NAME[=PUBKEY]`` added to the worker's PHASEGATE_APPROVER_KEYS."""
    if not items:
        return settings
    from phasegate.worker import load_approver_keys

    keys = [k.model_dump() for k in load_approver_keys(settings.approver_keys_file)]
    keys += [approver_key(item) for item in items]
    return settings.model_copy(update={"approver_keys_file": json.dumps(keys)})


def _show(path: str) -> str:
    """``path`` relative to the current folder when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


class _Progress:
    """A wait over a second shows progress: the elapsed seconds in place on a terminal,
    a line every 5 s otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stdout.isatty()
        self.started = time.monotonic()
        self.shown = -1  # the label prints on the first call: after the checks passed

    def __call__(self, elapsed: float) -> None:
        if self.shown < 0:
            self.shown = 0
            print(f"{self.label} ...", end="" if self.tty else "\n", flush=True)
        second = int(elapsed)
        if second < 1 or second == self.shown:
            return
        self.shown = second
        if self.tty:
            print(f"\r{self.label} ... {second} s", end="", flush=True)
        elif second % 5 == 0:
            print(f"  still starting ({second} s)", flush=True)

    def done(self) -> None:
        took = time.monotonic() - self.started
        if self.shown < 0:
            self(0.0)
        prefix = f"\r{self.label} ... " if self.tty else "  "
        print(f"{prefix}ready in {took:.1f} s", flush=True)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM acts as Ctrl-C while no event loop handles it, so the server is stopped."""

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
