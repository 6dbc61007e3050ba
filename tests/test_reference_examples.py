"""The code examples of reference/openjarvis-tools.md, run as written (openjarvis -> jarvis).

Each EXAMPLE_* string is a faithful copy of a block from the reference (indentation restored;
only the package name changed). Examples that need an engine, a memory store or a scheduler
are covered by the tests of those parts.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
from pathlib import Path
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ToolResult
from jarvis.tools import _stubs
from jarvis.tools.calculator import CalculatorTool


def run_example(source: str, namespace: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Exec an example; return what it printed and its namespace."""
    namespace = {} if namespace is None else namespace
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<reference example>", "exec"), namespace)
    return out.getvalue(), namespace


EXAMPLE_BASE_TOOL = '''
from abc import ABC, abstractmethod
from jarvis.tools._stubs import ToolSpec
from jarvis.core.types import ToolResult
class BaseTool(ABC):
    tool_id: str
    @property
    @abstractmethod
    def spec(self) -> ToolSpec:
        """Return the tool specification."""
    @abstractmethod
    def execute(self, **params) -> ToolResult:
        """Execute the tool with the given parameters."""
    def to_openai_function(self) -> dict:
        """Convert to OpenAI function-calling format."""
'''


def test_base_tool_abc_example_imports_and_matches_our_base_tool():
    _, ns = run_example(EXAMPLE_BASE_TOOL)
    reference = ns["BaseTool"]
    ours = _stubs.BaseTool
    assert reference.__abstractmethods__ == ours.__abstractmethods__ == frozenset({"spec", "execute"})
    assert isinstance(inspect.getattr_static(ours, "spec"), property)
    assert callable(ours.to_openai_function)
    assert "tool_id" in ours.__dict__ or hasattr(ours, "tool_id")
    assert ns["ToolSpec"] is _stubs.ToolSpec and ns["ToolResult"] is ToolResult


REFERENCE_OPENAI_FUNCTION = json.loads('''
{
"type": "function",
"function": {
"name": "calculator",
"description": "Evaluate a mathematical expression safely.",
"parameters": {
"type": "object",
"properties": {
"expression": {
"type": "string",
"description": "Math expression to evaluate"
}
},
"required": ["expression"]
}
}
}
''')


def test_to_openai_function_has_the_reference_shape():
    ours = CalculatorTool().to_openai_function()
    ref = REFERENCE_OPENAI_FUNCTION
    assert ours["type"] == ref["type"]
    assert ours["function"]["name"] == ref["function"]["name"]
    assert ours["function"]["description"] == ref["function"]["description"]
    params, ref_params = ours["function"]["parameters"], ref["function"]["parameters"]
    assert params["type"] == ref_params["type"] and params["required"] == ref_params["required"]
    expression = params["properties"]["expression"]
    assert expression["type"] == "string"
    assert expression["description"].startswith(
        ref_params["properties"]["expression"]["description"])
    # (ours adds the operator list and a maxLength, so a model knows the limits)


def test_toolspec_and_toolresult_defaults_match_the_reference_tables():
    spec = _stubs.ToolSpec(name="x", description="y")
    assert (spec.parameters, spec.category, spec.cost_estimate, spec.latency_estimate,
            spec.requires_confirmation, spec.metadata) == ({}, "", 0.0, 0.0, False, {})
    result = ToolResult(tool_name="x", content="y")
    assert (result.success, result.usage, result.cost_usd, result.latency_seconds,
            result.metadata) == (True, {}, 0.0, 0.0, {})


EXAMPLE_EXECUTOR = '''
from jarvis.tools._stubs import ToolExecutor
executor = ToolExecutor(tools=[calculator, think_tool], bus=event_bus)
# Get OpenAI-format tool definitions
openai_tools = executor.get_openai_tools()
# Execute a tool call
from jarvis.core.types import ToolCall
tc = ToolCall(id="call_1", name="calculator", arguments='{"expression": "2+2"}')
result = executor.execute(tc)
print(result.content) # "4"
'''


def test_tool_executor_example():
    from jarvis.core.events import EventBus, EventType
    from jarvis.tools.think import ThinkTool

    event_bus = EventBus()
    seen: list[Any] = []
    event_bus.subscribe(None, seen.append)
    printed, ns = run_example(EXAMPLE_EXECUTOR, {
        "calculator": CalculatorTool(), "think_tool": ThinkTool(), "event_bus": event_bus})
    assert printed == "4\n"
    assert [t["function"]["name"] for t in ns["openai_tools"]] == ["calculator", "think"]
    # The documented execution flow: start event with name and arguments, end event with
    # success and latency, latency recorded on the result.
    assert [e.type for e in seen] == [EventType.TOOL_CALL_START, EventType.TOOL_CALL_END]
    assert seen[0].data["tool_name"] == "calculator"
    assert seen[0].data["arguments"] == {"expression": "2+2"}
    assert seen[1].data["success"] is True and seen[1].data["latency"] > 0
    assert ns["result"].latency_seconds == seen[1].data["latency"]
    # Methods table
    executor = ns["executor"]
    assert [s.name for s in executor.available_tools()] == ["calculator", "think"]
    # "If the tool name is unknown, a ToolResult with success=False is returned. If JSON
    # parsing fails or the tool raises an exception, the error is ... a failed ToolResult."
    from jarvis.core.types import ToolCall

    assert executor.execute(ToolCall(id="c", name="nope", arguments="{}")).success is False
    assert executor.execute(ToolCall(id="c", name="calculator", arguments="{bad")).success is False


