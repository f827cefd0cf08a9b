"""The ``phasegate`` command line: run the dev server and worker, drive sessions.

One module per command group, each adding its commands, their options and their
handlers to the parser (``register``): ``sessions`` (start, status, phase, submit,
list, sessions prune, watch), ``tasks`` (task list|next|start|done|block|split|show),
``task_markers`` (session use|current, doctor), ``approvals`` (approve, reject, control),
``library`` (spec parse, library list|check, index, search), ``keys``,
``servers`` (dev, server, worker, mcp), ``orchestrate`` (orchestrate, plan show) and
``sealed`` (history, codec-server: sealed prefetches as operators read them).

Read commands print compact text by default and the message model's JSON with
``--json``. Exit codes are meant for scripts:

====  ==========================================================
0     success (``submit``: the checkpoint passed)
1     an error; one line ``error: ...`` on stderr, never a traceback
2     ``submit``: the gate refused the evidence (problems printed);
      ``task done``: a criterion failed (the task stays active);
      ``task next``/``start``: a pre-analysis step failed (the task is blocked)
3     refused: ``phase``/``task show --phase``/``submit`` of a phase not reached;
      ``orchestrate --no-wait``: the run waits on a person or a coding agent;
      ``graph run``/``answer``: the run waits for an answer
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
from collections.abc import Iterator

from phasegate.client.cli import (
    approvals,
    graphs,
    keys,
    library,
    orchestrate,
    sealed,
    servers,
    sessions,
    task_markers,
    tasks,
)
from phasegate.client.cli._common import (
    EXIT_ERROR,
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    Parser,
    echo_err,
)
from phasegate.domain.errors import PhasegateError

__all__ = ["EXIT_ERROR", "EXIT_GATE_FAILED", "EXIT_OK", "EXIT_REFUSED", "build_parser", "main"]

# the order of --help
_GROUPS = (
    servers,
    sessions,
    tasks,
    task_markers,
    approvals,
    library,
    graphs,
    keys,
    orchestrate,
    sealed,
)


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every ``phasegate`` command."""
    p = Parser(prog="phasegate", description="Durable phase-gated workflows on Temporal.")
    p.add_argument("--address", help="Temporal host:port (overrides TEMPORAL_ADDRESS)")
    p.add_argument("--namespace", help="Temporal namespace (overrides TEMPORAL_NAMESPACE)")
    p.add_argument("--task-queue", help="worker task queue (overrides PHASEGATE_TASK_QUEUE)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for group in _GROUPS:
        group.register(sub)
    return p


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


def main(argv: list[str] | None = None) -> int:
    """Run one ``phasegate`` command and return its exit code (see the module docstring).

    Called without ``argv`` (the console script, ``python -m phasegate.client.cli``) it
    is the whole process: after a command that used the Temporal client it leaves with
    ``os._exit``, because the SDK's Rust threads can abort interpreter shutdown
    (temporalio/sdk-python#300: "PyGILState_Release ... must be current").
    """
    try:
        words = orchestrate.default_subcommand(sys.argv[1:] if argv is None else argv)
        words = tasks.legacy_words(words)  # `task SESSION PHASE TASK` of earlier releases
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
            echo_err(f"error: {exc}")
            if exc.code == "phase_sequence_violation":  # a phase not reached (or done)
                return EXIT_REFUSED
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            echo_err(f"error: {loc}: {first['msg']}" if loc else f"error: {first['msg']}")
        except KeyboardInterrupt:
            return EXIT_OK if args.command == "watch" else 130
        except BrokenPipeError:  # `phasegate phase ID | head`: the reader left, not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        return EXIT_ERROR
