"""Environments, OpenEnv style (RFC 004 tool-call actions, and the MCP form upstream moved to).

- `Environment` (reset / step / state / actions), `@action` for its methods; every step runs
  through a ToolExecutor (`jarvis.env.base`);
- `Observation`, `State`, `ToolDefinition` / `ToolParameter`, `ToolCallAction`, and the MCP
  form `ListToolsAction` / `CallToolAction` (`jarvis.env.types`);
- `ToolEnvironment(tools=...)`: jarvis tools, one episode = one run (`jarvis.env.tools`);
- `EnvClient(url)`: an environment served by `jarvis serve` (`jarvis.env.client`);
- `PyExecutor`: sandboxed Python for code-act environments (`jarvis.env.python`).

See docs/environments.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jarvis._lazy import lazy_getattr
from jarvis.core.types import ToolCallAction
from jarvis.env.types import (
    RESERVED_TOOL_NAMES,
    Action,
    CallToolAction,
    CallToolObservation,
    EnvError,
    ListToolsAction,
    ListToolsObservation,
    Observation,
    State,
    ToolDefinition,
    ToolError,
    ToolParameter,
)

if TYPE_CHECKING:
    from jarvis.env.base import Environment, action
    from jarvis.env.client import EnvClient
    from jarvis.env.python import CodeExecResult, PyExecutor
    from jarvis.env.tools import ToolEnvironment

_LAZY = {
    "Environment": "jarvis.env.base",
    "action": "jarvis.env.base",
    "EnvClient": "jarvis.env.client",
    "PyExecutor": "jarvis.env.python",
    "CodeExecResult": "jarvis.env.python",
    "ToolEnvironment": "jarvis.env.tools",
}

__getattr__ = lazy_getattr("jarvis.env", _LAZY, globals())

__all__ = ["Action", "CallToolAction", "CallToolObservation", "CodeExecResult", "EnvClient", "EnvError",
           "Environment", "ListToolsAction", "ListToolsObservation", "Observation", "PyExecutor",
           "RESERVED_TOOL_NAMES", "State", "ToolCallAction", "ToolDefinition", "ToolEnvironment",
           "ToolError", "ToolParameter", "action"]
