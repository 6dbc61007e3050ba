"""MCP both ways, with the official `mcp` SDK.

Client side: the servers declared in config.toml (`[mcp.servers.NAME]`) become ordinary
registry tools named `NAME__tool` (`adapter`: McpTool, the `mcp_adapter` bridge tool and
`mcp_read_resource`; `manager`, `connection`, `cache`, `results`, `resources`); what jarvis
answers when a server asks (roots, sampling, elicitation) is in `capabilities`, and the SDK's
log records become one stderr line each (`logs`). Connections live in one background event
loop thread (`loop`) so sync callers reuse a warm session. Server side: `server` exposes
jarvis tools (with the hints and schemas of `served`, and memory as resources) to any MCP
client (`jarvis mcp serve`).

Nothing here imports `mcp` at module level: it costs ~0.8 s, paid only when a server is
actually contacted (a cached tool list needs no connection).
"""

from __future__ import annotations

__all__: list[str] = []
