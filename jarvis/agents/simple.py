"""The simple agent: one engine call, no tools."""

from __future__ import annotations

from typing import Any

from jarvis.agents.base import BaseAgent, _RunState
from jarvis.core.types import Message
from jarvis.errors import UserError


class SimpleAgent(BaseAgent):
    """Ask the model once and return its answer."""

    agent_id = "simple"
    uses_tools = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.executor.tools:
            names = ", ".join(t.spec.name for t in self.executor.tools)
            raise UserError(f"the simple agent does not use tools (got {names}); use the "
                            f"orchestrator agent (native tool calls) or react (prompted tools)")

    def _loop(self, messages: list[Message], state: _RunState) -> str:
        result = self._generate(messages, state, emit=self.on_token)
        messages.append(result.to_message())
        self._end_turn(state)
        return result.content
