"""The bridge to external MCP tool servers.

`McpTool` (jarvis.mcp.tool, importable from here too) is one tool of a configured server
(`[mcp.servers.NAME]` in config.toml) as an ordinary jarvis tool named `NAME__tool`;
`jarvis.mcp.manager` registers these from the config.

`mcp_adapter` (registry key) is a single tool that reaches any configured server's tools by
server and tool name, for agents that should not carry every MCP tool in their tool list. It
honours the same include/exclude lists and refuses tools that require confirmation (those are
called by their own `NAME__tool` name, which asks).

This module is imported with the built-in catalog, so it must not import `mcp`. It lives in
the MCP package (it was jarvis/tools/mcp_adapter.py) because it needs the MCP manager and
loop: in the tool package it was an upward import from tools into mcp. `jarvis/__init__`
loads it with the rest of the built-in catalog.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.mcp.tool import McpTool
from jarvis.tools.base import BaseTool
from jarvis.tools.context import ToolContext
from jarvis.tools.spec import ToolSpec


def _first_line(text: str) -> str:
    text = (text or "").strip()
    return text.splitlines()[0] if text else ""


@ToolRegistry.register("mcp_adapter")
class McpAdapterTool(BaseTool):
    """Call a tool of a configured MCP server by server and tool name."""

    tool_id = "mcp_adapter"
    needs = ("config",)

    def __init__(self, config: Any = None) -> None:
        self._config = config

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="mcp_adapter",
            description=(
                "Bridge to external MCP tool servers: call tool `tool` of the configured MCP "
                "server `server` with `arguments`. Leave `tool` empty to list that server's "
                "tools. Tools that require confirmation are refused here; call them by their "
                "own SERVER__tool name."),
            parameters={
                "type": "object",
                "properties": {
                    "server": {"type": "string", "description": "server name from config.toml",
                               "maxLength": 64},
                    "tool": {"type": "string", "description": "the tool's name on that server "
                             "(empty: list the server's tools)", "maxLength": 256},
                    "arguments": {"type": "object", "description": "the tool's arguments"},
                },
                "required": ["server"],
            },
            category="integration",
            metadata={"mcp_bridge": True},
            output_labels=frozenset({"private", "untrusted"}),  # any server, any data
            egress="mcp",
        )

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        from jarvis.trust.labels import Egress

        proxy = self._known_proxy(str(arguments.get("server") or ""),
                                  str(arguments.get("tool") or ""))
        # What the bridge will not call sends nothing: a listing, a tool that asks first (the
        # bridge refuses it), a tool that declares it sends nothing (trusted, read-only,
        # closed-world). Anything not known yet is judged as sending to the server.
        if proxy is not None and (proxy.spec.requires_confirmation or proxy.spec.egress == "none"):
            return []
        if not arguments.get("tool") and arguments.get("server"):
            return []
        return [Egress.of("mcp", str(arguments.get("server") or ""),
                          method=str(arguments.get("tool") or ""),
                          payload=[arguments.get("arguments")])]

    def _known_proxy(self, server: str, tool: str) -> McpTool | None:
        """The registered proxy of `server`'s `tool` when it is known already (no start)."""
        manager = self._manager()
        state = manager.servers.get(server) if manager is not None else None
        if state is None or not tool:
            return None
        local = {remote: name for name, remote in state.registered.items()}.get(tool)
        proxy = ToolRegistry._entries.get(local) if local else None
        return proxy if isinstance(proxy, McpTool) else None

    def _manager(self) -> Any:
        from jarvis.mcp.manager import active_manager, register_mcp_tools

        if self._config is not None and self._config.mcp.servers:
            return register_mcp_tools(self._config)
        return active_manager()

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolResult:
        return self.execute(**arguments)

    def execute(self, server: str = "", tool: str = "", arguments: dict[str, Any] | None = None,
                **_: Any) -> ToolResult:
        manager = self._manager()
        if manager is None or not manager.servers:
            return ToolResult.failure("mcp_adapter", "no MCP servers are configured; add a "
                                      "[mcp.servers.NAME] table to config.toml", ErrorType.EXECUTION)
        state = manager.servers.get(server)
        if state is None or not state.enabled:
            valid = ", ".join(sorted(n for n, s in manager.servers.items() if s.enabled)) or "(none)"
            return ToolResult.failure("mcp_adapter", f"unknown or disabled MCP server {server!r}; "
                                      f"enabled servers: {valid}", ErrorType.INVALID_ARGS)
        if state.tools is None:
            manager.load_cached()
        if state.tools is None:
            reason = manager.refresh([server]).get(server)
            if reason:
                return ToolResult.failure("mcp_adapter", f"MCP server {server!r}: {reason}",
                                          ErrorType.TRANSPORT, mcp_server=server)
        by_remote = {remote: local for local, remote in state.registered.items()}
        if not tool:
            remote_tools = {t.name: t for t in state.tools or []}
            lines = []
            for name in sorted(by_remote):
                proxy = ToolRegistry._entries.get(by_remote[name])
                note = (f" [requires confirmation: call it as {by_remote[name]}]"
                        if isinstance(proxy, McpTool) and proxy.spec.requires_confirmation else "")
                lines.append(f"{name}: {_first_line(remote_tools[name].description)}{note}")
            from jarvis.trust.labels import UNTRUSTED

            # Descriptions are the server's words, not the person's data: untrusted only.
            return ToolResult(tool_name="mcp_adapter", content="\n".join(lines) or "(no tools)",
                              labels=frozenset({UNTRUSTED}))
        local = by_remote.get(tool)
        if local is None:
            return ToolResult.failure("mcp_adapter", f"MCP server {server!r} offers no tool "
                                      f"{tool!r}; its tools: {', '.join(sorted(by_remote)) or '(none)'}",
                                      ErrorType.TOOL_NOT_FOUND)
        proxy = ToolRegistry._entries.get(local)
        if not isinstance(proxy, McpTool):
            return ToolResult.failure("mcp_adapter", f"tool {tool!r} of MCP server {server!r} is "
                                      f"not available", ErrorType.TOOL_NOT_FOUND)
        if proxy.spec.requires_confirmation:
            return ToolResult.failure("mcp_adapter", f"tool {tool!r} of MCP server {server!r} "
                                      f"requires confirmation; call it as {local}", ErrorType.DENIED)
        try:
            args = proxy.validate_arguments(dict(arguments or {}))
        except Exception as exc:  # noqa: BLE001 - ToolArgumentError, reported to the model
            return ToolResult.failure("mcp_adapter", str(exc), ErrorType.INVALID_ARGS)
        result = proxy.invoke(args)
        result.tool_name = "mcp_adapter"
        if result.labels is None:
            result.labels = proxy.spec.output_labels  # what that server's tool is
        return result


