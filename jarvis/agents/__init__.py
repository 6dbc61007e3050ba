"""Agents: simple (one call), react (prompted tools), orchestrator (native tool calls).

Built-ins are registered in AgentRegistry under those names; workspace agents (agents/*.toml)
are declared on top of react or orchestrator (see jarvis.workspace.agents).
"""

from __future__ import annotations

from typing import Any

from jarvis.agents.base import BaseAgent
from jarvis.agents.loop_guard import LoopGuard
from jarvis.agents.orchestrator import OrchestratorAgent
from jarvis.agents.react import ReActAgent
from jarvis.agents.react_parser import ReactStep, parse_react
from jarvis.agents.simple import SimpleAgent
from jarvis.core.registry import AgentRegistry

BUILTIN_AGENTS: dict[str, type[BaseAgent]] = {
    "simple": SimpleAgent,
    "react": ReActAgent,
    "orchestrator": OrchestratorAgent,
}
# Other names of built-in agents: OpenJarvis calls the react agent `native_react`.
AGENT_ALIASES: dict[str, str] = {"native_react": "react"}


def ensure_registered() -> None:
    """(Re-)register the built-ins; cheap, and safe after a registry was cleared."""
    for name, cls in BUILTIN_AGENTS.items():
        if AgentRegistry._entries.get(name) is None:
            AgentRegistry.register_value(name, cls, origin="builtin")
    for alias, name in AGENT_ALIASES.items():
        if AgentRegistry._entries.get(alias) is None:
            AgentRegistry.register_value(alias, BUILTIN_AGENTS[name], origin="builtin")


def agent_class(name: str) -> Any | None:
    """The agent class registered under `name` (built-in or user-registered), or None."""
    found = AgentRegistry._entries.get(name)
    if found is None:  # a cleared registry gets its built-ins back (looked up per request)
        ensure_registered()
        found = AgentRegistry._entries.get(name)
    return found


def structured_agent(cls: Any, mode: str) -> Any:
    """The agent class that can give a structured answer in `mode` (jarvis.agents.structured):
    in "tool" mode one that calls tools; one that cannot is replaced by the orchestrator,
    which can call final_answer."""
    return OrchestratorAgent if mode == "tool" and not cls.uses_tools else cls


ensure_registered()

__all__ = ["AGENT_ALIASES", "BUILTIN_AGENTS", "BaseAgent", "LoopGuard", "OrchestratorAgent", "ReActAgent",
           "ReactStep", "SimpleAgent", "agent_class", "ensure_registered", "parse_react",
           "structured_agent"]
