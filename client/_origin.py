"""Which Temporal server a phasegate command talks to, and how it was found.

The address comes from, first to last:

1. ``--address`` (the CLI sets ``TEMPORAL_ADDRESS`` for that one call);
2. ``TEMPORAL_ADDRESS``;
3. the address of the Temporal client profile (``TEMPORAL_PROFILE`` / its config file);
4. the running ``phasegate dev`` or ``phasegate server`` recorded in a ``dev.json``
   (:func:`dev_file_for`): ``$PHASEGATE_HOME/dev.json`` when ``PHASEGATE_HOME`` is set,
   else the nearest ``.phasegate/dev.json`` in the current folder or a parent, up to the
   project root (the first folder holding ``.git``; outside a repository, your home
   folder or the filesystem root). Never above the project root: a project around
   yours has its own server. The nearest file decides: when its server is gone the
   file is ignored with a note and no parent's server is used instead;
5. ``localhost:7233``.

:func:`find_server` answers with a :class:`ServerOrigin`, which the CLI and the MCP server
use to say which server they talk to when it is not the obvious one (a parent folder's
``dev.json``, another project's, a ``TEMPORAL_ADDRESS`` that passes over this project's
running server), to say where an unreachable address came from, and to name the command
that runs the server and its worker (``phasegate dev``, or ``phasegate server`` with
``phasegate worker``). :func:`remember` / :func:`origin_of` keep the answer per address
for the rest of the process, so an error raised far from the settings can say it.

Also the Web UI of the server actually used: the ``ui_url`` its ``dev.json`` records
(found by address when ``TEMPORAL_ADDRESS`` names that server), else, for a server on
this machine, the Temporal dev server's UI port (``PHASEGATE_UI_PORT``, or the
frontend port + 1000) when something answers there; otherwise unknown (None), and links
are left out with a hint to set ``PHASEGATE_UI_URL``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phasegate.domain.errors import PhasegateError

__all__ = [
    "DEFAULT",
    "DEFAULT_ADDRESS",
    "DEV_FILE",
    "ENV",
    "FLAG",
    "PROFILE",
    "ServerOrigin",
    "dev_file_for",
    "find_server",
    "in_the_users_words",
    "origin_of",
    "read_dev_file",
    "remember",
    "same_server",
    "the_workers_library",
]

DEFAULT_ADDRESS = "localhost:7233"
FLAG, ENV, PROFILE, DEV_FILE, DEFAULT = (
    "--address",
    "TEMPORAL_ADDRESS",
    "profile",
    "dev.json",
    "default",
)
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


@dataclass(frozen=True)
class ServerOrigin:
    """The Temporal server settings name, and how it was found.

    Attributes:
        address: host:port.
        source: ``--address``, ``TEMPORAL_ADDRESS``, ``profile``, ``dev.json`` or ``default``.
        dev_file: The ``dev.json`` that named the server (source ``dev.json``), or the
            one a ``TEMPORAL_ADDRESS`` matched.
        command: What wrote ``dev_file``: ``phasegate dev`` or ``phasegate server``.
        task_queue: The task queue of the worker ``phasegate dev`` runs, when recorded.
        ui_url: The server's Web UI, when known.
        own: ``dev_file`` is the current folder's own ``.phasegate/dev.json``.
        via_home: ``dev_file`` is ``$PHASEGATE_HOME/dev.json``.
        note: What a person should know: a running server passed over, a stale file,
            where no ``dev.json`` was found.
    """

    address: str
    source: str
    dev_file: str | None = None
    command: str | None = None
    task_queue: str | None = None
    ui_url: str | None = None
    own: bool = False
    via_home: bool = False
    note: str | None = None

    @property
    def folder(self) -> str | None:
        """The project folder whose ``dev.json`` named the server."""
        if self.dev_file is None:
            return None
        parent = Path(self.dev_file).parent
        return str(parent.parent if parent.name == ".phasegate" else parent)

    @property
    def how(self) -> str:
        """How the address was found, for a reader: ``from .phasegate/dev.json in /p``."""
        if self.source == DEV_FILE:
            if self.via_home:
                return f"from PHASEGATE_HOME's dev.json, {self.dev_file}"
            return f"from .phasegate/dev.json in {self.folder}"
        if self.source == PROFILE:
            return "from the Temporal profile (TEMPORAL_PROFILE / TEMPORAL_CONFIG_FILE)"
        if self.source == DEFAULT:
            return "the default" + (f": {self.note}" if self.note else "")
        return f"from {self.source}"

    @property
    def obvious(self) -> bool:
        """Whether the person running the command knows which server it is without being
        told: the one typed (``--address``), the current folder's own ``phasegate dev`` (or
        the one ``PHASEGATE_HOME`` names), an explicit address that passes over no server
        this project runs, or the default."""
        if self.source == DEV_FILE:  # a parent folder's, or another project's: say so
            return (self.own or self.via_home) and not self.note
        return self.source == FLAG or self.source == DEFAULT or not self.note

    def header(self) -> str:
        """One line naming the server and how it was found (and any note)."""
        line = f"Temporal at {self.address} ({self.how}"
        if self.command and self.source == DEV_FILE:
            line += f", `{self.command}`"
        line += ")"
        if self.note and self.source != DEFAULT:
            line += f"; note: {self.note}"
        return line

    def start_hint(self) -> str:
        """What to do when nothing answers at the address."""
        if self.source == DEV_FILE:
            command = self.command or "phasegate dev"
            return (
                f"the `{command}` that wrote it no longer answers: start `{command}` again "
                f"in {self.folder}, or point TEMPORAL_ADDRESS (or --address) at another server"
            )
        if self.source == DEFAULT:
            return (
                "start `phasegate dev` in your project folder (commands run there or in its "
                "subfolders find it), or point TEMPORAL_ADDRESS (or --address) at your server"
            )
        hint = "start one with `phasegate server`, or point TEMPORAL_ADDRESS (or --address) "
        hint += "at your cluster"
        return hint + (f"; {self.note}" if self.note else "")

    def worker_hint(self, task_queue: str) -> str:
        """How to get a worker polling ``task_queue``, in the words of the command the
        person runs (``phasegate dev`` runs one; ``phasegate server`` does not)."""
        if self.dev_file and self.command == "phasegate server":
            return (
                f"`phasegate server` runs no worker: run `phasegate worker` in {self.folder} "
                f"(task queue {task_queue!r})"
            )
        if self.dev_file and self.command:
            if self.task_queue and self.task_queue != task_queue:
                return (
                    f"the worker of `phasegate dev` in {self.folder} serves task queue "
                    f"{self.task_queue!r}, not {task_queue!r}: drop PHASEGATE_TASK_QUEUE "
                    "(--task-queue) here, or run `phasegate worker` with it"
                )
            return f"check that `phasegate dev` is still running in {self.folder} (its worker)"
        return (
            f"check that a worker is running on task queue {task_queue!r} (`phasegate dev` "
            "in your project, or `phasegate worker` beside your server)"
        )


# ---------------------------------------------------------------- per process

_FOUND: dict[str, ServerOrigin] = {}


def remember(origin: ServerOrigin) -> None:
    """Record how ``origin.address`` was found, for errors raised later in the process."""
    _FOUND[origin.address] = origin


def origin_of(address: str) -> ServerOrigin | None:
    """How this process found ``address`` (None: settings built by hand, not found)."""
    return _FOUND.get(address)


def in_the_users_words(err: PhasegateError) -> PhasegateError:
    """An error the worker raised, in the words of the person who reads it: the library
    it searched was the worker's (:func:`the_workers_library`), and where ``phasegate
    dev`` runs the worker (its dev.json found the server), hints name ``phasegate dev``
    where the worker wrote ``phasegate worker`` (it cannot know how it was started)."""
    err = the_workers_library(err)
    origin = next(reversed(_FOUND.values()), None)
    if origin is not None and origin.dev_file and origin.command == "phasegate dev":
        err.message = _DEV_WORDS.sub("phasegate dev", err.message)
        err.hint = _DEV_WORDS.sub("phasegate dev", err.hint) if err.hint else err.hint
    return err


# `phasegate worker` alone (its flags, e.g. --verify-only, are not `phasegate dev`'s)
_DEV_WORDS = re.compile(r"phasegate worker(?! --)")


def the_workers_library(err: PhasegateError) -> PhasegateError:
    """``err`` as the worker raised it, saying that the library searched was the worker's
    (``PHASEGATE_LIBRARY`` where the worker started), not this shell's, and how to change
    it: a "workflow not found" whose hint says to set ``PHASEGATE_LIBRARY`` reads as if
    this shell's setting counted."""
    if err.code != "workflow_not_found" and "PHASEGATE_LIBRARY" not in (err.hint or ""):
        return err
    if err.code == "workflow_not_found" and " not found in " in err.message:
        head, _, folders = err.message.partition(" not found in ")
        err.message = f"{head} not found in the worker's library ({folders})"
    origin = next(reversed(_FOUND.values()), None)  # the server this process talks to
    worker = "the worker (`phasegate dev`, or `phasegate worker`)"
    if origin is not None and origin.dev_file and origin.command == "phasegate dev":
        worker = f"`phasegate dev` in {origin.folder}"
    elif origin is not None:
        worker = f"the worker of {origin.address}"
    tail = f"the worker reads PHASEGATE_LIBRARY where it starts: set it there and restart {worker}"
    shell = os.environ.get("PHASEGATE_LIBRARY")
    if shell:
        tail += f" (this shell's PHASEGATE_LIBRARY={shell} does not reach it)"
    hint = (err.hint or "").replace("; add a library folder with PHASEGATE_LIBRARY", "")
    err.hint = f"{hint}; {tail}" if hint else tail
    return err


