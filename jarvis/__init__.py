"""jarvis: a personal-assistant agent framework with a built-in tool catalog.

Every public name below is imported on first use (PEP 562), so `import jarvis` costs almost
nothing and `from jarvis import ToolExecutor` loads only the tool system. The SDK (which needs
openai) loads only when `jarvis.Jarvis` is touched.
"""

from __future__ import annotations

import importlib

from jarvis._lazy import lazy_getattr
from jarvis._version import __version__
from jarvis.core.registry import ToolRegistry as _ToolRegistry

TYPE_CHECKING = False
if TYPE_CHECKING:  # explicit imports for type checkers and IDEs
    from jarvis.core.events import Event, EventBus, EventType
    from jarvis.core.registry import AgentRegistry, EngineRegistry, ToolRegistry
    from jarvis.core.types import (
        AgentResult,
        ErrorType,
        ImageBlock,
        Message,
        TextBlock,
        ToolCall,
        ToolCallAction,
        ToolResult,
    )
    from jarvis.errors import (
        ConfigError,
        DependencyError,
        EngineError,
        JarvisError,
        RunCancelled,
        RunIncomplete,
        UserError,
    )
    from jarvis.sdk import Jarvis
    from jarvis.tools.base import BaseTool, tool
    from jarvis.tools.context import ToolContext
    from jarvis.tools.descriptions import build_tool_descriptions
    from jarvis.tools.executor import ToolExecutor
    from jarvis.tools.spec import ToolSpec


# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "AgentRegistry": "jarvis.core.registry",
    "AgentResult": "jarvis.core.types",
    "BaseTool": "jarvis.tools.base",
    "ConfigError": "jarvis.errors",
    "DependencyError": "jarvis.errors",
    "EngineError": "jarvis.errors",
    "EngineRegistry": "jarvis.core.registry",
    "ErrorType": "jarvis.core.types",
    "Event": "jarvis.core.events",
    "EventBus": "jarvis.core.events",
    "EventType": "jarvis.core.events",
    "ImageBlock": "jarvis.core.types",
    "Jarvis": "jarvis.sdk",
    "JarvisError": "jarvis.errors",
    "Message": "jarvis.core.types",
    "RunCancelled": "jarvis.errors",
    "RunIncomplete": "jarvis.errors",
    "TextBlock": "jarvis.core.types",
    "ToolCall": "jarvis.core.types",
    "ToolCallAction": "jarvis.core.types",
    "ToolContext": "jarvis.tools.context",
    "ToolExecutor": "jarvis.tools.executor",
    "ToolRegistry": "jarvis.core.registry",
    "ToolResult": "jarvis.core.types",
    "ToolSpec": "jarvis.tools.spec",
    "UserError": "jarvis.errors",
    "build_tool_descriptions": "jarvis.tools.descriptions",
    "tool": "jarvis.tools.base",
}


__getattr__ = lazy_getattr("jarvis", _EXPORTS, globals())

# The built-in tool catalog, each part loaded from the layer that owns it: the tool package's
# own tools, the scheduler's tools, the MCP bridge. The registry (core) knows none of them;
# it calls load_builtin_catalog the first time a lookup needs the built-ins.
BUILTIN_CATALOG: tuple[str, ...] = ("jarvis.tools", "jarvis.scheduler.tools", "jarvis.mcp.adapter")


def load_builtin_catalog() -> None:
    """Register every built-in tool in ToolRegistry (cheap after the first call)."""
    for module in BUILTIN_CATALOG:
        importlib.import_module(module)


_ToolRegistry.set_catalog_loader(load_builtin_catalog)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "AgentRegistry",
    "AgentResult",
    "BaseTool",
    "ConfigError",
    "DependencyError",
    "EngineError",
    "EngineRegistry",
    "ErrorType",
    "Event",
    "EventBus",
    "EventType",
    "ImageBlock",
    "Jarvis",
    "JarvisError",
    "Message",
    "RunCancelled",
    "RunIncomplete",
    "TextBlock",
    "ToolCall",
    "ToolCallAction",
    "ToolContext",
    "ToolExecutor",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "UserError",
    "build_tool_descriptions",
    "tool",
    "__version__",
]
