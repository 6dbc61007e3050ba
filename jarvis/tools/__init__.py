"""The tool system and the built-in catalog.

Importing this package registers every built-in tool in ToolRegistry.
"""

from jarvis.tools.base import BaseTool, FunctionTool, ToolStats, normalize_result, tool
from jarvis.tools.catalog import build_tool, build_tools, load_builtins
from jarvis.tools.context import ToolContext
from jarvis.tools.descriptions import build_tool_descriptions
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.spec import ToolSpec

load_builtins()

__all__ = [
    "BaseTool",
    "FunctionTool",
    "ToolContext",
    "ToolExecutor",
    "ToolSpec",
    "ToolStats",
    "build_tool",
    "build_tool_descriptions",
    "build_tools",
    "normalize_result",
    "tool",
]