DEFAULT_RESOURCE_CHARS = 20_000
MAX_RESOURCE_CHARS = 200_000


def _file_outside_roots(uri: str, roots: list[Path] | None, config: Any = None) -> str | None:
    """Why a file:// URI may not be read (None: it may). The model picks the server and the
    URI, often from a link some server returned: a link to file:///etc/shadow, read through
    another server (a filesystem server with wide access), must stay inside the roots jarvis
    gives servers (the workspace and the [tools.NAME] allowed_dirs) and obey file_read's
    secret rules (hidden files, keys, credentials, jarvis's own config and state, unless
    listed in [tools.file_read] allowed_secret_paths)."""
    from urllib.parse import unquote, urlsplit

    if not uri.lower().startswith("file:"):
        return None
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        return f"refused: {uri!r} names another host; only local file:// URIs can be read"
    # `..` and symlinks (where the server shares this machine) resolved as the server would.
    path = Path(os.path.normpath(unquote(parts.path) or "/")).resolve()
    if not any(path == root or root in path.parents for root in roots or []):
        shown = ", ".join(str(r) for r in roots or []) or "(none)"
        return (f"refused: {uri!r} is outside the folders MCP servers may read for jarvis "
                f"({shown}); add its folder to `allowed_dirs` of a [tools.NAME] table to "
                f"allow it")
    from jarvis.security.paths import PathDenied, PathPolicy, jarvis_secret_files

    settings = getattr(getattr(config, "tools", None), "settings", None) or {}
    table = settings.get("file_read") if isinstance(settings, dict) else None
    allowed = table.get("allowed_secret_paths") if isinstance(table, dict) else None
    policy = PathPolicy(list(roots or []), allowed or (), setting="[tools.file_read]")
    if config is not None:
        policy.secret_files.update(jarvis_secret_files(config))
    try:
        policy.check(str(path))
    except (PathDenied, ValueError) as exc:
        return f"refused: {uri!r}: {exc}"
    return None


