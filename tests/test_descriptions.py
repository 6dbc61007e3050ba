"""build_tool_descriptions: the reference format, plus enums, defaults, arrays and costs."""

from __future__ import annotations

from typing import Literal

from jarvis.core.types import ToolCall
from jarvis.tools.base import tool
from jarvis.tools.calculator import CalculatorTool
from jarvis.tools.descriptions import build_tool_descriptions
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.spec import ToolSpec
from jarvis.tools.think import ThinkTool


def test_reference_format_for_calculator_and_think():
    desc = build_tool_descriptions([CalculatorTool(), ThinkTool()])
    calc_section, think_section = desc.split("\n\n")
    lines = calc_section.splitlines()
    assert lines[0] == "### calculator"
    assert lines[1] == "Evaluate a mathematical expression safely."
    assert lines[2] == "Category: math"
    assert lines[3] == "Parameters:"
    assert lines[4].startswith("- expression (string, required): Math expression to evaluate")
    assert think_section.startswith("### think\nReasoning scratchpad")
    assert "Category: reasoning" in think_section
    assert "- thought (string, required): The reasoning or thought process" in think_section


def test_category_line_can_be_left_out():
    desc = build_tool_descriptions([CalculatorTool()], include_category=False)
    assert "Category:" not in desc and desc.startswith("### calculator\n")


def test_enums_defaults_and_array_item_types_are_shown():
    @tool(register=False, category="demo", requires_confirmation=True)
    def search(query: str, mode: Literal["fast", "deep"] = "fast", tags: list[str] | None = None,
               limit: int = 5) -> str:
        """Search things.

        Args:
            query: What to look for.
            mode: How hard to look.
            tags: Only these tags.
            limit: At most this many.
        """
        return query

    desc = build_tool_descriptions([search])
    assert "- query (string, required): What to look for." in desc
    assert '- mode (string, optional, one of: "fast", "deep", default: "fast"): How hard to look.' in desc
    assert "- tags (array of string, optional): Only these tags." in desc
    assert "- limit (integer, optional, default: 5): At most this many." in desc
    assert "Requires user confirmation before it runs." in desc


def test_tool_without_parameters_and_plain_specs():
    spec = ToolSpec(name="now", description="Current time.", category="time")
    assert build_tool_descriptions([spec]) == "### now\nCurrent time.\nCategory: time\nParameters: none"


def test_cost_lines_use_estimates_then_measured_latency():
    spec_tool = ToolSpec(name="paid", description="Costs money.", cost_estimate=0.0025,
                         latency_estimate=1.5)
    desc = build_tool_descriptions([spec_tool], include_cost=True)
    assert "Cost: $0.0025 per call" in desc
    assert "Latency: ~1.5 s (estimate)" in desc

    unknown = ToolSpec(name="fresh", description="Never run.")
    assert "Latency: unknown" in build_tool_descriptions([unknown], include_cost=True)

    calc = CalculatorTool()
    before = build_tool_descriptions([calc], include_cost=True)
    assert "(estimate)" in before
    executor = ToolExecutor([calc])
    for _ in range(3):
        executor.execute(ToolCall("c", "calculator", {"expression": "2+2"}))
    after = build_tool_descriptions([calc], include_cost=True)
    assert "(median of 3 runs)" in after
    assert "Cost: $0.0000 per call" in after


def test_no_cost_lines_by_default():
    desc = build_tool_descriptions([CalculatorTool()])
    assert "Cost:" not in desc and "Latency:" not in desc
