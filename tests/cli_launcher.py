"""``python -I -S tests/cli_launcher.py SOCKET ARGS...``: one ``phasegate ARGS...`` run,
forked from the warm CLI process at SOCKET (tests/cli_helpers.py), as if it were
``python -m phasegate.client.cli ARGS...`` in this process's place.

Standard library only and no ``site`` (it starts in milliseconds): it hands its own
standard streams, working directory, environment and arguments to the warm process,
which forks a child that runs the CLI on them; it passes on the signals it gets (Ctrl-C,
terminate) and leaves with the child's exit status (killed by a signal: by that signal).
Killed outright, its connection closes and the warm process kills the child.
"""

import json
import os
import signal
import socket
import sys


def main() -> None:
    path, args = sys.argv[1], sys.argv[2:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(path)
    request = {"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    pid = json.loads(sock.recv(4096))["pid"]

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    while True:
        try:
            reply = sock.recv(4096)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
    status = json.loads(reply)["status"] if reply else 0x7F00  # warm process gone: 127
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 1)


main()
