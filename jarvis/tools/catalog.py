"""The built-in catalog and building tool instances by name.

Importing `jarvis.tools` imports every module in BUILTIN_MODULES, which registers the built-in
tools in ToolRegistry. Those modules must stay cheap to import: heavy dependencies (openai,
mcp, sqlite-utils, httpx) are imported inside the functions that use them.
"""

from __future__ import annotations

import importlib
from typing import Any

from jarvis.core.registry import ToolRegistry, accepted_kwargs
from jarvis.errors import ConfigError
from jarvis.tools.base import BaseTool

BUILTIN_MODULES: tuple[str, ...] = (
    "jarvis.tools.calculator",
    "jarvis.tools.llm_tool",
    "jarvis.tools.think",
    "jarvis.tools.file_read",
    "jarvis.tools.retrieval",
    "jarvis.tools.memory_tools",
    "jarvis.tools.mcp_adapter",
    "jarvis.scheduler.tools",
    "jarvis.tools.repl",
    "jarvis.tools.code_interpreter",
)


def load_builtins() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def build_tool(name: str, dependencies: dict[str, Any] | None = None,
               settings: dict[str, Any] | None = None) -> BaseTool:
    """Instantiate the registered tool `name`.

    `dependencies` (engine, model, backend, scheduler, bus, ...) are passed when the tool's
    constructor takes them; `settings` (from the tool's [tools.NAME] table) must all be
    accepted by the constructor, else ConfigError names the unknown key.
    """
    value = ToolRegistry.get(name)
    if not isinstance(value, type):
        if settings:
            raise ConfigError(f"[tools.{name}] has settings, but tool {name!r} takes none")
        return value
    kwargs = accepted_kwargs(value, dependencies or {})
    if settings:
        accepted = accepted_kwargs(value, settings)
        unknown = sorted(set(settings) - set(accepted))
        if unknown:
            valid = sorted(k for k in accepted_kwargs(value, {k: None for k in _init_params(value)}))
            raise ConfigError(f"unknown setting(s) {', '.join(unknown)} in [tools.{name}]; "
                              f"valid: {', '.join(valid) or '(none)'}")
        kwargs.update(accepted)
    return value(**kwargs)


def _init_params(cls: type) -> list[str]:
    import inspect

    try:
        return [p for p in inspect.signature(cls).parameters if p != "self"]
    except (TypeError, ValueError):
        return []


def build_tools(names: list[str] | None = None, dependencies: dict[str, Any] | None = None,
                settings: dict[str, dict[str, Any]] | None = None) -> list[BaseTool]:
    """Instantiate tools by name (None: every registered tool). Unknown names raise
    UnknownNameError listing the valid ones."""
    settings = settings or {}
    if names is None:
        names = ToolRegistry.keys()
    for name in names:
        ToolRegistry.get(name)  # fail on the first unknown name before building anything
    return [build_tool(name, dependencies, settings.get(name)) for name in names]


def load_extensions(config: Any) -> None:
    """Register the tools this config adds beyond the built-ins, into ToolRegistry:
    workspace `tools/*.py`, plugin entry points, and MCP servers' tools.

    Called by the SDK and the CLI before they build tools by name. Each source that fails is
    reported by its own loader and never stops the others.
    """
    # (filled in by the workspace/plugins and MCP modules)
    from jarvis.plugins import load_plugins
    from jarvis.workspace.tools import load_workspace_tools

    load_plugins()
    load_workspace_tools(config)
    from jarvis.mcp.manager import register_mcp_tools

    register_mcp_tools(config)
    from jarvis.workspace.tools import check_tool_settings

    check_tool_settings(config)
    return None
