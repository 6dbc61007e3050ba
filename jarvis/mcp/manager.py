"""The MCP servers of one config: cached tool lists, lazy connections, status, registration.

`register_mcp_tools(config)` (called from `load_extensions`) registers every enabled server's
tools in ToolRegistry as `NAME__tool` proxies, from the on-disk cache when there is one, so no
server starts for a command that uses none of them. A server without a cached list is only
contacted when one of its names is looked up or the full tool list is asked for (an on-demand
loader on ToolRegistry); those connections are made concurrently. A server that fails is
recorded with its reason (`status()`, `jarvis mcp list`) and never stops the others.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.mcp.cache import (
    FAILURE_TTL,
    RemoteTool,
    cache_dir,
    clear_failure,
    config_key,
    read_failure,
    read_tools,
    write_failure,
    write_tools,
)
from jarvis.mcp.connection import McpCallError, McpCallTimeout, McpServerError, ServerConnection
from jarvis.mcp.loop import background_loop
from jarvis.mcp.naming import SEPARATOR, local_names
from jarvis.mcp.tool import CALL_MARGIN, call_bound, requires_confirmation
from jarvis.security.redact import redact_args, redact_value

log = logging.getLogger("jarvis.mcp")

ON_DEMAND_SOURCE = "mcp"


@dataclass(slots=True)
class ServerState:
    """What the manager knows about one configured server."""

    name: str
    config: Any
    key: str
    connection: ServerConnection | None = None
    tools: list[RemoteTool] | None = None  # the last known full list (cache or live)
    source: str = "none"  # none | cache | live
    registered: dict[str, str] = field(default_factory=dict)  # local name -> remote name
    conflicts: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # tools refused (e.g. schema too large)
    remembered: tuple[str, float] | None = None  # a recent failure (reason, when) from disk

    @property
    def enabled(self) -> bool:
        return bool(self.config.enabled)


def selected(config: Any, remote_names: Iterable[str]) -> list[str]:
    """The remote tool names that pass the server's include/exclude lists (names or globs)."""
    out = []
    for name in remote_names:
        if config.include is not None and not any(fnmatch.fnmatchcase(name, p) for p in config.include):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in config.exclude):
            continue
        out.append(name)
    return out


