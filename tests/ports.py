"""A loopback port that nothing listens on, for tests of unreachable servers."""

from __future__ import annotations

import atexit
import socket

_held: list[socket.socket] = []


def closed_port() -> int:
    """A loopback port that refuses connections for the rest of this test process.

    The socket stays bound (never listening): a port merely bound and released could be
    taken by a server another test, or another test process, starts meanwhile; then the
    "unreachable" server would answer.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _held.append(sock)
    return sock.getsockname()[1]


@atexit.register
def _release() -> None:
    for sock in _held:
        sock.close()
