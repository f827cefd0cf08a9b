"""Command handlers of the ``phasegate`` CLI (the parser and ``main`` are in ``client.cli``).

Remote commands are ``async def name(ctx)`` wrapped by :func:`remote`; commands
that need no server are plain ``def name(args, settings)``. Every handler
returns an exit code and raises ``PhasegateError`` for anything a person must fix.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import hashlib
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phasegate.client import _cli_progress as progress
from phasegate.client import _cli_render as render
from phasegate.client._cli_evidence import (
    _json_or_text,  # noqa: F401 - tests import it here
    key_value,
    read_evidence,
)
from phasegate.domain.errors import PhasegateError

if TYPE_CHECKING:
    from phasegate.client.api import PhasegateClient
    from phasegate.domain.settings import Settings

EXIT_OK, EXIT_ERROR, EXIT_GATE_FAILED, EXIT_REFUSED = 0, 1, 2, 3
_FINISHED = ("completed", "abandoned")


# ---------------------------------------------------------------- small helpers


def echo(text: str) -> None:
    """Write ``text`` to stdout, terminal-safe (agents' text may hold escape sequences)."""
    print(render.terminal_safe(text), flush=True)


def echo_err(text: str) -> None:
    """Write ``text`` to stderr, terminal-safe (as :func:`echo`)."""
    print(render.terminal_safe(text), file=sys.stderr, flush=True)


def _abspath(value: str) -> str:
    return str(Path(value).expanduser().resolve())


def _approver_key(item: str) -> dict[str, str]:
    """``NAME=PUBLIC_KEY`` as given, or ``NAME`` for a public key in the local key dir."""
    if "=" in item:
        name, _, public = item.partition("=")
        return {"name": name.strip(), "public_key": public.strip()}
    from phasegate.client import keys

    return keys.public_key(item).model_dump()


def _approver(name: str | None) -> str:
    if name:
        return name
    if os.environ.get("PHASEGATE_APPROVER"):
        return os.environ["PHASEGATE_APPROVER"]
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in a bare container
        raise PhasegateError("who is deciding?", hint="pass --as NAME") from None


# ---------------------------------------------------------------- commands needing Temporal


class _Ctx:
    """What a remote command gets: parsed args, settings and a lazy connection."""

    def __init__(self, args: argparse.Namespace, settings: Settings) -> None:
        self.args = args
        self.settings = settings

    async def client(self) -> PhasegateClient:
        from phasegate.client.api import PhasegateClient
        from phasegate.temporal import connect

        temporal = await connect(self.settings)  # raises TemporalUnreachable with the fix
        return PhasegateClient(temporal, self.settings.task_queue)

    def emit(self, model: Any, text: str) -> None:
        echo(render.to_json(model) if self.args.json else text)


async def start(ctx: _Ctx) -> int:
    from pydantic import ValidationError

    from phasegate.domain.session.messages import SessionOptions

    a = ctx.args
    opts = dict(key_value(item, "--option") for item in a.option)
    if a.spec:
        opts["spec_path"] = _abspath(a.spec)
    if a.approver:
        opts["approvers"] = a.approver
    if a.approver_key:
        opts["approver_keys"] = [_approver_key(item) for item in a.approver_key]
    if a.no_prefetch:
        opts["prefetch"] = False
    try:
        options = SessionOptions.model_validate(opts)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise PhasegateError(first["msg"], where=f"--option {loc}") from None
    target = _abspath(a.target or ".")
    if not a.no_check:  # a typo must not leave a failed workflow behind
        from phasegate.client._start_checks import check_start

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
        printer = progress.printer_for(True)
        view = await progress.wait_with_progress(pg, sid, pg.wait_started(sid), printer=printer)
    url = render.ui_url(ctx.settings.web_ui_url, ctx.settings.namespace, sid)
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
    lines.append(f"web UI: {url}")
    echo("\n".join(lines))
    return EXIT_OK


async def status(ctx: _Ctx) -> int:
    pg = await ctx.client()
    sid = ctx.args.session_id
    view = await progress.wait_with_progress(
        pg, sid, pg.status(sid), printer=progress.printer_for(True)
    )
    # The run chain and any other run under the id come from the server's records.
    view = view.model_copy(update={"run_chain": await pg.run_chain(sid)})
    others = await pg.other_runs(sid, view.run_chain)
    text = "\n".join(
        [render.render_status(ctx.args.session_id, view), *render.render_other_runs(others)]
    )
    ctx.emit(view, text)
    return EXIT_OK


async def phase(ctx: _Ctx) -> int:
    pg = await ctx.client()
    view = await pg.phase(ctx.args.session_id, ctx.args.phase)
    return _show_or_refuse(ctx, view, render.render_phase)


async def task(ctx: _Ctx) -> int:
    pg = await ctx.client()
    view = await pg.task(ctx.args.session_id, ctx.args.phase, ctx.args.task)
    return _show_or_refuse(ctx, view, render.render_task)


def _show_or_refuse(ctx: _Ctx, view: Any, show: Callable[[Any], str]) -> int:
    """Print a phase/task view, or the refusal a future one gets (exit 3)."""
    from phasegate.domain.session.messages import SequenceViolation

    if isinstance(view, SequenceViolation):
        if ctx.args.json:
            echo(render.to_json(view))
        echo_err(f"refused: {render.render_violation(ctx.args.session_id, view)}")
        return EXIT_REFUSED
    ctx.emit(view, show(view))
    return EXIT_OK


async def submit(ctx: _Ctx) -> int:
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
    phase, result = await progress.wait_with_progress(
        pg,
        a.session_id,
        run(),
        phase=lambda: known.get("phase"),
        printer=progress.printer_for(not a.no_progress),
        timeout=a.timeout,
        timeout_hint=f"a worker may still take this submission: {again} returns its result; "
        f"`phasegate status {a.session_id}` shows where the session is",
    )
    ctx.emit(result, render.render_checkpoint(a.session_id, phase, result))
    return EXIT_OK if result.passed else EXIT_GATE_FAILED


async def decide(ctx: _Ctx) -> int:
    from phasegate.client import keys

    a = ctx.args
    name = _approver(a.as_name)
    pg = await ctx.client()
    status = await pg.status(a.session_id)
    phase = a.phase if a.phase is not None else status.current_phase
    nonce = signature = None
    if (keys.keys_dir(None) / f"{name}.key").is_file():
        # Holding the approver's private key: sign the decision (session, phase, decision,
        # comment, fresh nonce, and the evidence it approves). Sessions with signed
        # approvers accept nothing else.
        binding = status.approval_binding
        if binding:
            echo_err(
                f"signing for evidence sha256:{binding['evidence_sha256'][:16]}… of phase {phase}"
            )
        nonce, signature = keys.sign_decision(
            name,
            session_id=a.session_id,
            phase=phase,
            decision=a.decision,
            comment=a.comment or "",
            binding=binding,
        )
    view = await pg.decide(
        a.session_id,
        approver=name,
        decision=a.decision,
        phase=phase,
        comment=a.comment or "",
        nonce=nonce,
        signature=signature,
    )
    verb = "approved" if a.decision == "approve" else "rejected"
    ctx.emit(view, f"{verb} by {name}\n{render.render_status(a.session_id, view)}")
    return EXIT_OK


async def control(ctx: _Ctx) -> int:
    from phasegate.client import keys
    from phasegate.domain.session.messages import ControlRequest

    a = ctx.args
    name = _approver(a.as_name)
    req = ControlRequest(action=a.action, reason=a.reason or "", to_phase=a.to, actor=name)
    pg = await ctx.client()
    # Holding NAME's private key: sign the control (session, action, reason, rollback target,
    # fresh nonce). Sessions with approver or operator keys accept nothing else.
    signed = (keys.keys_dir(None) / f"{name}.key").is_file()
    result = await pg.control(a.session_id, req, key=name if signed else None)
    ctx.emit(result, render.render_control(result, name, signed=signed))
    return EXIT_OK


async def list_sessions(ctx: _Ctx) -> int:
    a = ctx.args
    pg = await ctx.client()
    if a.failed:
        rows = await pg.failed_starts(workflow_type=a.workflow, limit=a.limit)
    else:
        rows = await pg.list(status=a.status, workflow_type=a.workflow, limit=a.limit)
    ctx.emit(rows, render.render_listings(rows, failed=a.failed))
    return EXIT_OK


def _dumps(rows: list[Any]) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") for r in rows]


async def sessions_prune(ctx: _Ctx) -> int:
    """``phasegate sessions prune``: delete sessions that failed to start (with --yes)."""
    from phasegate.client._executions import parse_age

    a = ctx.args
    older = parse_age(a.older_than) if a.older_than else None
    pg = await ctx.client()
    rows = await pg.failed_starts(workflow_type=a.workflow, older_than=older, limit=a.limit)
    if not a.yes:
        if a.json:
            echo(render.to_json({"deleted": [], "would_delete": _dumps(rows)}))
        elif rows:
            echo(render.render_listings(rows, failed=True))
            echo(f"would delete {len(rows)} failed start(s); run again with --yes to delete")
        else:
            echo("no sessions that failed to start")
        return EXIT_OK
    for row in rows:
        await pg.delete(row)
    if a.json:
        echo(render.to_json({"deleted": _dumps(rows), "would_delete": []}))
    else:
        lines = [f"deleted {r.session_id} (run {r.run_id})" for r in rows]
        lines.append(
            f"deleted {len(rows)} failed start(s); Temporal removes them in the background "
            "(within about a minute)"
        )
        echo("\n".join(lines))
    return EXIT_OK


async def watch(ctx: _Ctx) -> int:
    from datetime import datetime

    from phasegate.domain.errors import SessionNotActive

    a = ctx.args
    pg = await ctx.client()
    # Progress (no worker, verify checks running) goes with the text; with --json,
    # stdout is one status object per line, so progress goes to stderr.
    printer = progress.ProgressPrinter(sys.stderr if a.json else sys.stdout)
    last: dict[str, Any] | None = None
    phase: int | None = None
    while True:
        lines = await progress.progress_lines(pg, a.session_id, phase)
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
                echo(f"{sep}{stamp}{render.render_status(a.session_id, view)}")
            last = dump
        if a.once or view.status in _FINISHED:
            return EXIT_OK
        printer.show(lines)  # the phase of verify lines is the one before this status
        await asyncio.sleep(a.interval)


def remote(handler: Callable[[_Ctx], Awaitable[int]]) -> Callable[..., int]:
    """Run an async command, turning Temporal client failures into phasegate errors."""

    def run(args: argparse.Namespace, settings: Settings) -> int:
        from temporalio.exceptions import WorkflowAlreadyStartedError
        from temporalio.service import RPCError

        args.temporal = True  # main() skips interpreter shutdown (see its docstring)
        try:
            return asyncio.run(handler(_Ctx(args, settings)))
        except WorkflowAlreadyStartedError as exc:
            raise PhasegateError(
                f"session {exc.workflow_id} already exists", hint="pick another --id, or omit it"
            ) from None
        except RPCError as exc:
            from phasegate.temporal import phasegate_error

            raise phasegate_error(exc, settings) from None

    return run


# ---------------------------------------------------------------- commands without Temporal


def spec_parse(args: argparse.Namespace, settings: Settings) -> int:
    from phasegate.activities import _safe_read as safe_read
    from phasegate.activities.tasks_md import parse_tasks_md

    path = Path(args.path).expanduser()
    if path.is_dir():
        path = path / "tasks.md"
    try:  # the same bounded reader sessions use: a regular file, at most 1 MiB
        data = safe_read.read_bytes(path, limit=safe_read.MiB, what="spec")
    except OSError as exc:
        raise PhasegateError(
            f"cannot read spec: {exc.strerror or exc}",
            where=str(path),
            hint="pass a tasks.md file or the directory holding it",
        ) from None
    spec = parse_tasks_md(data.decode("utf-8", errors="replace"), source=str(path))
    spec.sha256 = spec.sha256 or hashlib.sha256(data).hexdigest()
    echo(render.to_json(spec) if args.json else render.render_spec(spec))
    return EXIT_OK


def library_list(args: argparse.Namespace, settings: Settings) -> int:
    from phasegate.activities.library import list_workflows

    workflows = list_workflows(settings.library_paths)
    if args.json:
        echo(
            render.to_json(
                [
                    {
                        "workflow_type": w.metadata.workflow_type,
                        "name": w.metadata.name,
                        "description": w.metadata.description,
                        "phases": len(w.metadata.static_phases),
                        "dynamic": w.metadata.dynamic_phases,
                        "path": str(w.path),
                    }
                    for w in workflows
                ]
            )
        )
    else:
        echo(render.render_library(workflows))
    return EXIT_OK


def library_check(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from phasegate.activities.library_check import check_library

    report = check_library(args.dir)
    if args.json:
        echo(render.to_json(asdict(report)))
    else:
        echo(render.render_check(args.dir, report))
        if not report.workflows and (Path(args.dir) / "metadata.json").is_file():
            parent = Path(args.dir).resolve().parent
            echo(
                f"hint: {args.dir} is one workflow; check its library: "
                f"phasegate library check {parent}"
            )
    return EXIT_ERROR if report.errors else EXIT_OK