def _secret_file(uri: str, result: Any) -> str | None:
    """Why a file:// resource's text may not be shown (None: it may): a host file read by a
    server is checked by content as file_read checks it, all of its text (not only what
    max_chars would show), so a key under an innocent name does not reach the model."""
    if not uri.lower().startswith("file:"):
        return None
    from jarvis.security.secret_content import secret_in

    for item in getattr(result, "contents", None) or []:
        text = getattr(item, "text", None)
        kind = secret_in(text) if isinstance(text, str) else None
        if kind is not None:
            return (f"refused: {uri!r} looks like {kind}, and secrets are never read, whatever "
                    f"the file's name; if it is yours to share, add its path to "
                    f"allowed_secret_paths in [tools.file_read] and read it with file_read")
    return None


@ToolRegistry.register("mcp_read_resource")
class McpReadResourceTool(BaseTool):
    """Read a resource of a configured MCP server by URI (e.g. a resource link a tool returned)."""

    tool_id = "mcp_read_resource"
    needs = ("config",)
    internal_params = ("manager",)  # an McpManager given directly (tests, the SDK)

    def __init__(self, config: Any = None, manager: Any = None) -> None:
        self._config = config
        self._given = manager  # an McpManager to use instead of the config's (SDK, tests)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="mcp_read_resource",
            description=(
                "Read a resource of a configured MCP server by its URI, e.g. a resource link or "
                "embedded resource that an MCP tool returned. Text comes back cut to "
                "`max_chars`; images come back as images; other binary data is described, "
                "not shown."),
            parameters={
                "type": "object",
                "properties": {
                    "server": {"type": "string", "description": "server name from config.toml",
                               "maxLength": 64},
                    "uri": {"type": "string", "description": "the resource's URI",
                            "maxLength": 2048},
                    "max_chars": {"type": "integer", "minimum": 1,
                                  "maximum": MAX_RESOURCE_CHARS,
                                  "description": f"most characters of text to return "
                                                 f"(default {DEFAULT_RESOURCE_CHARS})"},
                },
                "required": ["server", "uri"],
            },
            category="integration",
            metadata={"mcp_bridge": True, "mcp_annotations": {"readOnlyHint": True}},
            # A resource may be a file of the person's (file://) written by anyone: both.
            output_labels=frozenset({"private", "untrusted"}),
            egress="mcp",  # the URI goes to the server, which may fetch it from anywhere
        )

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        from jarvis.trust.labels import Egress

        return [Egress.of("mcp", str(arguments.get("server") or ""), method="read_resource",
                          payload=[arguments.get("uri")])]

    def _manager(self) -> Any:
        if self._given is not None:
            return self._given
        from jarvis.mcp.manager import active_manager, register_mcp_tools

        if self._config is not None and self._config.mcp.servers:
            return register_mcp_tools(self._config)
        return active_manager()

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolResult:
        return self.execute(**arguments)

    def execute(self, server: str = "", uri: str = "", max_chars: int = DEFAULT_RESOURCE_CHARS,
                **_: Any) -> ToolResult:
        from jarvis.mcp.connection import McpCallError, McpCallTimeout, McpServerError
        from jarvis.mcp.resources import resource_result

        name = "mcp_read_resource"
        manager = self._manager()
        state = manager.servers.get(server) if manager is not None else None
        if state is None or not state.enabled:
            valid = ", ".join(sorted(n for n, s in (manager.servers.items() if manager else [])
                                     if s.enabled)) or "(none)"
            return ToolResult.failure(name, f"unknown or disabled MCP server {server!r}; enabled "
                                      f"servers: {valid}", ErrorType.INVALID_ARGS)
        if not uri or len(uri) > 2048:
            return ToolResult.failure(name, "give the resource's `uri` (at most 2048 characters)",
                                      ErrorType.INVALID_ARGS)
        outside = _file_outside_roots(uri, getattr(manager, "roots", None), self._config)
        if outside:
            return ToolResult.failure(name, outside, ErrorType.DENIED, mcp_server=server)
        limit = max(1, min(int(max_chars or DEFAULT_RESOURCE_CHARS), MAX_RESOURCE_CHARS))
        try:
            result = manager.read_resource(server, uri)
        except McpCallError as exc:
            kind = ErrorType.INVALID_ARGS if exc.code in (-32602, -32002) else ErrorType.EXECUTION
            return ToolResult.failure(name, f"MCP server {server!r} could not read {uri!r}: {exc}",
                                      kind, mcp_server=server)
        except McpCallTimeout as exc:
            return ToolResult.failure(name, str(exc), ErrorType.TIMEOUT, mcp_server=server)
        except McpServerError as exc:
            return ToolResult.failure(name, str(exc), ErrorType.TRANSPORT, mcp_server=server)
        secret = _secret_file(uri, result)
        if secret:
            return ToolResult.failure(name, secret, ErrorType.DENIED, mcp_server=server)
        return resource_result(name, server, uri, result, limit)
