"""The tool package's built-in tools and building tool instances by name.

`load_builtins` imports every module in BUILTIN_MODULES, which registers the tool package's
built-in tools in ToolRegistry (the scheduler's tools and the MCP bridge live in their own
packages, above this one; `jarvis.load_builtin_catalog` loads all of them, and a lookup by
name loads one module, see `jarvis.BUILTIN_TOOLS`). Those
modules must stay cheap to import: heavy dependencies (openai, mcp, sqlite-utils, httpx) are
imported inside the functions that use them.
"""

from __future__ import annotations

import importlib
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.services import declared_needs, service_kwargs
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


def build_tool(name: str, services: dict[str, Any] | None = None,
               settings: dict[str, Any] | None = None) -> BaseTool:
    """Instantiate the registered tool `name`.

    `services` (engine, model, memory, scheduler, bus, config: see jarvis.core.services) are
    handed to the parameters the tool class declares in its `needs`, and only to those;
    `settings` (from the tool's [tools.NAME] table) must all be settings the constructor
    takes, else ConfigError names the unknown key, with a did-you-mean.
    """
    value = ToolRegistry.get(name)
    if not isinstance(value, type):
        if settings:
            raise ConfigError(f"[tools.{name}] has settings, but tool {name!r} takes none")
        return value
    check_settings(name, value, settings or {})
    kwargs = service_kwargs(value, services or {})
    kwargs.update(settings or {})
    return value(**kwargs)


def setting_names(cls: type) -> list[str] | None:
    """The settings a tool class takes in its [tools.NAME] table: its constructor's named
    parameters, without those jarvis fills in (its `needs`). None: any name (**kwargs)."""
    import inspect

    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return []
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    internal = set(declared_needs(cls)) | set(getattr(cls, "internal_params", ()) or ())
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in internal]


def check_settings(name: str, cls: Any, settings: dict[str, Any]) -> None:
    """ConfigError for a [tools.NAME] key the tool does not take (with a did-you-mean)."""
    if not settings:
        return
    if not isinstance(cls, type):
        raise ConfigError(f"[tools.{name}] has settings, but tool {name!r} takes none")
    valid = setting_names(cls)
    if valid is None:
        return
    unknown = [key for key in settings if key not in valid]
    if not unknown:
        return
    from jarvis.errors import did_you_mean

    hints = [f"{key} ({close})" if (close := did_you_mean(key, valid)) else key
             for key in unknown]
    raise ConfigError(f"unknown setting(s) {', '.join(hints)} in [tools.{name}]; "
                      f"valid: {', '.join(sorted(valid)) or '(none)'}")


def build_tools(names: list[str] | None = None, services: dict[str, Any] | None = None,
                settings: dict[str, dict[str, Any]] | None = None) -> list[BaseTool]:
    """Instantiate tools by name (None: every registered tool). Unknown names raise
    UnknownNameError listing the valid ones."""
    settings = settings or {}
    if names is None:
        names = ToolRegistry.keys()
    for name in names:
        ToolRegistry.get(name)  # fail on the first unknown name before building anything
    return [build_tool(name, services, settings.get(name)) for name in names]
