"""OpenJarvis's `agents._stubs` path: the agent base class and its records, re-exported so
ported imports work unchanged (`from jarvis.agents._stubs import AgentContext, AgentResult`)."""

from jarvis.agents.base import BaseAgent
from jarvis.agents.context import AgentContext
from jarvis.core.types import AgentResult, Conversation

__all__ = ["AgentContext", "AgentResult", "BaseAgent", "Conversation"]
