"""Running the app with uvicorn: in the foreground (`jarvis serve`) or in a thread (tests,
benchmarks). The socket is bound here, so port 0 works and the real address is known."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from jarvis.errors import UserError
from jarvis.server.limits import ConnectionLimits

BACKLOG = 2048


def bind(host: str, port: int, listen: bool = True) -> socket.socket:
    """A TCP socket bound to host:port (a busy port is a UserError here, before anything
    starts). `listen=False` leaves it closed to clients: `serve_forever` opens it once the
    app and the server are built, so no client waits on a half-started server."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose
    # proto says TCP, and without it every small response waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another "
                        f"--port (0 picks a free one) or --host") from None
    if listen:
        sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def limits_of(app: Any) -> ConnectionLimits:
    """The connection limits in the app's ServeSettings (`app.state.settings`), else the
    defaults."""
    settings = getattr(getattr(app, "state", None), "settings", None)
    if settings is None:
        return ConnectionLimits()
    return ConnectionLimits(header_timeout=settings.header_timeout,
                            max_connections=settings.max_connections,
                            send_timeout=settings.send_timeout)


def _server(app: Any, log_level: str, limits: ConnectionLimits | None = None) -> Any:
    import uvicorn

    from jarvis.server.limits import protocol_class, raise_fd_limit

    limits = limits or limits_of(app)
    fitting = raise_fd_limit(limits.max_connections)
    if fitting < limits.max_connections:
        limits = dataclasses.replace(limits, max_connections=fitting)
    # ws="none": jarvis serves no WebSocket route, so an Upgrade is never taken (whatever
    # WebSocket library is installed) and the handshake is an HTTP request like any other,
    # through the same key, Host and Origin checks.
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on", ws="none",
                            timeout_keep_alive=limits.keep_alive, server_header=False,
                            http=protocol_class(limits),
                            h11_max_incomplete_event_size=limits.max_header_bytes)
    return uvicorn.Server(config)


def serve_forever(app: Any, sock: socket.socket, log_level: str = "warning",
                  limits: ConnectionLimits | None = None,
                  announce: Callable[[], Any] | None = None) -> None:
    """Serve on `sock` until interrupted (uvicorn handles SIGINT/SIGTERM).

    The server is built (uvicorn imported) before the socket listens and `announce` runs, so
    a client that connects as soon as the port accepts, or the URL is printed, is answered
    at once."""
    server = _server(app, log_level, limits)
    sock.listen(BACKLOG)
    if announce is not None:
        announce()
    server.run(sockets=[sock])


class ServerThread:
    """The app served on a loopback port from a background thread.

        with ServerThread(app) as server:
            httpx.get(server.url + "/jarvis/tools", headers=server.headers)

    `headers` carry the app's API key or owner token (`token`), as a client must.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0,
                 log_level: str = "warning", limits: ConnectionLimits | None = None) -> None:
        self.app = app
        self.sock = bind(host, port)
        self.url = url_of(self.sock)
        key = getattr(getattr(app, "state", None), "access_key", None)
        # What a client of this server sends: the API key or the owner's token.
        self.headers: dict[str, str] = {"Authorization": f"Bearer {key}"} if key else {}
        self.token: str | None = key
        self._server = _server(app, log_level, limits)
        self._server.install_signal_handlers = lambda: None  # only the main thread may
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]},
                                        daemon=True, name="jarvis-serve")

    def start(self, timeout: float = 15.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        if not self._server.started:
            raise RuntimeError("the jarvis server did not start")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
