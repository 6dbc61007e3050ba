"""The guard in front of `jarvis serve` and `jarvis mcp serve --http`: who may talk to them
and for how long.

A browser page can make a victim's browser send requests to 127.0.0.1 (DNS rebinding: a
hostname that first resolves to the attacker, then to 127.0.0.1; or a plain cross-site form
POST). So, before any route runs:

- without an API key, the Host header must be a loopback name (`localhost`) or a loopback IP
  literal (`127.0.0.1`, `127.0.0.2`, `[::1]`), with or without the port: a rebinding page's
  Host is its own hostname;
- an Origin header must be this server's own origin (same Host) or one listed in
  `[serve] allowed_origins`: a page on another origin is refused even with a simple request;
- a POST with a body must say `Content-Type: application/json` (a cross-site form can only
  send text/plain, form-urlencoded or multipart without a preflight), and so must an empty
  POST that says one of those form types (a form with no fields); a second Origin or
  Content-Type header is a 400. The one exception is an approval page's own form
  (form-urlencoded, to /jarvis/approve/ID), which carries a signed single-use token and must
  come from the page itself (jarvis.server.approvals);
- WebSocket handshakes get the same Host and Origin checks (the same-origin policy does not
  cover them);
- a request with both Content-Length and Transfer-Encoding is refused and its connection
  closed (what a proxy in front took for its body cannot be served as a request of its own);
- the body is read under a deadline (`body_timeout`, 408) and a size cap (413) before the app
  sees it, so a client trickling a body cannot hold a request open forever.

With an API key, the key check (jarvis.server.http.ApiKeyMiddleware) runs in front of this
guard, so no body is read for a client without the key.

Header deadlines and the connection cap live in `jarvis.server.runner` (they are about the
connection, not a request).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jarvis.server.http import TOKEN_PATHS, error_response

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# What a cross-site HTML form (or a no-cors fetch) may send without a CORS preflight.
FORM_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded",
                        "multipart/form-data"})
# Request line and headers together; uvicorn's h11 limit only applies while a request is still
# incomplete, so one that arrives whole in a single read is measured here.
MAX_HEADER_BYTES = 16_384


def split_host(value: str) -> tuple[str, str]:
    """'[::1]:8765' -> ('::1', '8765'); 'localhost' -> ('localhost', '')."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest.removeprefix(":")
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return host, port
    return value, ""


@functools.lru_cache(maxsize=256)  # asked on every request, of a handful of Host values
def is_loopback_host(value: str) -> bool:
    """Whether a Host header names this machine in a way DNS cannot rebind: `localhost` or a
    loopback IP literal, with an optional numeric port."""
    host, port = split_host(value)
    if port and not port.isdigit():
        return False
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _count(scope: Scope, name: bytes) -> int:
    return sum(1 for key, _ in scope.get("headers", ()) if key == name)


def _has_body(scope: Scope) -> bool:
    """Whether the request says it carries a body (a POST without one, like the ORS client's
    /delete, needs no Content-Type)."""
    length = _header(scope, b"content-length")
    if length is not None:
        return length.strip() != "0"
    return _header(scope, b"transfer-encoding") is not None


