"""One configured MCP server: connected on demand, kept warm, rebuilt after a failure.

Everything here runs on the background loop (`jarvis.mcp.loop`). A connection is owned by one
task that enters the SDK `Client` and holds it open until asked to stop, because the SDK's
transports must be entered and left by the same task; calls are made from other tasks on the
same loop and share the session.

Failures never escape as anything but `McpServerError` (could not connect, dropped, broke the
protocol), `McpCallTimeout` or `McpCallError` (the server refused the request): see
jarvis.mcp.errors. After a
transport failure or a timeout the session is torn down (a stdio server's whole process tree
ends) and the next call reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jarvis.mcp.cache import RemoteTool
from jarvis.mcp.errors import (
    BadCwdError,
    McpCallError,
    McpCallTimeout,
    McpServerError,
    describe,
    shown_reason,
)
from jarvis.mcp.procs import MARKER_VAR, akill_tree, new_token

METHOD_NOT_FOUND = -32601  # JSON-RPC: the server does not have an (optional) method
MAX_TOOL_PAGES = 50
MAX_TOOLS = 2000
PROGRESS_BURST = 20  # progress reports passed on at once, then PROGRESS_PER_SECOND
PROGRESS_PER_SECOND = 10.0
REFRESH_MIN_GAP = 1.0  # seconds between two listings prompted by list_changed notices
STOP_TIMEOUT = 6.0  # the SDK's stdio shutdown waits up to ~4 s for a stuck server
STDERR_TAIL_CHARS = 600
DISCOVER_PROBE_SECONDS = 3.0
_BACKGROUND: set[asyncio.Task[Any]] = set()


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
    refresh_queued: bool = False  # a refresh that has not started listing yet
    refresh_lock: asyncio.Lock | None = None  # one listing at a time


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
                 log_path: Path | None = None, roots: list[Path] | None = None,
                 sandbox: Any = None) -> None:
        self.name = name
        self.sandbox = sandbox  # the [sandbox] table (isolation, uid) a sandboxed server uses
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
        self.roots = roots if roots is not None else [base_dir]
        # Learnt on connecting: the server needs the initialize handshake (it never answered
        # server/discover), or speaks the older HTTP+SSE transport; reconnects go straight there.
        self.legacy = config.protocol == "legacy"
        self.sse = config.transport == "sse" or (
            config.transport == "auto" and bool(config.url)
            and urlsplit(config.url).path.rstrip("/").endswith("/sse"))
        self.last_http: tuple[int, str, str] | None = None  # status, url, www-authenticate
        self.refused: str | None = None  # why jarvis's HTTP transport refused a reply
        self._fell_back = False  # switched to SSE after streamable HTTP was refused
        self.failed_at = 0.0  # when connecting last failed (epoch seconds)
        self._fresh = False  # tools were just listed by the connect (no second tools/list)
        self._paused = 0  # elicitations waiting on a person: call timeouts are paused
        self._calls: dict[Any, float] = {}  # running calls' cancel scopes -> their timeout

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
            reason = self._http_reason() or exc.reason
            if reason == "Connection closed":
                reason = "closed the connection before it was ready (did the server exit?)"
            if self._sse_fallback_wanted():
                # An older server: streamable HTTP's POST is not found; speak HTTP+SSE instead.
                await self._stop_session(session, wait=True)
                self.sse = self._fell_back = True
                return await self._open_once_more()
            if self._fell_back:
                # Neither transport worked: the next attempt starts from streamable HTTP again.
                self.sse = self._fell_back = False
            await self._fail(session, reason)
            raise McpServerError(self.name, self._with_stderr(reason)) from None
        return session.client

    async def _open_once_more(self) -> Any:
        self.connects -= 1  # one connection from the user's point of view
        return await self._open()

    def _sse_fallback_wanted(self) -> bool:
        status = self.last_http[0] if self.last_http else None
        return (bool(self.config.url) and self.config.transport == "auto" and not self.sse
                and status in (404, 405))

    def _http_reason(self) -> str | None:
        """A clear reason for an HTTP error status seen while connecting (401 above all)."""
        if not self.last_http or not self.config.url:
            return None
        status, url, challenge = self.last_http
        if status in (401, 403):
            word = "401 Unauthorized" if status == 401 else "403 Forbidden"
            hint = (f"set the credentials it wants as a header of [mcp.servers.{self.name}], e.g. "
                    f"headers = {{ Authorization = \"Bearer $TOKEN\" }} (a $VAR is read from the "
                    f"environment)")
            if status == 403:
                hint = "the credentials in `headers` were refused; check them"
            extra = f" (WWW-Authenticate: {challenge[:200]})" if challenge else ""
            return f"HTTP {word} from {url}{extra}; {hint}"
        if status == 404:
            tried = "streamable HTTP and HTTP+SSE" if self._fell_back else (
                "HTTP+SSE" if self.sse else "streamable HTTP")
            return (f"HTTP 404 Not Found from {url} (tried {tried}); check `url` of "
                    f"[mcp.servers.{self.name}]")
        if status >= 400:
            return f"HTTP {status} from {url}"
        return None

    async def _fail(self, session: _Session, reason: str) -> None:
        await self._stop_session(session, wait=True)
        self.status = "failed"
        self.error = shown_reason(self._with_stderr(reason))
        self.failed_at = time.time()

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

            self.last_http = None

            async def record(response: Any) -> None:
                # The SDK turns an HTTP error into "Server returned an error response"; keep
                # the status so the reason can say 401 and what to set.
                if response.status_code >= 400:
                    self.last_http = (response.status_code, str(response.request.url),
                                      response.headers.get("www-authenticate", ""))

            hooks = {"response": [record]}
            from jarvis.mcp.http_bounds import bounded_http_transport

            bound = int(cfg.max_message_mb * 1024 * 1024)

            def refused(reason: str) -> None:
                self.refused = reason
            if self.sse:
                from mcp.client.sse import sse_client

                def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
                    return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth,
                                              event_hooks=hooks,
                                              transport=bounded_http_transport(
                                                  self.name, bound, refused))

                return sse_client(cfg.url, headers=_expand(cfg.headers),
                                  timeout=cfg.connect_timeout, sse_read_timeout=3600.0,
                                  httpx_client_factory=factory)
            from mcp.client.streamable_http import streamable_http_client

            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=_expand(cfg.headers), timeout=httpx2.Timeout(cfg.connect_timeout, read=None),
                event_hooks=hooks, transport=bounded_http_transport(self.name, bound, refused)))
            return streamable_http_client(cfg.url, http_client=http)
        from mcp import StdioServerParameters

        from jarvis.mcp.stdio import bounded_stdio_client

        session.token = new_token()
        cwd = str((self.base_dir / cfg.cwd).resolve()) if cfg.cwd else None
        if cwd is not None and not os.path.isdir(cwd):
            raise BadCwdError(f"cwd {cwd} is not a folder; fix `cwd` of [mcp.servers.{self.name}]")
        params = StdioServerParameters(command=cfg.command, args=list(cfg.args),
                                       env={**_expand(cfg.env), MARKER_VAR: session.token}, cwd=cwd)
        if cfg.sandbox:
            from jarvis.mcp.sandboxing import sandboxed

            params = await asyncio.to_thread(sandboxed, self.name, cfg, params, self.base_dir,
                                             self.sandbox, stack.callback)
        errlog: Any = None
        if self.log_path is not None:
            from jarvis.core.paths import open_private, private_dir

            with contextlib.suppress(OSError):
                private_dir(self.log_path.parent)  # server logs can hold tokens: 0700 / 0600
                errlog = stack.enter_context(open_private(self.log_path, "w", encoding="utf-8"))
        if errlog is None:
            errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
        return bounded_stdio_client(params, errlog, server=self.name,
                                    max_bytes=int(cfg.max_message_mb * 1024 * 1024))

    async def _own(self, session: _Session) -> None:
        """The task that opens the session, holds it until `stop`, then closes it."""
        import anyio
        from mcp import Client
        from mcp.types import Implementation

        from jarvis.mcp import logs
        from jarvis.mcp.capabilities import ClientCallbacks

        logs.install()
        callbacks = ClientCallbacks(self.name, self.config, self.roots, on_wait=self._on_wait)
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack, session)
                mode = "legacy" if self.legacy else "auto"
                if mode == "auto":
                    _shorten_discover_probe(self.config.connect_timeout)
                client = await stack.enter_async_context(Client(
                    transport, cache=None, mode=mode,
                    message_handler=self._message_handler(session),
                    client_info=Implementation(name="jarvis", version="0.1"),
                    **callbacks.kwargs()))
                if mode == "auto" and client.protocol_version not in _modern_versions():
                    self.legacy = True  # next time: no discover probe to wait out
                tools = await self._fetch_tools(client)
                session.client = client
                self._fresh = True
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
        self.error = shown_reason(reason)
        # Keep a reference: asyncio holds tasks weakly, and a collected stop task would leave
        # the server running.
        task = asyncio.get_running_loop().create_task(self._stop_session(session, wait=True))
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)

    # --- tool lists ----------------------------------------------------------------
    async def _fetch_tools(self, client: Any) -> list[RemoteTool]:
        """The server's tools: none when it announces no tools capability (a server of
        resources or prompts only) or does not know tools/list ("Method not found")."""
        from mcp.shared.exceptions import MCPError

        tools: list[RemoteTool] = []
        caps = getattr(client, "server_capabilities", None)
        if caps is not None and getattr(caps, "tools", True) is None:
            return tools
        cursor = None
        for _ in range(MAX_TOOL_PAGES):
            try:
                page = await client.list_tools(cursor=cursor)
            except MCPError as exc:
                if exc.code == METHOD_NOT_FOUND:
                    return tools
                raise
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
        if self._fresh and self.tools is not None:
            self._fresh = False  # the connect just listed them
            return self.tools
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
        """Re-list the tools after a change notice, coalescing a storm of notices.

        A server decides how many notices it sends: one listing per notice was as many
        concurrent list requests (up to MAX_TOOL_PAGES each), cache writes and re-registrations
        as notices (500 notices, 500 listings). At most one listing runs and one waits; a notice
        that comes while one waits is answered by it; listings start at least
        REFRESH_MIN_GAP seconds apart.
        """
        if session.refresh_queued:
            return
        session.refresh_queued = True
        if session.refresh_lock is None:
            session.refresh_lock = asyncio.Lock()
        lock = session.refresh_lock

        async def refresh() -> None:
            async with lock:
                session.refresh_queued = False  # a notice from now on needs another listing
                client = session.client
                if client is None:
                    return
                with contextlib.suppress(Exception):
                    self._publish_tools(await self._fetch_tools(client))
                await asyncio.sleep(REFRESH_MIN_GAP)

        task = asyncio.get_running_loop().create_task(refresh())
        session.refreshing.add(task)
        task.add_done_callback(session.refreshing.discard)

    # --- calling -------------------------------------------------------------------
    def _on_wait(self, waiting: bool) -> None:
        """A person is (no longer) being asked: pause (restart) the clocks of running calls."""
        import anyio

        from jarvis.mcp.capabilities import MAX_ANSWER_SECONDS

        self._paused += 1 if waiting else -1
        for scope, timeout in list(self._calls.items()):
            # After the answer the call gets its whole `timeout` again (the person's time is
            # not the server's).
            scope.deadline = anyio.current_time() + (MAX_ANSWER_SECONDS if self._paused > 0
                                                     else timeout)

    async def call(self, remote: str, arguments: dict[str, Any], timeout: float,
                   max_timeout: float | None = None, on_progress: Any = None,
                   meta: dict[str, Any] | None = None) -> Any:
        """Call tool `remote`; returns the SDK's CallToolResult.

        `timeout` restarts whenever the server reports progress (and is paused while a person
        answers an elicitation), but progress never keeps a call alive past `max_timeout`.
        """
        import anyio

        client = await self.ensure()
        self._fresh = False
        limit = max(timeout, max_timeout or timeout)
        start = anyio.current_time()
        result: Any = None
        with anyio.CancelScope() as scope:
            scope.deadline = start + timeout

            def restart() -> float:
                return min(anyio.current_time() + timeout, start + limit)

            # The server decides how many reports it sends: passed on as a burst of
            # PROGRESS_BURST, then PROGRESS_PER_SECOND (each is a stderr line and a bus event;
            # 5 000 reports in one call were 5 000 lines). Every report still keeps it alive.
            bucket = [float(PROGRESS_BURST), start]

            async def progress(value: float, total: float | None, message: str | None) -> None:
                if self._paused == 0:  # never shortens (an answered question gave more)
                    scope.deadline = max(scope.deadline, restart())
                now = anyio.current_time()
                bucket[0] = min(float(PROGRESS_BURST),
                                bucket[0] + (now - bucket[1]) * PROGRESS_PER_SECOND)
                bucket[1] = now
                if bucket[0] < 1:
                    return
                bucket[0] -= 1
                if on_progress is not None:
                    with contextlib.suppress(Exception):
                        on_progress(value, total, message)

            self._calls[scope] = timeout
            try:
                extra = {"meta": meta} if meta else {}  # `_meta` of the request
                result = await self._request(lambda: client.call_tool(
                    remote, arguments, progress_callback=progress, **extra))
            finally:
                self._calls.pop(scope, None)
        if scope.cancelled_caught:
            spent = anyio.current_time() - start
            self.drop(f"tool {remote!r} got no answer within {spent:.3g} s")
            more = (f" (progress kept it going up to {spent:.3g} s; max_timeout is {limit:g} s)"
                    if spent > timeout + 0.5 else "")
            raise McpCallTimeout(f"MCP server {self.name!r} did not answer {remote!r} within "
                                 f"{timeout:g} s{more}; the connection was closed and the next "
                                 f"call reconnects")
        return result

    async def _request(self, send: Any) -> Any:
        """Run one request over the session, turning every failure into our exceptions."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED
        from pydantic import ValidationError

        try:
            return await send()
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                reason = self._take_refusal() or ("connection closed during the call (the "
                                                  "server crashed or exited)")
                self.drop(reason)
                raise McpServerError(self.name, self._with_stderr(reason)) from None
            raise McpCallError(exc.code, exc.message) from None
        except ValidationError as exc:
            self.drop("sent an invalid response")
            raise McpServerError(self.name, f"sent an invalid response: {describe(exc)}") from None
        except (McpServerError, McpCallError, McpCallTimeout):
            raise
        except Exception as exc:  # noqa: BLE001 - broken pipes, HTTP errors, groups of them
            reason = self._take_refusal() or describe(exc)
            self.drop(reason)
            raise McpServerError(self.name, self._with_stderr(reason)) from None

    def _take_refusal(self) -> str | None:
        reason, self.refused = self.refused, None
        return reason

    # --- resources and prompts -------------------------------------------------------
    async def list_resources(self, timeout: float) -> dict[str, list[Any]]:
        """The server's resources and resource templates (bounded pages). A server that
        announces resources but does not know resources/templates/list (the method is
        optional: "Method not found") has no templates, not a broken listing."""
        import anyio

        client = await self.ensure()
        out: dict[str, list[Any]] = {"resources": [], "templates": []}
        caps = client.server_capabilities
        if caps.resources is None:
            return out
        with anyio.fail_after(timeout):
            for key, lister, field_name in (("resources", client.list_resources, "resources"),
                                            ("templates", client.list_resource_templates,
                                             "resource_templates")):
                cursor = None
                for _ in range(MAX_TOOL_PAGES):
                    try:
                        page = await self._request(lambda c=cursor, f=lister: f(cursor=c))
                    except McpCallError as exc:
                        if exc.code != METHOD_NOT_FOUND or key != "templates":
                            raise
                        break  # an optional method the server does not have: no templates
                    out[key].extend(getattr(page, field_name))
                    cursor = page.next_cursor
                    if not cursor or len(out[key]) >= MAX_TOOLS:
                        break
        return out

    async def read_resource(self, uri: str, timeout: float) -> Any:
        import anyio

        client = await self.ensure()
        with anyio.fail_after(timeout):
            return await self._request(lambda: client.read_resource(uri))

    async def list_prompts(self, timeout: float) -> list[Any]:
        import anyio

        client = await self.ensure()
        if client.server_capabilities.prompts is None:
            return []
        prompts: list[Any] = []
        with anyio.fail_after(timeout):
            cursor = None
            for _ in range(MAX_TOOL_PAGES):
                try:
                    page = await self._request(lambda c=cursor: client.list_prompts(cursor=c))
                except McpCallError as exc:
                    if exc.code != METHOD_NOT_FOUND:
                        raise
                    break  # announced, but the method is missing: no prompts
                prompts.extend(page.prompts)
                cursor = page.next_cursor
                if not cursor or len(prompts) >= MAX_TOOLS:
                    break
        return prompts

    async def get_prompt(self, name: str, arguments: dict[str, str], timeout: float) -> Any:
        import anyio

        client = await self.ensure()
        with anyio.fail_after(timeout):
            return await self._request(lambda: client.get_prompt(name, arguments or None))


def _modern_versions() -> Any:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return MODERN_PROTOCOL_VERSIONS


def _shorten_discover_probe(connect_timeout: float) -> None:
    """Make `server/discover` give up early, so a server that never answers it is reached by
    the SDK's own fall back to the initialize handshake within `connect_timeout`.

    The SDK waits DISCOVER_TIMEOUT_SECONDS (10 s, as long as our default connect timeout)
    before falling back, and offers no per-client setting, so its module value is lowered for
    every connection of this process (they all run on one loop). A modern server that answers
    late is still handled: the SDK re-probes when the handshake is refused as too old.
    """
    from mcp.client import session as sdk_session

    probe = max(1.0, min(DISCOVER_PROBE_SECONDS, connect_timeout / 3))
    if not hasattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS"):
        raise McpServerError("*", "this mcp SDK version has no DISCOVER_TIMEOUT_SECONDS; "
                                  "update jarvis.mcp.connection")
    sdk_session.DISCOVER_TIMEOUT_SECONDS = probe
