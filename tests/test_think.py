"""think: echoes the thought back at zero cost."""

from __future__ import annotations

from jarvis.core.types import ErrorType, ToolCall
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.think import MAX_THOUGHT_CHARS, ThinkTool


def test_reference_example():
    think = ThinkTool()
    result = think.execute(thought="Let me break this problem into steps...")
    assert result.content == "Let me break this problem into steps..."
    assert result.success is True


def test_zero_cost_and_reasoning_category():
    spec = ThinkTool().spec
    assert spec.name == "think" and spec.category == "reasoning"
    assert spec.cost_estimate == 0.0
    assert ThinkTool().execute(thought="x").cost_usd == 0.0


def test_unicode_and_multiline_thoughts_are_echoed_exactly():
    thought = "Step 1: ∑ over i\n  Step 2: 🤔\n"
    result = ToolExecutor([ThinkTool()]).execute(ToolCall("c", "think", {"thought": thought}))
    assert result.success and result.content == thought


def test_oversized_or_missing_thought_is_rejected():
    executor = ToolExecutor([ThinkTool()])
    big = executor.execute(ToolCall("c", "think", {"thought": "x" * (MAX_THOUGHT_CHARS + 1)}))
    assert big.error_type is ErrorType.INVALID_ARGS
    missing = executor.execute(ToolCall("c", "think", {}))
    assert missing.error_type is ErrorType.INVALID_ARGS and "thought" in missing.content
    direct = ThinkTool().execute(thought="y" * (MAX_THOUGHT_CHARS + 1))
    assert not direct.success and str(MAX_THOUGHT_CHARS) in direct.content
    assert ThinkTool().execute(thought=None).error_type is ErrorType.INVALID_ARGS
