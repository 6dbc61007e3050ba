"""Compatibility path from the reference docs (`openjarvis.tools._stubs`)."""

from jarvis.tools.base import BaseTool
from jarvis.tools.descriptions import build_tool_descriptions
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.spec import ToolSpec

__all__ = ["BaseTool", "ToolExecutor", "ToolSpec", "build_tool_descriptions"]
