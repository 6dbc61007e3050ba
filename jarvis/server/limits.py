"""Connection limits for the served apps: a deadline on request headers, one on answers a
client does not read, and a cap on open connections, as a uvicorn protocol
(uvicorn itself has neither: a client that connects and never finishes its headers holds a
connection and a file descriptor forever).

- `header_timeout`: the request line and headers must arrive within this many seconds of the
  connection opening (or of the first byte of the next request on a kept-alive connection);
  else the client gets `408 Request Timeout` and the connection is closed. Idle kept-alive
  connections are closed by uvicorn's `timeout_keep_alive`.
- `send_timeout`: a client that stops reading its answers (the transport pauses our writes
  because its buffers are full) gets this many seconds to read again; then the connection is
  dropped. A slow reader that makes progress is never cut off.
- `max_connections`: a connection past this many is answered `503 Service Unavailable` at
  once and closed, so the ones already open (and /health) keep being served.

The body deadline is per request, in `jarvis.server.guard`.
"""

from __future__ import annotations

import json
import resource
from dataclasses import dataclass
from typing import Any

# Room left for the process's own files (databases, logs, MCP pipes) below the fd limit.
FD_RESERVE = 128


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long headers may take, how many connections may be open, how long idle ones live."""

    header_timeout: float = 10.0
    max_connections: int = 512
    keep_alive: float = 30.0
    max_header_bytes: int = 16_384
    send_timeout: float = 30.0


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft open-files limit towards `wanted` (never past the hard limit); return
    how many connections fit under it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < target:
        new = target if hard == resource.RLIM_INFINITY else min(target, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_RESERVE))


def _reply(transport: Any, status: int, reason: str, message: str) -> None:
    """Answer with a complete response and close, without involving the app (the request may
    not even have been parsed)."""
    body = json.dumps({"detail": message, "error": {"message": message, "type": "server_error",
                                                    "code": status}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
    transport.write(head + body)
    if transport.can_write_eof():
        transport.write_eof()  # FIN after the reply: the client reads it, then end of stream
    transport.close()


def protocol_class(limits: ConnectionLimits) -> type:
    """uvicorn's h11 protocol with the header deadline and the connection cap."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class LimitedH11Protocol(H11Protocol):
        _header_timer: Any = None
        _send_timer: Any = None
        _rejected = False

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._rejected = True
                _reply(transport, 503, "Service Unavailable",
                       f"the server holds its maximum of {limits.max_connections} "
                       f"connections; try again shortly")
                return
            self._arm_header_timer()

        def data_received(self, data: bytes) -> None:
            if self._rejected:
                return
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                self._arm_header_timer()  # a request has begun but its headers are not in
            else:
                self._cancel_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            self._cancel_send_timer()
            super().connection_lost(exc)

        # The transport pauses us when the client stops reading (its buffers are full); a
        # client that never reads again would hold the connection and its request forever.
        def pause_writing(self) -> None:
            super().pause_writing()
            if self._send_timer is None:
                self._send_timer = self.loop.call_later(limits.send_timeout,
                                                        self._send_timed_out)

        def resume_writing(self) -> None:
            self._cancel_send_timer()  # progress: the client reads again
            super().resume_writing()

        def _cancel_send_timer(self) -> None:
            if self._send_timer is not None:
                self._send_timer.cancel()
                self._send_timer = None

        def _send_timed_out(self) -> None:
            self._send_timer = None
            if not self.transport.is_closing():
                self.transport.abort()  # nothing can be said to a client that does not read

        def _arm_header_timer(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout,
                                                          self._headers_timed_out)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_timed_out(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
                self._unset_keepalive_if_required()
                _reply(self.transport, 408, "Request Timeout",
                       f"the request headers did not arrive within {limits.header_timeout:g} "
                       f"seconds")

    return LimitedH11Protocol
