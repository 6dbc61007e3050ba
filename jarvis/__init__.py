"""jarvis: a personal-assistant agent framework with a built-in tool catalog.

Cheap to import: the SDK (which needs openai) and other heavy parts load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from jarvis.errors import ConfigError, DependencyError, EngineError, JarvisError, UserError
from jarvis.tools.base import BaseTool, tool
from jarvis.tools.context import ToolContext
from jarvis.tools.descriptions import build_tool_descriptions
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.spec import ToolSpec

if TYPE_CHECKING:
    from jarvis.sdk import Jarvis

__version__ = "0.1.0"

_LAZY = {"Jarvis": "jarvis.sdk"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jarvis' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
