"""One configured MCP server: connected on demand, kept warm, rebuilt after a failure.

Everything here runs on the background loop (`jarvis.mcp.loop`). A connection is owned by one
task that enters the SDK `Client` and holds it open until asked to stop, because the SDK's
transports must be entered and left by the same task; calls are made from other tasks on the
same loop and share the session.

Failures never escape as anything but `McpServerError` (could not connect, dropped, broke the
protocol), `McpCallTimeout` or `McpCallError` (the server refused the request). After a
transport failure or a timeout the session is torn down (a stdio server's whole process tree
ends) and the next call reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvis.mcp.cache import RemoteTool
from jarvis.mcp.procs import MARKER_VAR, akill_tree, new_token

MAX_TOOL_PAGES = 50
MAX_TOOLS = 2000
STOP_TIMEOUT = 6.0  # the SDK's stdio shutdown waits up to ~4 s for a stuck server
STDERR_TAIL_CHARS = 600


class McpServerError(Exception):
    """The server could not be started or reached, dropped the connection or broke the protocol."""

    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        self.reason = reason
        super().__init__(f"MCP server {server!r}: {reason}")


class McpCallTimeout(Exception):
    """A call got no answer within its timeout."""


class McpCallError(Exception):
    """The server answered a call with a JSON-RPC error (unknown tool, invalid params, ...)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


class BadCwdError(Exception):
    """A stdio server's `cwd` is not a folder (else it would read as 'command not found')."""