class McpManager:
    """Every MCP server declared in one config, and their connections."""

    def __init__(self, config: Any) -> None:
        self.base_dir: Path = config.base_dir
        self.fingerprint = manager_fingerprint(config)
        self.servers: dict[str, ServerState] = {}
        # Whether tool lists fetched live (reconnects, list changes) update ToolRegistry; on for
        # the manager `register_mcp_tools` made, so a list change shows up at once.
        self.auto_register = False
        self._lock = threading.Lock()
        # Fixed now: the cache and logs stay put even if JARVIS_HOME changes later.
        self.state_dir = cache_dir()
        log_dir = self.state_dir / "logs"
        from jarvis.mcp.capabilities import roots_of

        roots = roots_of(config)
        self.roots = roots  # also what mcp_read_resource lets a file:// URI point into
        for name, server in config.mcp.servers.items():
            state = ServerState(name=name, config=server, key=config_key(server, self.base_dir))
            if server.enabled:
                state.connection = ServerConnection(name, server, self.base_dir,
                                                    on_tools=self._on_live_tools,
                                                    log_path=log_dir / f"{name}.log", roots=roots,
                                                    sandbox=getattr(config, "sandbox", None))
            self.servers[name] = state

    # --- tool lists and registration -------------------------------------------------
    def load_cached(self) -> None:
        """Register the tools of every enabled server that has a cached list."""
        for state in self.servers.values():
            if state.enabled and state.tools is None:
                cached = read_tools(self.state_dir, state.name, state.key)
                if cached is not None:
                    state.tools = cached
                    state.source = "cache"
                    self.register(state)

    def _on_live_tools(self, connection: ServerConnection, tools: list[RemoteTool]) -> None:
        state = self.servers.get(connection.name)
        if state is None or state.connection is not connection:
            return
        state.tools = tools
        state.source = "live"
        write_tools(self.state_dir, state.name, state.key, tools)
        if self.auto_register:
            self.register(state)

    def register(self, state: ServerState) -> None:
        """Make the registry hold exactly this server's selected tools (the list may have changed)."""
        from jarvis.mcp.tool import McpTool

        ToolRegistry._ensure_loaded()  # built-ins first: a server's tool taking one's name is refused
        with self._lock:
            tools = {t.name: t for t in state.tools or []}
            names = local_names(state.name, selected(state.config, tools))
            wanted = {local: tools[remote] for remote, local in names.items()}
            for local in list(state.registered):
                if local not in wanted and isinstance(ToolRegistry._entries.get(local), McpTool):
                    ToolRegistry.unregister(local)
            state.registered = {}
            state.conflicts = []
            state.skipped = []
            spent = 0  # characters of specs registered so far: they go with every request
            for local, remote in wanted.items():
                problem = schema_problem(remote)
                size = spec_chars(remote) if problem is None else 0
                if problem is None and spent + size > MAX_SERVER_SPEC_CHARS:
                    problem = (f"the server's tools before it already take {spent} characters "
                               f"of descriptions and schemas; the limit per server is "
                               f"{MAX_SERVER_SPEC_CHARS}")
                if problem is not None:
                    state.skipped.append(f"{local}: {problem}")
                    continue
                spent += size
                existing = ToolRegistry._entries.get(local)
                if existing is not None and not isinstance(existing, McpTool):
                    state.conflicts.append(f"{local} (taken by {ToolRegistry._origins.get(local)})")
                    continue
                tool = McpTool(self, state.name, remote, local, state.config)
                ToolRegistry.register_value(local, tool, origin=f"mcp server {state.name}",
                                            replace=True)
                state.registered[local] = remote.name

    def register_known(self) -> None:
        """Register every server whose tool list is known (cached or live)."""
        for state in self.servers.values():
            if state.enabled and state.tools is not None:
                self.register(state)

    def tool_names(self, server: str) -> dict[str, str]:
        """Registered local name -> remote name, for one server."""
        return dict(self.servers[server].registered)

    def load_on_demand(self, key: str | None) -> None:
        """ToolRegistry's on-demand hook: `key` None means every tool is wanted.

        A server that failed within FAILURE_TTL seconds (in this or another process) is not
        tried again here; `explain(key)` says why its tools are missing.
        """
        if key is None:
            wanted = [s for s in self.servers.values() if s.enabled and s.tools is None]
        else:
            wanted = [s for s in self.servers.values()
                      if s.enabled and s.tools is None and key.startswith(s.name + SEPARATOR)]
        pending = [s.name for s in wanted if self.failure(s) is None]
        results = self.refresh(pending) if pending else {}
        if key is None:
            for state in wanted:
                reason = results.get(state.name) if state.name in results else (
                    self._failure_note(state))
                if reason:
                    log.warning("MCP server %r is unavailable, its tools are left out: %s "
                                "(`jarvis mcp list` shows every server's status)", state.name,
                                reason)

    def failure(self, state: ServerState) -> str | None:
        """Why the server is failing now, from this process or remembered on disk; else None."""
        conn = state.connection
        if conn is not None and conn.status == "ready":
            return None
        if conn is not None and conn.status == "failed" and conn.failed_at and \
                time.time() - conn.failed_at < FAILURE_TTL:
            return conn.error
        remembered = read_failure(self.state_dir, state.name, state.key)
        state.remembered = remembered
        return remembered[0] if remembered else None

    def _failure_note(self, state: ServerState) -> str | None:
        reason = self.failure(state)
        if reason and state.remembered and (state.connection is None
                                            or state.connection.status != "failed"):
            age = max(0, round(time.time() - state.remembered[1]))
            left = max(0, round(FAILURE_TTL - age))
            reason += (f" (remembered from {age} s ago: not retried for {left} s more, or "
                       f"retry now with `jarvis mcp list`)")
        return reason

    def explain(self, key: str) -> str | None:
        """Why the tool name `key` (SERVER__tool) is not available, when its server failed."""
        for state in self.servers.values():
            if state.enabled and key.startswith(state.name + SEPARATOR) and \
                    not state.registered.get(key):
                reason = self._failure_note(state)
                if reason:
                    return f"MCP server {state.name!r} is unavailable: {reason}"
                if state.tools is not None:
                    for skipped in state.skipped:
                        if skipped.startswith(key + ": "):
                            return f"MCP server {state.name!r} offers {key!r}, but it is not " \
                                   f"used: {skipped[len(key) + 2:]}"
                    names = ", ".join(sorted(state.registered)) or "(none)"
                    return f"MCP server {state.name!r} has no tool {key!r}; its tools: {names}"
        return None

    # --- connecting ------------------------------------------------------------------
    def refresh(self, names: Iterable[str] | None = None) -> dict[str, str | None]:
        """Connect to the servers (concurrently) and fetch their tool lists.

        Returns server name -> None on success or the reason it failed. Never raises for a
        server's failure.
        """
        targets = [self.servers[n] for n in (names if names is not None else self.servers)
                   if n in self.servers and self.servers[n].connection is not None]
        if not targets:
            return {}
        bound = max(s.config.connect_timeout for s in targets) + 5.0
        try:
            return background_loop().run(self._arefresh(targets), timeout=bound)
        except Exception as exc:  # noqa: BLE001 - a stuck loop must not stop jarvis
            return {s.name: f"refresh did not finish: {exc!r}" for s in targets}

    async def _arefresh(self, targets: list[ServerState]) -> dict[str, str | None]:
        async def one(state: ServerState) -> str | None:
            try:
                await state.connection.refresh_tools()
            except McpServerError as exc:
                reason = exc.reason
            except Exception as exc:  # noqa: BLE001 - the reason is shown by `jarvis mcp list`
                reason = redact_value("error", f"{type(exc).__name__}: {exc}")
            else:
                state.remembered = None
                clear_failure(self.state_dir, state.name, state.key)
                return None
            write_failure(self.state_dir, state.name, state.key, reason)
            return reason

        results = await asyncio.gather(*(one(s) for s in targets))
        return {s.name: r for s, r in zip(targets, results, strict=True)}

    async def acall(self, server: str, remote: str, local: str,
                    arguments: dict[str, Any], timeout: float,
                    on_progress: Any = None, meta: dict[str, Any] | None = None) -> ToolResult:
        """Call a tool on the background loop and turn every outcome into a ToolResult;
        `meta` goes in the request's `_meta` (a scheduled run's idempotency key)."""
        from jarvis.mcp.results import to_tool_result

        connection = self.servers[server].connection
        if connection is None:
            return ToolResult.failure(local, f"MCP server {server!r} is disabled in config.toml",
                                      ErrorType.TRANSPORT, mcp_server=server)
        try:
            result = await connection.call(remote, arguments, timeout,
                                           max_timeout=self.servers[server].config.max_timeout,
                                           on_progress=on_progress, meta=meta)
        except McpServerError as exc:
            return ToolResult.failure(local, f"{exc}; the next call reconnects",
                                      ErrorType.TRANSPORT, mcp_server=server, mcp_tool=remote)
        except McpCallTimeout as exc:
            return ToolResult.failure(local, str(exc), ErrorType.TIMEOUT, mcp_server=server,
                                      mcp_tool=remote, timeout_seconds=timeout)
        except McpCallError as exc:
            kind = ErrorType.INVALID_ARGS if exc.code == -32602 else ErrorType.EXECUTION
            return ToolResult.failure(local, f"MCP server {server!r} rejected the call to "
                                      f"{remote!r}: {exc}", kind, mcp_server=server,
                                      mcp_tool=remote, mcp_error_code=exc.code)
        return to_tool_result(local, server, remote, result)

    def call(self, server: str, remote: str, local: str, arguments: dict[str, Any],
             timeout: float, on_progress: Any = None,
             meta: dict[str, Any] | None = None) -> ToolResult:
        """Blocking form of `acall` (for the executor's worker threads)."""
        if background_loop().in_loop():  # blocking here would wait on ourselves
            return ToolResult.failure(local, f"MCP tool {local} was called synchronously on the "
                                      f"MCP loop; use ainvoke", ErrorType.EXECUTION)
        config = self.servers[server].config
        bound = config.connect_timeout + call_bound(config, timeout) + CALL_MARGIN
        future = background_loop().submit(self.acall(server, remote, local, arguments, timeout,
                                                     on_progress, meta))
        try:
            return future.result(bound)
        except TimeoutError:
            future.cancel()
            return ToolResult.failure(local, f"MCP server {server!r} did not answer {remote!r} "
                                      f"within {bound:g} s", ErrorType.TIMEOUT, mcp_server=server)

    # --- resources and prompts -------------------------------------------------------
    def _run(self, server: str, make: Any, timeout: float) -> Any:
        """Run `make(connection)` on the loop, bounded; McpServerError/McpCallError pass out."""
        state = self.servers.get(server)
        if state is None or state.connection is None:
            known = ", ".join(sorted(n for n, s in self.servers.items() if s.enabled)) or "(none)"
            raise McpServerError(server, f"no such enabled MCP server; enabled servers: {known}")
        bound = state.config.connect_timeout + timeout + CALL_MARGIN
        try:
            return background_loop().run(make(state.connection), timeout=bound)
        except TimeoutError:
            raise McpCallTimeout(f"MCP server {server!r} did not answer within {timeout:g} s") from None

    def resources(self, server: str) -> dict[str, list[Any]]:
        """The server's resources and resource templates (SDK objects)."""
        timeout = self.servers[server].config.timeout if server in self.servers else 30.0
        return self._run(server, lambda c: c.list_resources(timeout), timeout)

    def read_resource(self, server: str, uri: str) -> Any:
        """The SDK's ReadResourceResult for `uri`."""
        timeout = self.servers[server].config.timeout if server in self.servers else 30.0
        return self._run(server, lambda c: c.read_resource(uri, timeout), timeout)

    def prompts(self, server: str) -> list[Any]:
        timeout = self.servers[server].config.timeout if server in self.servers else 30.0
        return self._run(server, lambda c: c.list_prompts(timeout), timeout)

    def get_prompt(self, server: str, name: str, arguments: dict[str, str]) -> Any:
        timeout = self.servers[server].config.timeout if server in self.servers else 30.0
        return self._run(server, lambda c: c.get_prompt(name, arguments, timeout), timeout)

    async def aclose(self) -> None:
        conns = [s.connection for s in self.servers.values() if s.connection is not None]
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    def close(self) -> None:
        """Stop every session this manager opened (stdio servers and their children end)."""
        if any(s.connection is not None and s.connection.status != "idle"
               for s in self.servers.values()):
            background_loop().run(self.aclose(), timeout=15.0)

    # --- listing ---------------------------------------------------------------------
    def status(self) -> list[dict[str, Any]]:
        """One row per configured server: transport, status, reason, tools."""
        rows = []
        for state in self.servers.values():
            cfg = state.config
            conn = state.connection
            if not state.enabled:
                status, error = "disabled", None
            elif conn is not None and conn.status == "failed":
                status, error = "failed", conn.error
            elif conn is not None and conn.status == "ready":
                status, error = "connected", None
            elif self.failure(state) is not None:
                status, error = "failed", self._failure_note(state)
            elif state.tools is not None:
                status, error = "cached", None
            else:
                status, error = "not started", None
            remote = {t.name: t for t in state.tools or []}
            tools = []
            for local, remote_name in sorted(state.registered.items()):
                t = remote.get(remote_name)
                tools.append({"name": local, "remote_name": remote_name,
                              "description": (t.description if t else "").strip(),
                              "requires_confirmation": requires_confirmation(cfg, t) if t else False})
            hidden = sorted(set(remote) - set(selected(cfg, remote)))
            rows.append({
                "name": state.name,
                "transport": ("sse" if conn is not None and conn.sse else "http") if cfg.url
                else "stdio",
                # Shown on a terminal and in --json: masked like `jarvis config show`.
                "target": (redact_value("url", cfg.url) if cfg.url else
                           " ".join(map(str, [cfg.command or "", *redact_args(list(cfg.args))]))
                           .strip()),
                "enabled": state.enabled,
                # stdio servers: in the sandbox unless the config says sandbox = false
                "sandbox": bool(cfg.sandbox) if cfg.command else None,
                "status": status,
                "error": redact_value("error", error) if isinstance(error, str) else error,
                "tools_from": state.source,
                "tools": tools,
                "hidden_tools": hidden,
                "conflicts": list(state.conflicts),
                "skipped": list(state.skipped),
                "protocol_version": conn.protocol_version if conn else None,
            })
        return rows


