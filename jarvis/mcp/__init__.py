"""MCP both ways, with the official `mcp` SDK.

Client side: the servers declared in config.toml (`[mcp.servers.NAME]`) become ordinary
registry tools named `NAME__tool` (`adapter`: McpTool and the `mcp_adapter` bridge tool;
`manager`, `connection`, `cache`, `results`); their
connections live in one background event loop thread (`loop`) so sync callers reuse a warm
session. Server side: `server` exposes jarvis tools to any MCP client (`jarvis mcp serve`).

Nothing here imports `mcp` at module level: it costs ~0.8 s, paid only when a server is
actually contacted (a cached tool list needs no connection).
"""

from __future__ import annotations

__all__: list[str] = []