def describe(exc: BaseException) -> str:
    """A one-line reason from an exception, looking inside exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, BadCwdError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    text = str(exc).strip() or type(exc).__name__
    if type(exc).__name__ not in ("MCPError", "McpServerError"):
        text = f"{type(exc).__name__}: {text}"
    return text.splitlines()[0][:300]


def _expand(values: dict[str, str]) -> dict[str, str]:
    """`$VAR` / `${VAR}` in env and header values come from jarvis's environment, so secrets
    need not be written into config.toml (an unset variable stays as written)."""
    return {key: os.path.expandvars(value) for key, value in values.items()}


@dataclass(slots=True)
class _Session:
    """One connection attempt: the owner task, its stop signal and what it opened."""

    stop: asyncio.Event
    ready: asyncio.Future[Any]
    owner: asyncio.Task[None] | None = None
    client: Any = None
    token: str | None = None
    dropped: str | None = None
    refreshing: set[asyncio.Task[Any]] = field(default_factory=set)


class ServerConnection:
    """A configured server and its (at most one) live session.

    Args:
        name: the server's name in config.toml.
        config: its McpServerConfig.
        base_dir: the config file's folder (a relative `cwd` is resolved against it).
        on_tools: called on the loop with each freshly fetched tool list.
        log_path: where a stdio server's stderr goes (so noise never reaches the terminal).
    """

    def __init__(self, name: str, config: Any, base_dir: Path, on_tools: Any = None,
                 log_path: Path | None = None) -> None:
        self.name = name
        self.config = config
        self.base_dir = base_dir
        self.on_tools = on_tools
        self.log_path = log_path
        self.tools: list[RemoteTool] | None = None
        self.status = "idle"  # idle | connecting | ready | failed | closed
        self.error: str | None = None
        self.connects = 0
        self.server_info: dict[str, Any] | None = None
        self.protocol_version: str | None = None
        self._session: _Session | None = None
        self._lock: asyncio.Lock | None = None

    # --- connecting ----------------------------------------------------------------
    async def ensure(self) -> Any:
        """The live SDK Client, connecting (once, even for concurrent callers) if needed."""
        session = self._session
        if session is not None and session.client is not None and session.dropped is None:
            return session.client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            session = self._session
            if session is not None and session.client is not None and session.dropped is None:
                return session.client
            if session is not None:
                await self._stop_session(session, wait=False)
            return await self._open()

    async def _open(self) -> Any:
        self.status = "connecting"
        self.connects += 1
        loop = asyncio.get_running_loop()
        session = _Session(stop=asyncio.Event(), ready=loop.create_future())
        # Nobody may be waiting any more when a late outcome lands (connect timed out).
        session.ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._session = session
        session.owner = loop.create_task(self._own(session), name=f"jarvis-mcp-{self.name}")
        timeout = self.config.connect_timeout
        try:
            await asyncio.wait_for(asyncio.shield(session.ready), timeout)
        except TimeoutError:
            reason = f"did not finish connecting within {timeout:g} s (connect_timeout)"
            await self._fail(session, reason)
            raise McpServerError(self.name, self._with_stderr(reason)) from None
        except McpServerError as exc:
            reason = exc.reason
            if reason == "Connection closed":
                reason = "closed the connection before it was ready (did the server exit?)"
            await self._fail(session, reason)
            raise McpServerError(self.name, self._with_stderr(reason)) from None
        return session.client

    async def _fail(self, session: _Session, reason: str) -> None:
        await self._stop_session(session, wait=True)
        self.status = "failed"
        self.error = self._with_stderr(reason)

    def _with_stderr(self, reason: str) -> str:
        tail = self.stderr_tail()
        return f"{reason}; server stderr: {tail}" if tail else reason

    def stderr_tail(self) -> str:
        """The end of the server's stderr log (why a stdio server died, usually)."""
        if self.log_path is None or self.config.url:
            return ""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - STDERR_TAIL_CHARS))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        return " | ".join(lines[-3:])[-STDERR_TAIL_CHARS:]

    async def _transport(self, stack: contextlib.AsyncExitStack, session: _Session) -> Any:
        cfg = self.config
        if cfg.url:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=_expand(cfg.headers), timeout=httpx2.Timeout(cfg.connect_timeout, read=None)))
            return streamable_http_client(cfg.url, http_client=http)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        session.token = new_token()
        cwd = str((self.base_dir / cfg.cwd).resolve()) if cfg.cwd else None
        if cwd is not None and not os.path.isdir(cwd):
            raise BadCwdError(f"cwd {cwd} is not a folder; fix `cwd` of [mcp.servers.{self.name}]")
        params = StdioServerParameters(command=cfg.command, args=list(cfg.args),
                                       env={**_expand(cfg.env), MARKER_VAR: session.token}, cwd=cwd)
        errlog: Any = None
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                errlog = stack.enter_context(open(self.log_path, "w", encoding="utf-8"))  # noqa: SIM115
        if errlog is None:
            errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
        return stdio_client(params, errlog=errlog)

    async def _own(self, session: _Session) -> None:
        """The task that opens the session, holds it until `stop`, then closes it."""
        import anyio
        from mcp import Client
        from mcp.types import Implementation

        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack, session)
                client = await stack.enter_async_context(Client(
                    transport, cache=None, mode=self.config.protocol,
                    message_handler=self._message_handler(session),
                    client_info=Implementation(name="jarvis", version="0.1")))
                tools = await self._fetch_tools(client)
                session.client = client
                self.protocol_version = client.protocol_version
                info = client.server_info
                self.server_info = info.model_dump(exclude_none=True) if info is not None else None
                self._publish_tools(tools)
                if not session.ready.done():
                    # Set here, not by the waiter: a caller that gave up still gets a warm session.
                    self.status = "ready"
                    self.error = None
                    session.ready.set_result(client)
                async with anyio.create_task_group() as group:
                    if self._can_listen(client):
                        group.start_soon(self._listen, session, client)
                    await session.stop.wait()
                    group.cancel_scope.cancel()
        except asyncio.CancelledError:
            if not session.ready.done():
                session.ready.set_exception(McpServerError(self.name, "connection cancelled"))
        except Exception as exc:  # noqa: BLE001 - every failure becomes the server's status
            reason = describe(exc)
            if not session.ready.done():
                session.ready.set_exception(McpServerError(self.name, reason))
            elif session.dropped is None:
                session.dropped = reason
        finally:
            session.client = None
            if session.dropped is None and not session.stop.is_set():
                session.dropped = "connection ended"
            if not session.ready.done():
                session.ready.set_exception(McpServerError(self.name, session.dropped or "closed"))
            if session.token is not None:
                # Whatever the SDK left running (children of a server that exited cleanly).
                with contextlib.suppress(Exception):
                    await akill_tree(session.token)

    async def _stop_session(self, session: _Session, wait: bool) -> None:
        session.stop.set()
        if session.dropped is None:
            session.dropped = "closed"
        owner = session.owner
        if owner is None or owner.done():
            return
        if not session.ready.done():
            owner.cancel()  # still connecting: nothing to close politely
        if wait:
            done, _ = await asyncio.wait({owner}, timeout=STOP_TIMEOUT)
            if not done:
                owner.cancel()
                await asyncio.wait({owner}, timeout=1.0)

    async def close(self) -> None:
        """End the session (and a stdio server's process tree); the next call reconnects."""
        session = self._session
        self._session = None
        if session is not None:
            await self._stop_session(session, wait=True)
        if self.status in ("ready", "connecting"):
            self.status = "closed"

    def drop(self, reason: str) -> None:
        """Mark the session broken and tear it down in the background."""
        session = self._session
        if session is None:
            return
        session.dropped = reason
        self.status = "failed"
        self.error = reason
        asyncio.get_running_loop().create_task(self._stop_session(session, wait=True))

    # --- tool lists ----------------------------------------------------------------
    async def _fetch_tools(self, client: Any) -> list[RemoteTool]:
        tools: list[RemoteTool] = []
        cursor = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                annotations = (tool.annotations.model_dump(by_alias=True, exclude_none=True)
                               if tool.annotations is not None else {})
                tools.append(RemoteTool(name=tool.name, description=tool.description or "",
                                        input_schema=dict(tool.input_schema or {}),
                                        annotations=annotations, output_schema=tool.output_schema,
                                        title=tool.title))
                if len(tools) >= MAX_TOOLS:
                    return tools
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def _publish_tools(self, tools: list[RemoteTool]) -> None:
        self.tools = tools
        if self.on_tools is not None:
            self.on_tools(self, tools)

    async def refresh_tools(self) -> list[RemoteTool]:
        """Fetch the tool list again over the live session (connecting if needed)."""
        client = await self.ensure()
        tools = await self._fetch_tools(client)
        self._publish_tools(tools)
        return tools

    def _message_handler(self, session: _Session) -> Any:
        from mcp.types import ToolListChangedNotification

        async def handle(message: Any) -> None:
            # Handshake-era servers announce changes with a plain notification.
            if isinstance(message, ToolListChangedNotification):
                self._schedule_refresh(session)

        return handle

    def _can_listen(self, client: Any) -> bool:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        tools_cap = client.server_capabilities.tools
        return (client.protocol_version in MODERN_PROTOCOL_VERSIONS and tools_cap is not None
                and bool(tools_cap.list_changed))

    async def _listen(self, session: _Session, client: Any) -> None:
        """2026-era servers deliver list changes on a `subscriptions/listen` stream."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._schedule_refresh(session)
        except Exception:  # noqa: BLE001 - without the stream we only miss change events
            return

    def _schedule_refresh(self, session: _Session) -> None:
        async def refresh() -> None:
            client = session.client
            if client is None:
                return
            with contextlib.suppress(Exception):
                self._publish_tools(await self._fetch_tools(client))

        task = asyncio.get_running_loop().create_task(refresh())
        session.refreshing.add(task)
        task.add_done_callback(session.refreshing.discard)

    # --- calling -------------------------------------------------------------------
    async def call(self, remote: str, arguments: dict[str, Any], timeout: float) -> Any:
        """Call tool `remote`; returns the SDK's CallToolResult."""
        import anyio
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED
        from pydantic import ValidationError

        client = await self.ensure()
        try:
            with anyio.fail_after(timeout):
                return await client.call_tool(remote, arguments)
        except TimeoutError:
            self.drop(f"tool {remote!r} got no answer within {timeout:g} s")
            raise McpCallTimeout(f"MCP server {self.name!r} did not answer {remote!r} within "
                                 f"{timeout:g} s; the connection was closed and the next call "
                                 f"reconnects") from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                reason = "connection closed during the call (the server crashed or exited)"
                self.drop(reason)
                raise McpServerError(self.name, self._with_stderr(reason)) from None
            raise McpCallError(exc.code, exc.message) from None
        except ValidationError as exc:
            self.drop("sent an invalid response")
            raise McpServerError(self.name, f"sent an invalid response: {describe(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - broken pipes, HTTP errors, groups of them
            reason = describe(exc)
            self.drop(reason)
            raise McpServerError(self.name, self._with_stderr(reason)) from None
