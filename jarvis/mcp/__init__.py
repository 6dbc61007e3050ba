"""The MCP client, with the official `mcp` SDK.

The servers declared in config.toml (`[mcp.servers.NAME]`) become ordinary registry tools
named `NAME__tool` (`tool`: McpTool; `adapter`: the `mcp_adapter` bridge tool and
`mcp_read_resource`; `manager`, `connection` and its failures (`errors`), `cache`, `results`,
`resources`); what jarvis answers when a server asks (roots, sampling, elicitation) is in
`capabilities`, and the SDK's log records become one stderr line each (`logs`). Connections
live in one background event loop thread (`loop`) so sync callers reuse a warm session.
Serving jarvis tools to MCP clients (`jarvis mcp serve`) is an entry point: it sits beside the
HTTP server, in jarvis.server.mcp_serve.

Nothing here imports `mcp` at module level: it costs ~0.8 s, paid only when a server is
actually contacted (a cached tool list needs no connection).
"""

from __future__ import annotations

__all__: list[str] = []
