"""Loading the tools a config adds beyond the built-ins: workspace `tools/*.py`, plugin entry
points and MCP servers' tools.

It sits above the tool package (it wires the workspace, plugin and MCP loaders together), so
the tool package never imports what is built on top of it.
"""

from __future__ import annotations

from typing import Any


def load_extensions(config: Any) -> None:
    """Register the tools this config adds beyond the built-ins, into ToolRegistry:
    workspace `tools/*.py`, plugin entry points, and MCP servers' tools.

    Called by the SDK and the CLI before they build tools by name. Each source that fails is
    reported by its own loader and never stops the others.
    """
    import sys

    from jarvis.plugins import load_plugins
    from jarvis.workspace.tools import check_tool_settings, load_workspace_tools

    load_plugins()
    load_workspace_tools(config)
    # With no server configured, and the manager never imported (so it has registered
    # nothing to undo), the MCP client (asyncio, ssl, the SDK's types) is not imported at all.
    if config.mcp.servers or "jarvis.mcp.manager" in sys.modules:
        from jarvis.mcp.manager import register_mcp_tools

        register_mcp_tools(config)
    check_tool_settings(config)
