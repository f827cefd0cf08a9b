"""What every command group of the CLI shares: exit codes, the output chokepoints,
the argument parser class and its shared flags, and how a command reaches Temporal.

Remote commands are ``async def name(ctx)`` wrapped by :func:`remote`; commands that
need no server are plain ``def name(args, settings)``. Every handler returns an exit
code and raises ``PhasegateError`` for anything a person must fix.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from phasegate.client.cli._render import terminal_safe, to_json
from phasegate.domain.errors import PhasegateError

if TYPE_CHECKING:
    from phasegate.client.api import PhasegateClient
    from phasegate.domain.settings import Settings

__all__ = [
    "EXIT_ERROR",
    "EXIT_GATE_FAILED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "JSON",
    "SESSION",
    "Ctx",
    "Parser",
    "abspath",
    "approver",
    "approver_key",
    "echo",
    "echo_err",
    "remote",
    "say_server",
    "signer",
    "typed_address",
    "web_ui_hint",
]

EXIT_OK, EXIT_ERROR, EXIT_GATE_FAILED, EXIT_REFUSED = 0, 1, 2, 3


def echo(text: str) -> None:
    """Write ``text`` to stdout, terminal-safe (agents' text may hold escape sequences)."""
    print(terminal_safe(text), flush=True)


def echo_err(text: str) -> None:
    """Write ``text`` to stderr, terminal-safe (as :func:`echo`)."""
    print(terminal_safe(text), file=sys.stderr, flush=True)


# ---------------------------------------------------------------- parsing


class Parser(argparse.ArgumentParser):
    """Usage errors exit 1: exit code 2 means "gate failed" for ``submit``."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"error: {message}\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        # Usage errors quote the arguments given (an id pasted from an agent's output).
        super()._print_message(terminal_safe(message) if message else message, file)


JSON = Parser(add_help=False)
"""Parent parser of every command that can print its message model (``--json``)."""
JSON.add_argument("--json", action="store_true", help="print the message model as JSON")

SESSION = Parser(add_help=False)
"""Parent parser of every command about one session (its ``ID``)."""
SESSION.add_argument("session_id", metavar="ID", help="session (workflow) id")


def abspath(value: str) -> str:
    return str(Path(value).expanduser().resolve())


def approver_key(item: str) -> dict[str, str]:
    """``NAME=PUBLIC_KEY`` as given, or ``NAME`` for a public key in the local key dir."""
    if "=" in item:
        name, _, public = item.partition("=")
        return {"name": name.strip(), "public_key": public.strip()}
    from phasegate.client import keys

    return keys.public_key(item).model_dump()


def approver(name: str | None) -> str:
    """Who acts: ``--as NAME``, else ``$PHASEGATE_APPROVER``, else your user name."""
    if name:
        return name
    if os.environ.get("PHASEGATE_APPROVER"):
        return os.environ["PHASEGATE_APPROVER"]
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in a bare container
        raise PhasegateError("who is deciding?", hint="pass --as NAME") from None


def signer(as_name: str | None) -> tuple[str, bool]:
    """Who acts (as :func:`approver`), and whether you hold their private key (then
    decisions, controls and replan requests are signed with it)."""
    from phasegate.client import keys

    name = approver(as_name)
    return name, (keys.keys_dir(None) / f"{name}.key").is_file()


# ---------------------------------------------------------------- commands needing Temporal


class Ctx:
    """What a remote command gets: parsed args, settings and a lazy connection."""

    def __init__(self, args: argparse.Namespace, settings: Settings) -> None:
        self.args = args
        self.settings = settings
        typed_address(args, settings)

    async def client(self) -> PhasegateClient:
        """A connected client; says on stderr which server it is when that is not the
        obvious one (a parent folder's or another project's ``phasegate dev``)."""
        from phasegate.client.api import PhasegateClient
        from phasegate.temporal import connect

        temporal = await connect(self.settings)  # raises TemporalUnreachable with the fix
        say_server(self.settings)
        return PhasegateClient(temporal, self.settings.task_queue)

    def web_ui(self, workflow_id: str) -> str | None:
        """The workflow's page in the Web UI of the server used, or None when that UI is
        unknown (:func:`web_ui_hint` says what to set)."""
        if not self.settings.ui_url:
            return None
        base = self.settings.ui_url.rstrip("/")
        return f"{base}/namespaces/{self.settings.namespace}/workflows/{workflow_id}"

    def emit(self, model: Any, text: str) -> None:
        echo(to_json(model) if self.args.json else text)


def typed_address(args: argparse.Namespace, settings: Settings) -> None:
    """Record that ``--address`` named the server (``main`` passes it on as
    ``TEMPORAL_ADDRESS``): errors and ``phasegate which`` then say so."""
    if not getattr(args, "address", None):
        return
    from dataclasses import replace

    from phasegate.client._origin import FLAG, ServerOrigin, origin_of, remember

    address = settings.temporal_address
    found = origin_of(address) or ServerOrigin(address=address, source=FLAG)
    remember(replace(found, source=FLAG, note=None))


def web_ui_hint(settings: Settings) -> str:
    """What to do when the server's Web UI is unknown (no link is shown)."""
    return f"unknown for {settings.temporal_address}: set PHASEGATE_UI_URL to link it"


_SAID: set[str] = set()


def say_server(settings: Settings, *, always: bool = False, prefix: str = "phasegate") -> None:
    """One line on stderr naming the server and how it was found, when that is not the
    obvious one (or ``always``), once per process."""
    from phasegate.temporal import server_origin

    origin = server_origin(settings)
    if origin is None or origin.address in _SAID or (origin.obvious and not always):
        return
    _SAID.add(origin.address)
    echo_err(f"{prefix}: {origin.header()}")


def remote(handler: Callable[[Ctx], Coroutine[Any, Any, int]]) -> Callable[..., int]:
    """Run an async command, turning Temporal client failures into phasegate errors."""

    def run(args: argparse.Namespace, settings: Settings) -> int:
        from temporalio.exceptions import WorkflowAlreadyStartedError
        from temporalio.service import RPCError

        args.temporal = True  # main() skips interpreter shutdown (see its docstring)
        try:
            return asyncio.run(handler(Ctx(args, settings)))
        except WorkflowAlreadyStartedError as exc:
            raise PhasegateError(
                f"session {exc.workflow_id} already exists", hint="pick another --id, or omit it"
            ) from None
        except RPCError as exc:
            from phasegate.temporal import phasegate_error

            raise phasegate_error(exc, settings) from None
        except PhasegateError as exc:
            raise _this_shells_library(exc, settings) from None

    return run


def _this_shells_library(err: PhasegateError, settings: Settings) -> PhasegateError:
    """``phasegate start``'s own check of WORKFLOW_TYPE searched this shell's library, not
    the worker's: say so (a worker's "not found" says it searched the worker's)."""
    if not (err.where or "").startswith("WORKFLOW_TYPE") or " not found in " not in err.message:
        return err
    head, _, folders = err.message.partition(" not found in ")
    err.message = f"{head} not found in this shell's library ({folders})"
    shell = os.environ.get("PHASEGATE_LIBRARY")
    setting = f"PHASEGATE_LIBRARY={shell}" if shell else "PHASEGATE_LIBRARY is not set"
    tail = (
        f"`phasegate start` checks this shell's library first ({setting}); the worker "
        "searches its own: set PHASEGATE_LIBRARY here to the folder holding the workflow, "
        "or pass --no-check when only the worker has it"
    )
    hint = (err.hint or "").replace("; add a library folder with PHASEGATE_LIBRARY", "")
    err.hint = f"{hint}; {tail}" if hint else tail
    return err
