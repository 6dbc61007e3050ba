"""The tool system and the built-in catalog.

The built-in tools are registered in ToolRegistry by the registry itself: a lookup by name
imports that tool's module alone, a listing imports them all (`load_builtins`, through
`jarvis.load_builtin_catalog`). Importing this package registers none.
"""

from jarvis.tools.base import BaseTool, FunctionTool, ToolStats, normalize_result, tool
from jarvis.tools.catalog import build_tool, build_tools, load_builtins
from jarvis.tools.context import ToolContext
from jarvis.tools.descriptions import build_tool_descriptions
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.spec import ToolSpec

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
    "load_builtins",
    "normalize_result",
    "tool",
]