# ---------------------------------------------------------------- dev.json


def _cwd() -> Path | None:
    try:
        return Path.cwd()
    except OSError:  # the folder was deleted under us
        return None


def _project_folders(cwd: Path) -> list[Path]:
    """``cwd`` and its parents up to the project root (``.git``), home or ``/``."""
    home = Path.home()
    folders = []
    for folder in (cwd, *cwd.parents):
        folders.append(folder)
        if (folder / ".git").exists() or folder == home:
            break
    return folders


def dev_file_for(env: Mapping[str, str], cwd: Path | None = None) -> tuple[Path | None, str]:
    """The ``dev.json`` that decides (see the module docstring), and where it was looked
    for (for a note when there is none): ``$PHASEGATE_HOME/dev.json`` when that is set,
    else the nearest ``.phasegate/dev.json`` up to the project root."""
    if env.get("PHASEGATE_HOME"):
        path = Path(env["PHASEGATE_HOME"]) / "dev.json"
        return (path if path.is_file() else None), f"no dev.json in PHASEGATE_HOME {path.parent}"
    cwd = cwd or _cwd()
    if cwd is None:
        return None, "the current folder is gone"
    folders = _project_folders(cwd)
    for folder in folders:
        path = folder / ".phasegate" / "dev.json"
        if path.is_file():
            return path, ""
    if len(folders) == 1:
        return None, f"no .phasegate/dev.json in {cwd}"
    return None, f"no .phasegate/dev.json in {cwd} or a parent up to {folders[-1]}"