EXAMPLE_DESCRIPTIONS = '''
from jarvis.tools._stubs import build_tool_descriptions
from jarvis.tools.calculator import CalculatorTool
from jarvis.tools.think import ThinkTool
tools = [CalculatorTool(), ThinkTool()]
desc = build_tool_descriptions(tools)
print(desc)
'''

REFERENCE_DESCRIPTIONS_OUTPUT = """\
### calculator
Evaluate a mathematical expression safely.
Category: math
Parameters:
- expression (string, required): Math expression to evaluate

### think
Reasoning scratchpad ..."""


def test_build_tool_descriptions_example():
    printed, _ = run_example(EXAMPLE_DESCRIPTIONS)
    expected = REFERENCE_DESCRIPTIONS_OUTPUT.splitlines()
    got = printed.splitlines()
    for want, have in zip(expected[:4], got[:4], strict=True):
        assert have == want
    assert got[4].startswith(expected[4])
    assert got[5] == "" and got[6] == "### think"
    assert got[7].startswith("Reasoning scratchpad")


EXAMPLE_CALCULATOR = '''
from jarvis.tools.calculator import CalculatorTool
calc = CalculatorTool()
result = calc.execute(expression="sqrt(144) + 3**2")
print(result.content) # "21.0"
print(result.success) # True
'''


def test_calculator_example():
    printed, _ = run_example(EXAMPLE_CALCULATOR)
    assert printed == "21.0\nTrue\n"


EXAMPLE_THINK = '''
from jarvis.tools.think import ThinkTool
think = ThinkTool()
result = think.execute(thought="Let me break this problem into steps...")
print(result.content) # "Let me break this problem into steps..."
print(result.success) # True
'''


def test_think_example():
    printed, _ = run_example(EXAMPLE_THINK)
    assert printed == "Let me break this problem into steps...\nTrue\n"


EXAMPLE_FILE_READ = '''
from jarvis.tools.file_read import FileReadTool
reader = FileReadTool(allowed_dirs=["/home/user/projects"])
result = reader.execute(path="/home/user/projects/README.md", max_lines=50)
print(result.content)
print(result.metadata) # {"path": "/home/user/projects/README.md", "size_bytes": 1234}
'''


def test_file_read_example(tmp_path: Path):
    projects = tmp_path / "home" / "user" / "projects"
    projects.mkdir(parents=True)
    text = "".join(f"line {i}\n" for i in range(80))
    (projects / "README.md").write_text(text, encoding="utf-8")
    # The only change: the example's folder lives under tmp_path.
    source = EXAMPLE_FILE_READ.replace("/home/user/projects", str(projects))
    printed, ns = run_example(source)
    result = ns["result"]
    assert result.success
    assert printed.startswith("line 0\n") and "line 49\n" in printed and "line 50\n" not in printed
    assert result.metadata["path"] == str((projects / "README.md").resolve())
    assert result.metadata["size_bytes"] == len(text.encode())


EXAMPLE_REGISTRATION = '''
from jarvis.core.registry import ToolRegistry
from jarvis.tools._stubs import BaseTool, ToolSpec
from jarvis.core.types import ToolResult
@ToolRegistry.register("my_tool")
class MyTool(BaseTool):
    tool_id = "my_tool"
    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="my_tool",
            description="A custom tool that does something useful.",
            parameters={
                "type": "object",
                "properties": {
                    "input": {
                        "type": "string",
                        "description": "The input to process.",
                    },
                },
                "required": ["input"],
            },
            category="custom",
        )
    def execute(self, **params) -> ToolResult:
        value = params.get("input", "")
        return ToolResult(
            tool_name="my_tool",
            content=f"Processed: {value}",
            success=True,
        )
'''


def test_tool_registration_example():
    _, ns = run_example(EXAMPLE_REGISTRATION, {"__name__": "user_tools"})
    assert ToolRegistry.get("my_tool") is ns["MyTool"]
    from jarvis.core.types import ToolCall
    from jarvis.tools.catalog import build_tools
    from jarvis.tools.executor import ToolExecutor

    (made,) = build_tools(["my_tool"])
    result = ToolExecutor([made]).execute(ToolCall(id="c", name="my_tool",
                                                   arguments='{"input": "abc"}'))
    assert result.success and result.content == "Processed: abc"
    missing = ToolExecutor([made]).execute(ToolCall(id="c", name="my_tool", arguments="{}"))
    assert missing.success is False and "input" in missing.content
