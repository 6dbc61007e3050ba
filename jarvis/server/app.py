"""The `jarvis serve` ASGI app: ORS tool endpoints + OpenAI-compatible chat, on starlette."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from jarvis.errors import UserError
from jarvis.server.guard import RequestGuard
from jarvis.server.http import AccessLog, ApiError, ApiKeyMiddleware, error_response
from jarvis.server.openai_api import ChatAPI
from jarvis.server.ors import OrsEnvironment

log = logging.getLogger("jarvis.server")

RESERVED_ENV_NAMES = {"v1", "health", "create", "create_session", "delete", "delete_session",
                      "ping", "list_environments"}


@dataclass(slots=True)
class ServeSettings:
    """How `jarvis serve` runs.

    Args:
        host, port: where to listen (127.0.0.1 by default; port 0 picks a free one).
        api_key: required on every request but /health when set; required to bind anywhere
            but loopback.
        owner_token: without an API key, the token every request but /health must carry
            (jarvis.security.owner_token); None: the owner's, from $JARVIS_HOME/serve.token (made on
            first use).
        env_name: the ORS environment name.
        tools: tool names exposed over ORS (None: [tools] enabled, else every tool).
        approve: run tools that require confirmation (nobody can confirm on a server).
        max_body_bytes: largest request body.
        max_sessions: most ORS sessions alive at once.
        session_idle_seconds: an ORS session without calls or pings this long is ended.
        allowed_origins: browser origins allowed besides the server's own (none by default:
            cross-site requests are refused).
        header_timeout: seconds a client has to send its request headers (then 408).
        body_timeout: seconds a client has to send its request body (then 408).
        max_connections: open connections at most; more are answered 503 at once.
        send_timeout: seconds an answer may wait on a client that does not read it (then the
            connection is closed).
        access_log: a line per request on stderr (method, path, status, time); `jarvis
            serve` turns it on.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    api_key: str | None = None
    owner_token: str | None = None
    env_name: str = "jarvis"
    tools: list[str] | None = None
    approve: bool = False
    max_body_bytes: int = 1_048_576
    max_sessions: int = 256
    session_idle_seconds: float = 900.0
    max_concurrent_chats: int = 8
    allowed_origins: list[str] = field(default_factory=list)
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 512
    send_timeout: float = 30.0
    access_log: bool = False

    def check(self) -> None:
        """Refuse unsafe or unusable settings with a message saying how to fix them."""
        if not is_loopback(self.host) and not self.api_key:
            raise UserError(f"refusing to listen on {self.host} without an API key: anyone who can "
                            f"reach it could run your tools; pass --api-key (or set "
                            f"JARVIS_API_KEY), or listen on 127.0.0.1")
        if self.api_key is not None and len(self.api_key) < 8:
            raise UserError("the API key is too short; use at least 8 characters")
        if not self.env_name or self.env_name.lower() in RESERVED_ENV_NAMES or "/" in self.env_name:
            raise UserError(f"environment name {self.env_name!r} is empty or clashes with a route; "
                            f"pick another --env-name")
        if not 0 <= self.port <= 65535:
            raise UserError(f"port {self.port} is out of range 0-65535")
        if self.max_body_bytes < 1024:
            raise UserError("--max-body-bytes must be at least 1024")
        if not (self.header_timeout > 0 and self.body_timeout > 0 and self.send_timeout > 0
                and self.max_connections >= 1):
            raise UserError("header_timeout, body_timeout and send_timeout must be positive "
                            "and max_connections at least 1")


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _approver(approve: bool) -> Any:
    return (lambda spec, arguments: True) if approve else None


def serve_tools(jarvis: Any, names: list[str] | None) -> tuple[list[Any], dict[str, str]]:
    """The tools to expose, built by the SDK with the services they declare (memory store,
    scheduler, engine), and the tools that could not be built with the reason (name ->
    reason). Named tools fail loudly; with no names, every enabled tool that can be built is
    exposed, and the others are reported (`jarvis serve` prints them; calling one is a 404
    that says why), never dropped without a word."""
    from jarvis import load_builtin_catalog
    from jarvis.core.registry import ToolRegistry
    from jarvis.errors import JarvisError

    load_builtin_catalog()
    jarvis.load_extensions()
    if names is not None:
        return list(jarvis.build_tools(names)), {}
    enabled = jarvis.config.tools.enabled
    built: list[Any] = []
    skipped: dict[str, str] = {}
    for name in enabled if enabled is not None else ToolRegistry.keys():
        try:
            built.extend(jarvis.build_tools([name]))
        except (JarvisError, TypeError) as exc:  # e.g. the llm tool with no engine running
            skipped[name] = str(exc)
            log.warning("not serving tool %s: %s", name, exc)
    return built, skipped