MAX_SCHEMA_CHARS = 64 * 1024
MAX_SERVER_SPEC_CHARS = 1024 * 1024  # all of one server's tool specs together


def spec_chars(tool: RemoteTool) -> int:
    """About what a tool costs in every request that offers it (description and schemas)."""
    size = min(len(tool.description or ""), 4000)
    for schema in (tool.input_schema, tool.output_schema):
        if schema:
            size += len(json.dumps(schema, ensure_ascii=False))
    return size


def schema_problem(tool: RemoteTool) -> str | None:
    """Why a server's tool is not offered to models, or None: its input schema goes into every
    request that offers the tool, so one of megabytes would cost that on every turn (and the
    output schema is kept with it)."""
    for what, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
        if not schema:
            continue
        try:
            size = len(json.dumps(schema, ensure_ascii=False))
        except (TypeError, ValueError, RecursionError):
            return f"its {what} schema is not JSON"
        if size > MAX_SCHEMA_CHARS:
            return (f"its {what} schema has {size} characters; the limit is {MAX_SCHEMA_CHARS} "
                    f"(it would be sent with every request)")
    return None


def manager_fingerprint(config: Any) -> str:
    data = {"base": str(config.base_dir), "home": str(cache_dir()),
            "servers": {n: s.model_dump() for n, s in config.mcp.servers.items()}}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