def read_dev_file(path: Path) -> tuple[dict[str, Any] | None, str]:
    """``({address, ui_url, pid, ...}, "")`` when the process that wrote ``path`` lives and
    the address answers; else ``(None, why it is ignored)``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        address, pid = data["address"], data["pid"]
        host, _, port = address.rpartition(":")
        port_number = int(port)
        if not isinstance(pid, int):
            raise TypeError("pid")
    except FileNotFoundError:
        return None, "it is gone"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, "it is not a dev file phasegate wrote"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None, f"process {pid} that wrote it has exited"
    except OSError:
        pass  # another user's process: it exists
    if not _answers(host, port_number):
        return None, f"nothing answers at {address}"
    return data, ""


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=0.5):
            return True
    except OSError:
        return False


_NOTED: set[str] = set()


def _note_stale(path: Path, reason: str) -> None:
    """Say once per process that a stale ``dev.json`` is ignored."""
    if str(path) in _NOTED:
        return
    _NOTED.add(str(path))
    print(
        f"phasegate: note: ignoring {path}: {reason} (start a server with `phasegate dev`, "
        "or set TEMPORAL_ADDRESS)",
        file=sys.stderr,
        flush=True,
    )


# ---------------------------------------------------------------- the answer


def _split(address: str) -> tuple[str, int | None]:
    host, _, port = address.rpartition(":")
    return host.lower(), (int(port) if port.isdigit() else None)


def same_server(a: str, b: str) -> bool:
    """Whether two addresses name one server (``localhost:7233`` is ``127.0.0.1:7233``)."""
    (host_a, port_a), (host_b, port_b) = _split(a), _split(b)
    if port_a != port_b:
        return False
    return host_a == host_b or (host_a in _LOOPBACK and host_b in _LOOPBACK)


def _guess_ui(address: str, env: Mapping[str, str]) -> str | None:
    """The Web UI of a dev server on this machine, if one answers where it would be."""
    host, port = _split(address)
    if host not in _LOOPBACK or port is None:
        return None
    ui_port = int(env.get("PHASEGATE_UI_PORT") or port + 1000)
    return f"http://localhost:{ui_port}" if _answers("127.0.0.1", ui_port) else None


def _profile_address(env: Mapping[str, str]) -> str | None:
    """The address of the Temporal client profile, if one names it (a broken profile is
    reported when connecting, not here)."""
    from temporalio.envconfig import ClientConfigProfile

    try:
        return ClientConfigProfile.load(override_env_vars=dict(env)).address or None
    except (RuntimeError, ValueError, OSError):
        return None


def _from_dev_file(path: Path, data: dict[str, Any], env: Mapping[str, str]) -> ServerOrigin:
    cwd = _cwd()
    own = cwd is not None and path.resolve() == (cwd / ".phasegate" / "dev.json").resolve()
    command = data.get("command")
    queue = data.get("task_queue")
    ui = data.get("ui_url")
    return ServerOrigin(
        address=str(data["address"]),
        source=DEV_FILE,
        dev_file=str(path.absolute()),
        command=command if isinstance(command, str) else None,
        task_queue=queue if isinstance(queue, str) else None,
        ui_url=ui if isinstance(ui, str) and ui else None,
        own=own,
        via_home=bool(env.get("PHASEGATE_HOME")),
    )


def _project_server(env: Mapping[str, str]) -> ServerOrigin | None:
    """The running server of the current folder's project (the walk, PHASEGATE_HOME
    aside), to name when another one is used instead."""
    path, _ = dev_file_for({k: v for k, v in env.items() if k != "PHASEGATE_HOME"})
    data = read_dev_file(path)[0] if path is not None else None
    return _from_dev_file(path, data, {}) if path is not None and data else None


def _passed_over(
    origin: ServerOrigin, env: Mapping[str, str], found: ServerOrigin | None
) -> ServerOrigin:
    """``origin`` with a note when the current folder's project runs another server
    (``found``: the server of the dev.json that decides, when it is the project's)."""
    project = _project_server(env) if env.get("PHASEGATE_HOME") else found
    if project is None or same_server(project.address, origin.address):
        return origin
    fix = {
        ENV: "unset TEMPORAL_ADDRESS to use it",
        PROFILE: f"set TEMPORAL_ADDRESS={project.address} to use it",
    }.get(origin.source, "unset PHASEGATE_HOME to use it")
    by = f"`{project.command}`" if project.command else "server"
    where = project.how.removeprefix("from ")
    return replace(origin, note=f"this project's {by} ({where}) serves {project.address}: {fix}")


def find_server(env: Mapping[str, str]) -> ServerOrigin:
    """Which server ``env`` names and how (see the module docstring). A stale ``dev.json``
    that would have decided is ignored with a note on stderr (once per process)."""
    dev_path, looked = dev_file_for(env)
    data, reason = read_dev_file(dev_path) if dev_path is not None else (None, "")
    found = _from_dev_file(dev_path, data, env) if dev_path is not None and data else None
    address, source = env.get("TEMPORAL_ADDRESS") or None, ENV
    if address is None:
        address, source = _profile_address(env), PROFILE
    if address:
        if found is not None and same_server(found.address, address):
            # the running dev server, named explicitly: its Web UI and its command
            origin = replace(found, address=address, source=source, own=False, via_home=False)
        else:
            origin = ServerOrigin(address=address, source=source, ui_url=_guess_ui(address, env))
        return _passed_over(origin, env, found)
    if found is not None:
        return _passed_over(found, env, found) if found.via_home else found
    if dev_path is not None:
        _note_stale(dev_path, reason)
        looked = f"{dev_path} is ignored ({reason})"
    return ServerOrigin(
        address=DEFAULT_ADDRESS,
        source=DEFAULT,
        ui_url=_guess_ui(DEFAULT_ADDRESS, env),
        note=looked,
    )