def build_app(settings: ServeSettings | None = None, *, config: Any = None, tools: Any = None,
              jarvis: Any = None) -> Starlette:
    """The ASGI app. `tools` (instances) and `jarvis` (a Jarvis) default to ones built from
    `config`. Sessions' resources live in the process-wide ResourceManager, where the
    executor's tool contexts find them."""
    settings = settings or ServeSettings()
    settings.check()
    if config is None:
        config = jarvis.config if jarvis is not None else None
    if config is None:
        from jarvis.core.config import load_config

        config = load_config()
    owns_jarvis = jarvis is None
    if jarvis is None:
        from jarvis.sdk import Jarvis

        jarvis = Jarvis(config=config)
    skipped: dict[str, str] = {}
    if tools is None:
        tools, skipped = serve_tools(jarvis, settings.tools)
    approver = _approver(settings.approve)
    from jarvis.trust.run import EgressRules

    env = OrsEnvironment(settings.env_name, list(tools), approver=approver, unavailable=skipped,
                         default_timeout=config.tools.default_timeout,
                         max_output_chars=config.tools.max_output_chars,
                         max_abandoned_per_tool=config.tools.max_abandoned_per_tool,
                         max_abandoned=config.tools.max_abandoned_threads,
                         max_sessions=settings.max_sessions,
                         max_body_bytes=settings.max_body_bytes,
                         session_idle_seconds=settings.session_idle_seconds,
                         rules=lambda: _rules_with_grants(config, EgressRules.from_config(config)),
                         trusted_tools=config.egress.trusted_tools)
    from jarvis.core.registry import ToolRegistry

    chat = ChatAPI(jarvis, approver=approver, max_body_bytes=settings.max_body_bytes,
                   max_concurrent=settings.max_concurrent_chats,
                   default_tools=[n for n in env.tools if ToolRegistry.contains(n)])

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "environment": env.name,
                             "sessions": len(env.sessions), "tools": len(env.tools)})

    async def environments(request: Request) -> Response:
        return JSONResponse([env.name])

    from jarvis.server.approvals import ApprovalRoutes

    routes = [
        # The busiest route first: Starlette tries them in order (no other one overlaps it).
        Route("/v1/chat/completions", chat.completions, methods=["POST"]),
        *ApprovalRoutes(config).routes(),  # before /{env}/...: the owner's API and link page
        Route("/health", health, methods=["GET"]),
        Route("/list_environments", environments, methods=["GET"]),
        Route("/create_session", env.create_session, methods=["POST"]),
        Route("/create", env.create, methods=["POST"]),
        Route("/ping", env.ping, methods=["POST"]),
        Route("/delete", env.delete, methods=["POST"]),
        Route("/delete_session", env.delete, methods=["POST"]),
        Route("/v1/models", chat.models, methods=["GET"]),
        Route("/v1/models/{model}", chat.model, methods=["GET"]),
        Route("/{env}/tools", env.list_tools, methods=["GET"]),
        Route("/{env}/task_tools", env.task_tools, methods=["GET"]),
        Route("/{env}/prompt", env.prompt, methods=["GET"]),
        Route("/{env}/splits", env.splits, methods=["GET"]),
        Route("/{env}/tasks", env.tasks, methods=["POST"]),
        Route("/{env}/num_tasks", env.tasks, methods=["POST"]),
        Route("/{env}/task", env.tasks, methods=["POST"]),
        Route("/{env}/task_range", env.tasks, methods=["POST"]),
        Route("/{env}/call", env.call, methods=["POST"]),
    ]

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(request.url.path, exc.status, exc.message, exc.kind, exc.code)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = {404: f"no route {request.method} {request.url.path}",
                   405: f"method {request.method} is not allowed on {request.url.path}"
                   }.get(exc.status_code, str(exc.detail))
        return error_response(request.url.path, exc.status_code, message,
                              headers=dict(exc.headers or {}))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("error handling %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(request.url.path, 500, f"internal error: {type(exc).__name__} "
                              f"(details are in the server log)", kind="api_error")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        interval = max(0.05, min(30.0, settings.session_idle_seconds / 4))

        async def reaper() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await env.reap()
                except Exception:  # noqa: BLE001 - the reaper must outlive one bad session
                    log.exception("ending idle sessions failed")

        task = asyncio.create_task(reaper())
        from jarvis.approvals.served import ServedRuns, parks

        # Chat runs that parked go on once answered (docs/approvals.md).
        served = ServedRuns(jarvis).start() if parks(jarvis.config) else None
        try:
            yield
        finally:
            if served is not None:
                await asyncio.to_thread(served.stop)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await env.close()
            if owns_jarvis:
                jarvis.close()

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        ApiError: api_error, HTTPException: http_error, Exception: server_error})
    app.state.ors = env
    app.state.chat = chat
    app.state.settings = settings
    # Host/Origin/Content-Type checks and the bounded body read come before any route...
    app.add_middleware(RequestGuard, loopback_only=not settings.api_key,
                       allowed_origins=settings.allowed_origins,
                       max_body_bytes=settings.max_body_bytes, body_timeout=settings.body_timeout)
    # ...and the API key (or, without one, the owner's token) before them (added last, it
    # runs first): the guard buffers a body of up to max_body_bytes for up to body_timeout,
    # which a client without the key must not make the server do (512 connections x 1 MiB,
    # or a body in one-byte chunks: 11 s of the server's CPU each).
    key, owner = access_key(settings.api_key, settings.owner_token)
    app.add_middleware(ApiKeyMiddleware, api_key=key, owner=owner)
    app.state.access_key = key  # for in-process clients (ServerThread.headers)
    if settings.access_log:
        app.add_middleware(AccessLog)  # added last: outermost, so refusals are logged too
    return app


def access_key(api_key: str | None, owner_token: str | None = None) -> tuple[str, bool]:
    """(the key every request must carry, whether it is the owner token): the API key when
    there is one, else the owner's token (jarvis.security.owner_token)."""
    if api_key:
        return api_key, False
    if owner_token:
        return owner_token, True
    from jarvis.security.owner_token import owner_token as load

    token = load(create=True)
    assert token is not None
    return token, True


def _rules_with_grants(config: Any, rules: Any) -> Any:
    """`rules` with the person's active grants (as they are when an ORS session starts): what
    the session is allowed without asking (it cannot wait for the person: docs/approvals.md)."""
    from jarvis.approvals.parking import add_grants
    from jarvis.trust.run import RunTrust

    holder = RunTrust(run_id="ors", rules=rules)
    add_grants(config, holder)
    return holder.rules
