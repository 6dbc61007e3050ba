"""HTTP plumbing shared by the ORS and OpenAI routes: bounded JSON bodies, errors, auth.

Every error leaves as JSON with a message that says what was wrong: `{"detail": ...}` for
ORS routes (what the ors-sdk client reads) and `{"error": {"message", "type", "code"}}` for
the OpenAI routes (what the openai client reads). No traceback ever reaches a client.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("jarvis.server")

OPEN_PATHS = frozenset({"/health"})
# Approval link pages answer to the link's signed, single-use token instead of the key
# (a phone's browser has no owner token): jarvis.server.approvals.
TOKEN_PATHS = ("/jarvis/approve/",)


def dumps(value: Any) -> str:
    """JSON text of an answer. A lone surrogate (text that is not valid Unicode: a model's or
    an MCP server's "\\udc80" escape) becomes U+FFFD, so the answer can always be sent as
    UTF-8 instead of failing with a 500 half-way."""
    from jarvis.core.text import replace

    return replace(json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")))


class JSONAnswer(JSONResponse):
    """A JSONResponse that never fails to encode (see dumps)."""

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")


class ApiError(Exception):
    """A request the server refuses: HTTP `status` and a message naming the problem."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code


def is_openai_path(path: str) -> bool:
    return path.startswith("/v1/")


def error_response(path: str, status: int, message: str, kind: str = "invalid_request_error",
                   code: str | None = None, headers: dict[str, str] | None = None) -> Response:
    """The error body in the dialect of the route family."""
    if is_openai_path(path):
        body: dict[str, Any] = {"error": {"message": message, "type": kind, "code": code,
                                          "param": None}}
    else:
        body = {"detail": message}
    return JSONAnswer(body, status_code=status, headers=headers)


async def read_json(request: Request, max_bytes: int) -> Any:
    """The request body parsed as JSON; ApiError 413 past `max_bytes`, 400 when malformed."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise ApiError(400, "Content-Length is not a number") from None
        if size > max_bytes:
            raise ApiError(413, f"request body is {size} bytes; the limit is {max_bytes} bytes "
                           f"(raise it with `jarvis serve --max-body-bytes`)")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > max_bytes:
            raise ApiError(413, f"request body is over the limit of {max_bytes} bytes "
                           f"(raise it with `jarvis serve --max-body-bytes`)")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise ApiError(400, "request body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None


def require_object(value: Any, what: str = "request body") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ApiError(400, f"{what} must be a JSON object, got {type(value).__name__}")
    return value


class ApiKeyMiddleware:
    """Refuse every request without the API key, or without the owner's token on a keyless
    server (X-API-Key or Authorization: Bearer), except the health check; WebSocket
    handshakes too. Constant-time comparison.

    Args:
        owner: the key is the owner token (jarvis.security.owner_token): refusals say how to get it.
    """

    def __init__(self, app: ASGIApp, api_key: str, owner: bool = False) -> None:
        self.app = app
        self.key = api_key.encode()
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or (kind == "http" and (
                scope["path"] in OPEN_PATHS or scope["path"].startswith(TOKEN_PATHS))):
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope["headers"]:
            if name == b"x-api-key":
                given = value
                break
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
        if given and hmac.compare_digest(given, self.key):
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            # Before the handshake is accepted: the server answers it with 403.
            await send({"type": "websocket.close", "code": 1008})
            return
        if self.owner:
            message = ("this server answers only the user who started it; send the owner's "
                       "token as 'Authorization: Bearer <token>' (it is in "
                       "$JARVIS_HOME/serve.token: `jarvis serve --print-token`)"
                       if not given else "wrong owner token (`jarvis serve --print-token` "
                       "prints the right one)")
        else:
            message = ("missing API key; send it in the X-API-Key header or as "
                       "'Authorization: Bearer <key>'") if not given else "wrong API key"
        response = error_response(scope["path"], 401, message, kind="authentication_error",
                                  code="invalid_api_key",
                                  headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


class AccessLog:
    """ASGI middleware: one line per request on stderr when its answer ends, `TIME jarvis
    serve: METHOD /path STATUS 12.3 ms` (the path without its query string, which may carry a
    key; never a header or a body). Outermost, so refusals by the guards are logged too."""

    def __init__(self, app: Any, name: str = "jarvis serve") -> None:
        self.app = app
        self.name = name

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        import time

        started = time.monotonic()
        status: list[int] = []

        async def sending(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status.append(int(message.get("status", 0)))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._log(scope, status[0] if status else None, time.monotonic() - started)

    def _log(self, scope: Any, status: int | None, seconds: float) -> None:
        import time

        from jarvis.core.terminal import visible

        path = visible(scope.get("path") or "/", 300, one_line=True)
        method = visible(scope.get("method") or "-", 16, one_line=True)
        _LOG_LINES.put(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self.name}: {method} {path} "
                       f"{status if status is not None else '-'} {seconds * 1000:.1f} ms")


class _LogLines:
    """Lines for stderr that never stall the server: written by a thread of their own, with
    os.write on file descriptor 2 only when it can take them (poll), never holding the lock
    of sys.stderr. A stderr nobody reads (a full pipe) costs dropped lines, counted and
    reported when there is room again, never a blocked event loop. At most `limit` wait."""

    def __init__(self, limit: int = 10_000) -> None:
        import queue

        self._queue: queue.Queue[str] = queue.Queue(limit)
        self._dropped = 0
        self._thread: Any = None

    def put(self, line: str) -> None:
        import queue
        import threading

        if self._thread is None:
            self._thread = threading.Thread(target=self._write, daemon=True,
                                            name="jarvis-access-log")
            self._thread.start()
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self._dropped += 1

    def _write(self) -> None:
        import os
        import select

        poller = select.poll()
        poller.register(2, select.POLLOUT)
        while True:
            line = self._queue.get()
            if self._dropped:
                line = (f"({self._dropped} access log line(s) dropped: stderr was not read)\n"
                        + line)
                self._dropped = 0
            data = (line + "\n").encode("utf-8", "replace")[:select.PIPE_BUF]
            try:
                if not poller.poll(500):  # not writable within 0.5 s: nobody reads it
                    self._dropped += 1
                    continue
                os.write(2, data)  # at most PIPE_BUF bytes: a pipe takes it whole, at once
            except OSError:  # stderr closed: the requests themselves went fine
                return


_LOG_LINES = _LogLines()