_ACTIVE: McpManager | None = None
_ALL: list[McpManager] = []
_ACTIVE_LOCK = threading.Lock()


async def _close_all_managers() -> None:
    await asyncio.gather(*(m.aclose() for m in list(_ALL)), return_exceptions=True)


def get_manager(config: Any) -> McpManager:
    """The manager for this config, reused while the MCP part of the config is unchanged (so
    warm connections survive repeated `load_extensions` calls)."""
    global _ACTIVE
    with _ACTIVE_LOCK:
        fingerprint = manager_fingerprint(config)
        if _ACTIVE is not None and _ACTIVE.fingerprint == fingerprint:
            return _ACTIVE
        if _ACTIVE is not None:
            _retire(_ACTIVE)
        manager = McpManager(config)
        if not _ALL:
            background_loop().on_exit(_close_all_managers)
        _ALL.append(manager)
        _ACTIVE = manager
        return manager


def _retire(manager: McpManager) -> None:
    """Take a replaced manager's tools out of the registry and close its sessions."""
    from jarvis.mcp.tool import McpTool

    manager.auto_register = False
    for state in manager.servers.values():
        for local in state.registered:
            entry = ToolRegistry._entries.get(local)
            if isinstance(entry, McpTool) and entry.manager is manager:
                ToolRegistry.unregister(local)
        state.registered = {}
    if any(s.connection is not None and s.connection.status != "idle"
           for s in manager.servers.values()):
        background_loop().submit(manager.aclose())


def active_manager() -> McpManager | None:
    return _ACTIVE


def register_mcp_tools(config: Any) -> McpManager | None:
    """Register the enabled servers' tools (from cache) and the on-demand loader for the rest.

    Starts no server: a server whose tool list is not cached is contacted only when one of
    its tools is looked up by name or every tool is listed.
    """
    global _ACTIVE
    if not config.mcp.servers:
        ToolRegistry.set_on_demand(ON_DEMAND_SOURCE, None)
        with _ACTIVE_LOCK:
            if _ACTIVE is not None:
                _retire(_ACTIVE)
                _ACTIVE = None
        return None
    ToolRegistry._ensure_loaded()  # built-ins first (on this thread, before any connection)
    manager = get_manager(config)
    manager.auto_register = True
    manager.load_cached()
    ToolRegistry.set_on_demand(ON_DEMAND_SOURCE, manager.load_on_demand, manager.explain)
    return manager
