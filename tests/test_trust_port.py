"""``phasegate server --port P`` restarts at once after a crash (issue 14, finding 7): the
port probe binds with ``SO_REUSEADDR``, so connections left in TIME_WAIT by the server
that died do not make its port look taken, while a live listener still does."""

from __future__ import annotations

import socket
import sys
import time

import pytest
from ports import free_port

from phasegate.client.devserver import choose_port
from phasegate.domain.errors import PhasegateError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="TIME_WAIT binds differ")


def _time_wait_port() -> int:
    """A port whose server closed its side of a connection first, then stopped listening:
    what a crashed dev server leaves behind (the kernel keeps the pair in TIME_WAIT)."""
    port = free_port()
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's side closes first: its address goes to TIME_WAIT
        time.sleep(0.05)
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):  # what the old probe did
        plain.bind(("127.0.0.1", port))
    return port


def test_a_port_in_time_wait_is_free() -> None:
    port = _time_wait_port()
    assert choose_port(port, 7233, "--port") == port  # --port P: restart at once
    assert choose_port(None, port, "--port") == port  # the default port is taken again


def test_a_port_with_a_listener_is_busy() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(PhasegateError) as err:
            choose_port(port, 7233, "--port")
        assert str(err.value) == (
            f"--port: port {port} is already in use "
            "(hint: leave out --port to get a free port, or choose another)"
        )
        assert choose_port(None, port, "--port") != port  # the default moves aside


def test_a_listener_on_every_address_is_busy_too() -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(PhasegateError):
            choose_port(port, 7233, "--port")
