"""AgentContext: what a caller hands an agent run besides the query (OpenJarvis's record).

`agent.run(query, context=AgentContext(...))`:
- `conversation`: earlier messages; its system messages join the agent's system prompt
  (one leading system message, as chat templates want), the others come before the query;
- `memory_results`: passages found beforehand (RetrievalResults, dicts with `content`, or
  text), shown to the model in the system prompt, bounded;
- `tools`: tool names the caller expects the agent to have; a name the agent lacks is a
  UserError (the agent's tools are what it was built with);
- `metadata`: kept in the result's metadata under `context`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jarvis.core.types import Conversation, Message
from jarvis.errors import UserError

MAX_MEMORY_RESULTS = 50
MAX_MEMORY_CHARS = 4_000  # per result
MEMORY_HEADER = "Relevant passages found for this question (cite them by number):"


@dataclass(slots=True)
class AgentContext:
    """The runtime context of one agent run (see the module docstring)."""

    conversation: Conversation = field(default_factory=Conversation)
    tools: list[str] = field(default_factory=list)
    memory_results: list[Any] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


def _passage(item: Any) -> str:
    if isinstance(item, str):
        text, source = item, ""
    elif isinstance(item, dict):
        text, source = str(item.get("content", "")), str(item.get("source") or "")
    else:
        text = str(getattr(item, "content", item))
        source = str(getattr(item, "citation", "") or getattr(item, "source", "") or "")
    if len(text) > MAX_MEMORY_CHARS:
        text = text[:MAX_MEMORY_CHARS] + " [...]"
    return f"{source}\n{text}" if source else text


def memory_text(results: Sequence[Any]) -> str:
    """The memory results as system-prompt text ("" without any)."""
    if not results:
        return ""
    shown = [f"[{i}] {_passage(r)}" for i, r in enumerate(results[:MAX_MEMORY_RESULTS], 1)]
    return MEMORY_HEADER + "\n\n" + "\n\n".join(shown)


def apply_context(context: Any, system: str, history: Sequence[Message] | None,
                  tool_names: Sequence[str]) -> tuple[str, list[Message]]:
    """The run's system prompt and earlier messages, with `context` folded in."""
    earlier = list(history or ())
    if context is None:
        return system, earlier
    if not isinstance(context, AgentContext):
        raise UserError(f"context must be an AgentContext, not {type(context).__name__}")
    missing = [n for n in context.tools if n not in tool_names]
    if missing:
        raise UserError(f"the context names tool(s) {', '.join(map(str, missing))} that this agent "
                        f"does not have; its tools: {', '.join(tool_names) or '(none)'}")
    parts = [system] if system else []
    before: list[Message] = []
    for message in context.conversation.messages:
        if message.role == "system":
            if message.text:
                parts.append(message.text)
        else:
            before.append(message)
    memory = memory_text(context.memory_results)
    if memory:
        parts.append(memory)
    return "\n\n".join(parts), before + earlier
