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
    from jarvis.workspace import workspace_path

    load_plugins()
    # With no tools folder, and the loader never imported (so it has registered nothing to
    # undo), there is nothing to load: its module is not imported either.
    if ("jarvis.workspace.tools" in sys.modules
            or workspace_path(config, config.workspace.tools_dir).is_dir()):
        from jarvis.workspace.tools import load_workspace_tools

        load_workspace_tools(config)
    check_tool_tables(config)
    # With no server configured, and the manager never imported (so it has registered
    # nothing to undo), the MCP client (asyncio, ssl, the SDK's types) is not imported at all.
    if config.mcp.servers or "jarvis.mcp.manager" in sys.modules:
        from jarvis.mcp.manager import register_mcp_tools

        register_mcp_tools(config)


def check_tool_tables(config: Any) -> None:
    """Validate every `[tools.NAME]` table of `config` against its tool's settings, when the
    config is loaded (the CLI, the SDK): a table naming no tool, an unknown setting (with a
    did-you-mean) or a value of the wrong type is a ConfigError naming the file. Built-ins
    are checked at once; workspace and plugin tools are loaded only when a table names a
    tool that is not built in."""
    tables = config.tools.settings
    if not tables:
        return
    from jarvis.core.registry import ToolRegistry
    from jarvis.workspace.tools import check_tool_settings

    ToolRegistry._ensure_loaded()  # the built-in catalog (its loader is installed by jarvis)
    registered = ToolRegistry.snapshot()[0]  # no on-demand loading: starts no MCP server
    if any(name not in registered for name in tables):
        from jarvis.plugins import load_plugins
        from jarvis.workspace.tools import load_workspace_tools

        load_plugins()
        load_workspace_tools(config)
    check_tool_settings(config)
