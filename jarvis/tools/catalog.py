"""The tool package's built-in tools and building tool instances by name.

Importing `jarvis.tools` imports every module in BUILTIN_MODULES, which registers the tool
package's built-in tools in ToolRegistry (the scheduler's tools and the MCP bridge live in
their own packages, above this one; `jarvis.load_builtin_catalog` loads all of them). Those
modules must stay cheap to import: heavy dependencies (openai, mcp, sqlite-utils, httpx) are
imported inside the functions that use them.
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
    "jarvis.tools.repl",
    "jarvis.tools.code_interpreter",
    "jarvis.tools.http_request",
    "jarvis.tools.web_fetch",
    "jarvis.tools.web_search",
    "jarvis.tools.channel_tools",
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
