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
# own tools, the scheduler's tools, the MCP bridge. The registry (core) knows none of them:
# looking up a built-in by name imports its module alone (BUILTIN_TOOLS), and anything that
# needs them all (listing, a plugin, a workspace tool file or an MCP server registering beside
# them) loads the whole catalog first (load_builtin_catalog).
BUILTIN_CATALOG: tuple[str, ...] = ("jarvis.tools", "jarvis.scheduler.tools", "jarvis.mcp.adapter")
# built-in tool name -> the module whose import registers it (tests/test_registry.py checks
# it against what each module registers)
BUILTIN_TOOLS: dict[str, str] = {
    "calculator": "jarvis.tools.calculator",
    "channel_list": "jarvis.tools.channel_tools",
    "channel_send": "jarvis.tools.channel_tools",
    "channel_status": "jarvis.tools.channel_tools",
    "code_interpreter": "jarvis.tools.code_interpreter",
    "file_read": "jarvis.tools.file_read",
    "http_request": "jarvis.tools.http_request",
    "llm": "jarvis.tools.llm_tool",
    "memory_index": "jarvis.tools.memory_tools",
    "memory_retrieve": "jarvis.tools.memory_tools",
    "memory_search": "jarvis.tools.memory_tools",
    "memory_store": "jarvis.tools.memory_tools",
    "repl": "jarvis.tools.repl",
    "retrieval": "jarvis.tools.retrieval",
    "think": "jarvis.tools.think",
    "web_fetch": "jarvis.tools.web_fetch",
    "web_search": "jarvis.tools.web_search",
    "cancel_scheduled_task": "jarvis.scheduler.tools",
    "list_scheduled_tasks": "jarvis.scheduler.tools",
    "pause_scheduled_task": "jarvis.scheduler.tools",
    "resume_scheduled_task": "jarvis.scheduler.tools",
    "schedule_task": "jarvis.scheduler.tools",
    "mcp_adapter": "jarvis.mcp.adapter",
    "mcp_read_resource": "jarvis.mcp.adapter",
}


def load_builtin_catalog() -> None:
    """Register every built-in tool in ToolRegistry (cheap after the first call)."""
    from jarvis.tools.catalog import load_builtins

    load_builtins()
    for module in BUILTIN_CATALOG[1:]:
        importlib.import_module(module)


def _load_builtin_tool(name: str) -> None:
    """Register the built-in tool `name` alone (nothing when no built-in has that name)."""
    module = BUILTIN_TOOLS.get(name)
    if module is not None:
        importlib.import_module(module)


_ToolRegistry.set_catalog_loader(load_builtin_catalog, _load_builtin_tool)


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
