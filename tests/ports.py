"""Ports for the servers the tests start, drawn where nothing else draws them.

``bind(("127.0.0.1", 0))`` hands out a port from the OS's ephemeral range and forgets it
once the probe closes: with several test processes (pytest-xdist) each starting dev
servers, another process's client socket, or a server's own randomly chosen metrics or
HTTP port, can take it before the server the test started binds it, and that test fails
("ready", then the server cannot listen). These ports come from below the ephemeral range,
which the OS never assigns, and each pytest-xdist worker draws from a share of its own;
each is checked free when drawn.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from pathlib import Path

__all__ = ["free_port"]

_FLOOR = 10000
_SHARE = 2000  # ports a worker draws from (it cycles through them)


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; elsewhere the share is checked before use anyway


def _share() -> list[int]:
    """This process's ports: its worker's share, starting at a place its pid picks (two
    runs side by side, each with a ``gw0``, do not walk the same ports in step); none
    where the range below the ephemeral one is too small to give each worker a share."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    shares = (_ephemeral_floor() - _FLOOR) // _SHARE
    index = int(worker) if worker.isdigit() else 0
    if shares < 2 or index >= shares:
        return []
    start = _FLOOR + index * _SHARE
    offset = os.getpid() * 7919 % _SHARE
    return [start + (offset + i) % _SHARE for i in range(_SHARE)]


_lock = threading.Lock()
_ports = _share()
_next = itertools.cycle(_ports) if _ports else iter(())


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return False  # something listens (bound on another address)
    except OSError:
        return True


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, from this test process's own share."""
    with _lock:
        for port in itertools.islice(_next, len(_ports)):
            if _free(port):
                return port
    with socket.socket() as s:  # no share, or all of it taken: let the OS pick
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