class RequestGuard:
    """ASGI middleware: Host / Origin / Content-Type checks and a bounded body read.

    Args:
        app: the app to guard.
        loopback_only: refuse Host headers that are not loopback (no API key is set).
        allowed_origins: extra origins allowed besides the server's own (e.g. a local web UI).
        max_body_bytes: larger bodies get 413.
        body_timeout: seconds the whole body may take to arrive; then 408.
    """

    def __init__(self, app: ASGIApp, *, loopback_only: bool,
                 allowed_origins: Iterable[str] = (), max_body_bytes: int = 1_048_576,
                 body_timeout: float = 30.0) -> None:
        self.app = app
        self.loopback_only = loopback_only
        self.allowed_origins = {o.rstrip("/").lower() for o in allowed_origins}
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # A WebSocket handshake is not bound by the same-origin policy: same Host and
            # Origin rules (close code 1008: policy violation).
            if self._refusal(scope) is not None:
                await send({"type": "websocket.close", "code": 1008})
                return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _header(scope, b"content-length") is not None and \
                _header(scope, b"transfer-encoding") is not None:
            # Two framings: h11 reads the chunked one and kept the connection open, so what a
            # proxy in front took for this request's body was served as a request of its own
            # (smuggling). RFC 9112 6.1: refuse, and close the connection.
            await error_response(scope["path"], 400, "a request may carry Content-Length or "
                                 "Transfer-Encoding, not both", code="forbidden_request",
                                 headers={"Connection": "close"})(scope, receive, send)
            return
        problem = self._refusal(scope)
        if problem is not None:
            status, message = problem
            await error_response(scope["path"], status, message,
                                 code="forbidden_request")(scope, receive, send)
            return
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        body = await self._read_body(scope, receive)
        if not isinstance(body, bytes):
            status, message = body
            headers = {"Connection": "close"}
            await error_response(scope["path"], status, message, headers=headers)(
                scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        size = sum(len(k) + len(v) + 4 for k, v in scope.get("headers", ()))
        size += len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        if size > MAX_HEADER_BYTES:
            return 431, (f"request headers are {size} bytes; the limit is {MAX_HEADER_BYTES}")
        for name in (b"origin", b"content-type"):
            if _count(scope, name) > 1:
                # One judged here, the other read by someone later: refuse the ambiguity.
                return 400, f"more than one {name.decode()} header"
        host = _header(scope, b"host")
        if self.loopback_only and (host is None or not is_loopback_host(host)):
            return 421, (f"Host {host!r} is not a loopback address; without an API key this "
                         f"server answers only to 127.0.0.1, [::1] and localhost (a page "
                         f"that rebinds its own name to this machine is refused)")
        origin = _header(scope, b"origin")
        if origin is not None and not self._origin_ok(origin, host):
            return 403, (f"Origin {origin!r} is not allowed: cross-site requests are refused; "
                         f"list the origin in [serve] allowed_origins to allow it")
        ctype = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
        # A form with no fields posts an empty body under a form type: refused too (a browser
        # that leaves Origin out would otherwise get it through). Clients that say
        # application/octet-stream on an empty POST (aiohttp) are no browser form.
        if scope.get("method") == "POST" and (_has_body(scope) or ctype in FORM_TYPES):
            # An approval page's own form (jarvis.server.approvals checks its token, Origin
            # and cookie); every other POST is JSON.
            link_form = (ctype == "application/x-www-form-urlencoded"
                         and scope["path"].startswith(TOKEN_PATHS))
            if ctype != "application/json" and not link_form:
                return 415, (f"Content-Type must be application/json, got "
                             f"{ctype or 'nothing'!r}")
        return None

    def _origin_ok(self, origin: str, host: str | None) -> bool:
        normal = origin.strip().rstrip("/").lower()
        if normal in self.allowed_origins:
            return True
        parts = urlsplit(normal)
        if parts.scheme not in ("http", "https") or not parts.netloc or host is None:
            return False  # "null" (sandboxed frames, file://) and the like
        return parts.netloc == host.strip().lower()

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | tuple[int, str]:
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() \
                and int(declared) > self.max_body_bytes:
            return 413, (f"request body is {int(declared)} bytes; the limit is "
                         f"{self.max_body_bytes} bytes")
        chunks: list[bytes] = []
        total = 0
        try:
            # One deadline for the whole body (asyncio.timeout: no task per receive).
            async with asyncio.timeout(self.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return 400, "the client went away before the body arrived"
                    chunk = message.get("body", b"")
                    total += len(chunk)
                    if total > self.max_body_bytes:
                        return 413, (f"request body is over the limit of "
                                     f"{self.max_body_bytes} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            return 408, f"the request body did not arrive within {self.body_timeout:g} seconds"


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the buffered body, then the real stream (disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def guard_app(app: Any, *, api_key: str | None, allowed_origins: Iterable[str] = (),
              max_body_bytes: int = 1_048_576, body_timeout: float = 30.0) -> RequestGuard:
    """`app` behind the guard; loopback-only Host unless an API key protects it."""
    return RequestGuard(app, loopback_only=not api_key, allowed_origins=allowed_origins,
                        max_body_bytes=max_body_bytes, body_timeout=body_timeout)
