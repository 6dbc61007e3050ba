"""A standalone MCP client, and tool adapters over it, in OpenJarvis's form.

    from jarvis.mcp.client import MCPClient, MCPToolProvider, StdioTransport

    client = MCPClient(StdioTransport(command=["python", "server.py"]))
    client.initialize()
    tools = MCPToolProvider(client).discover()   # jarvis tools, for any agent or executor
    client.close()

It is jarvis's own MCP client underneath (the connection, limits, reconnects, progress and
result conversion of `[mcp.servers]`), for one server that is not in config.toml. The tools
keep their server's names (a character an OpenAI function name cannot hold becomes '_') and
run through the ToolExecutor like any other. As for `[mcp.servers]` (docs/trust.md), every tool
asks before each call and counts as sending its arguments out, with untrusted results, unless
the client is made with `trusted=True`: then the server's annotations count (read-only tools
need no confirmation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from jarvis.core.types import ToolResult
from jarvis.errors import DependencyError, UserError
from jarvis.mcp.adapter import McpTool
from jarvis.tools.spec import ToolSpec

_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(slots=True)
class StdioTransport:
    """A server started as a subprocess speaking MCP on stdin/stdout."""

    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(slots=True)
class StreamableHTTPTransport:
    """A server at a streamable-HTTP (or HTTP+SSE) URL; `token` is sent as a Bearer token."""

    url: str
    token: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _server_table(transport: Any, timeout: float, connect_timeout: float) -> dict[str, Any]:
    table: dict[str, Any] = {"timeout": timeout, "connect_timeout": connect_timeout}
    if isinstance(transport, StdioTransport):
        command = [str(c) for c in transport.command]
        if not command:
            raise UserError("StdioTransport needs a command, e.g. ['python', 'server.py']")
        table.update(command=command[0], args=command[1:], env=dict(transport.env))
        if transport.cwd:
            table["cwd"] = str(transport.cwd)
    elif isinstance(transport, StreamableHTTPTransport):
        headers = dict(transport.headers)
        if transport.token:
            headers.setdefault("Authorization", f"Bearer {transport.token}")
        table.update(url=transport.url, headers=headers)
    else:
        raise UserError(f"MCPClient takes a StdioTransport or StreamableHTTPTransport, not "
                        f"{type(transport).__name__}")
    return table


class MCPClient:
    """One MCP server, connected on `initialize()` (or on first use), closed by `close()`.

    Args:
        transport: StdioTransport(command=[...]) or StreamableHTTPTransport(url=...).
        name: the server's name in messages and tool metadata.
        timeout: seconds per tool call; connect_timeout: seconds to connect.
        trusted: believe the server's tool annotations (as `trusted = true` in config.toml).
    """

    def __init__(self, transport: Any, *, name: str = "server", timeout: float = 30.0,
                 connect_timeout: float = 10.0, trusted: bool = False) -> None:
        from jarvis.core.config import JarvisConfig, McpConfig, McpServerConfig
        from jarvis.core.server_names import check_server_name

        problem = check_server_name(name)
        if problem:
            raise UserError(f"MCP server name {name!r}: the server name {problem}")
        table = _server_table(transport, timeout, connect_timeout)
        table["trusted"] = bool(trusted)
        self.name = name
        self.server_config = McpServerConfig(**table)
        config = JarvisConfig(mcp=McpConfig(servers={name: self.server_config}))
        from jarvis.mcp.manager import McpManager

        # A manager of its own: these tools never enter ToolRegistry by themselves.
        self._manager = McpManager(config)
        self._initialized = False
        self._closed = False

    def initialize(self) -> dict[str, Any]:
        """Connect and list the tools; returns the server's info (name, version)."""
        if self._closed:
            raise UserError("this MCPClient is closed; make a new one")
        reason = self._manager.refresh([self.name]).get(self.name)
        if reason is not None:
            raise DependencyError(f"MCP server {self.name!r} could not be reached: {reason}")
        self._initialized = True
        connection = self._manager.servers[self.name].connection
        return dict(connection.server_info or {}) if connection is not None else {}

    def _remote_tools(self) -> list[Any]:
        if not self._initialized:
            self.initialize()
        return list(self._manager.servers[self.name].tools or [])

    def _remote(self, name: str) -> Any:
        for remote in self._remote_tools():
            if remote.name == name or local_name(remote.name) == name:
                return remote
        names = ", ".join(r.name for r in self._remote_tools()) or "(none)"
        raise UserError(f"MCP server {self.name!r} has no tool {name!r}; its tools: {names}")

    def list_tools(self) -> list[ToolSpec]:
        """The server's tools as ToolSpecs (named as the server names them, cleaned)."""
        return [self.adapter(remote.name).spec for remote in self._remote_tools()]

    def adapter(self, name: str) -> MCPToolAdapter:
        return MCPToolAdapter(self, name)

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call a tool directly; returns `{"content": [blocks], "isError": bool}`."""
        result = self.call(name, arguments)
        return {"content": [b.to_dict() for b in result.all_blocks()],
                "isError": not result.success}

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Call a tool directly (no executor: no validation or confirmation) as a ToolResult."""
        remote = self._remote(name)
        return self._manager.call(self.name, remote.name, local_name(remote.name),
                                  dict(arguments or {}), self.server_config.timeout)

    def close(self) -> None:
        """End the session (a stdio server's process ends with it)."""
        if not self._closed:
            self._closed = True
            self._manager.close()

    def __enter__(self) -> MCPClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def local_name(remote: str) -> str:
    """The tool name jarvis uses for a server's tool: the same, made a valid function name."""
    return _INVALID.sub("_", remote)[:64] or "tool"


class MCPToolAdapter(McpTool):
    """One tool of an MCPClient's server as a jarvis tool.

    Args:
        client: the MCPClient.
        tool_spec: a ToolSpec from `client.list_tools()`, or the tool's name.
    """

    def __init__(self, client: MCPClient, tool_spec: ToolSpec | str) -> None:
        name = tool_spec if isinstance(tool_spec, str) else tool_spec.name
        remote = client._remote(name)
        super().__init__(client._manager, client.name, remote, local_name(remote.name),
                         client.server_config)
        self.client = client


class MCPToolProvider:
    """The tools of an MCPClient's server: `MCPToolProvider(client).discover()`."""

    def __init__(self, client: MCPClient) -> None:
        if not isinstance(client, MCPClient):
            raise UserError(f"MCPToolProvider takes an MCPClient, not {type(client).__name__}")
        self.client = client

    def discover(self) -> list[MCPToolAdapter]:
        """Connect if needed and return one adapter per tool of the server."""
        return [MCPToolAdapter(self.client, remote.name)
                for remote in self.client._remote_tools()]


__all__ = ["MCPClient", "MCPToolAdapter", "MCPToolProvider", "StdioTransport",
           "StreamableHTTPTransport"]
