"""think: a zero-cost reasoning scratchpad; the thought is echoed back."""

from __future__ import annotations

from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

MAX_THOUGHT_CHARS = 20_000


@ToolRegistry.register("think")
class ThinkTool(BaseTool):
    """Reasoning scratchpad: echoes the thought back."""

    tool_id = "think"
    inline = True

    _SPEC = ToolSpec(
        name="think",
        description="Reasoning scratchpad: write out your thinking step by step; it is echoed "
                    "back unchanged and costs nothing.",
        parameters={
            "type": "object",
            "properties": {
                "thought": {"type": "string", "description": "The reasoning or thought process",
                            "maxLength": MAX_THOUGHT_CHARS},
            },
            "required": ["thought"],
        },
        category="reasoning",
        cost_estimate=0.0,
        latency_estimate=0.0,
        output_labels=frozenset(),  # the model's own words back
        egress="none",
    )

    @property
    def spec(self) -> ToolSpec:
        return self._SPEC

    def execute(self, **params: Any) -> ToolResult:
        thought = params.get("thought")
        if not isinstance(thought, str):
            return ToolResult.failure("think", "thought must be a string", ErrorType.INVALID_ARGS)
        if len(thought) > MAX_THOUGHT_CHARS:
            return ToolResult.failure("think", f"thought is {len(thought)} characters; the limit "
                                      f"is {MAX_THOUGHT_CHARS}", ErrorType.INVALID_ARGS)
        return ToolResult(tool_name="think", content=thought, cost_usd=0.0)
