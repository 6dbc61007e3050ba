"""ToolContext: what a tool may ask the executor for, kept out of its JSON schema.

A tool declares a parameter annotated with `ToolContext` (in `@tool` functions or a typed
`call` method); the executor fills it in. It carries the run (or session) id, the call id and
the event bus.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jarvis.core.events import EventBus


@dataclass(slots=True)
class ToolContext:
    run_id: str | None = None
    call_id: str | None = None
    tool_name: str = ""
    bus: EventBus | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
