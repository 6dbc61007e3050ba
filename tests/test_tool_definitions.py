"""Defining tools: the three ways, schema derivation, normalization, spec exports, validation."""

from __future__ import annotations

import asyncio
import base64
import itertools
from typing import Any, Literal

import mcp.types
import pytest
from jsonschema import Draft202012Validator
from ors import ToolSpec as OrsToolSpec

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ImageBlock, TextBlock, ToolCall, ToolResult
from jarvis.errors import DuplicateNameError, ToolArgumentError, ToolDefinitionError
from jarvis.tools.base import BaseTool, FunctionTool, normalize_result, tool
from jarvis.tools.context import ToolContext
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.signature import parse_docstring
from jarvis.tools.spec import ToolSpec
from jarvis.tools.validation import SchemaValidator, compile_fast_check

PNG = base64.b64encode(b"\x89PNG fake").decode()


# --- 1. subclass BaseTool with spec + execute -------------------------------------------------
class Echo(BaseTool):
    tool_id = "echo"

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="echo", description="Echo the text.", parameters={
            "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})

    def execute(self, **params: Any) -> ToolResult:
        return ToolResult(tool_name="echo", content=params["text"])


def test_reference_style_subclass_runs_and_exports():
    echo = Echo()
    assert echo.execute(text="hi").content == "hi"
    assert echo.to_openai_function()["function"]["name"] == "echo"
    assert ToolExecutor([echo]).execute(ToolCall("c", "echo", '{"text": "yo"}')).content == "yo"


def test_base_tool_is_abstract():
    class Incomplete(BaseTool):
        @property
        def spec(self) -> ToolSpec:
            return ToolSpec(name="x", description="x")

    with pytest.raises(TypeError):
        Incomplete()


# --- 2. @tool on functions --------------------------------------------------------------------
def test_tool_decorator_derives_schema_and_descriptions_from_hints_and_docstring():
    @tool(category="text")
    def greet(name: str, times: int = 1, style: Literal["plain", "loud"] = "plain") -> str:
        """Greet someone by name.

        Args:
            name: Who to greet.
            times: How many greetings,
                one per line.
            style: How to say it.
        """
        text = "\n".join([f"hello {name}"] * times)
        return text.upper() if style == "loud" else text

    assert isinstance(greet, FunctionTool)
    spec = greet.spec
    assert spec.name == "greet" and spec.description == "Greet someone by name."
    assert spec.category == "text"
    props = spec.parameters["properties"]
    assert props["name"] == {"type": "string", "description": "Who to greet."}
    assert props["times"]["type"] == "integer" and props["times"]["default"] == 1
    assert props["times"]["description"] == "How many greetings, one per line."
    assert props["style"]["enum"] == ["plain", "loud"]
    assert spec.parameters["required"] == ["name"]
    assert "title" not in props["name"]
    assert ToolRegistry.get("greet") is greet
    # still callable as the plain function
    assert greet("bob") == "hello bob"
    result = ToolExecutor([greet]).execute(ToolCall("c", "greet", {"name": "al", "times": 2,
                                                                    "style": "loud"}))
    assert result.success and result.content == "HELLO AL\nHELLO AL"


def test_tool_decorator_options_reach_the_spec():
    @tool(name="renamed", description="Custom text.", cost_estimate=0.01, latency_estimate=2.0,
          requires_confirmation=True, timeout=3.5, max_output_chars=50, register=False,
          metadata={"owner": "me"})
    def original(x: int) -> int:
        """Ignored docstring."""
        return x

    spec = original.spec
    assert (spec.name, spec.description, spec.cost_estimate, spec.latency_estimate) == (
        "renamed", "Custom text.", 0.01, 2.0)
    assert spec.requires_confirmation and spec.timeout_seconds == 3.5
    assert spec.max_output_chars == 50 and spec.metadata == {"owner": "me"}
    assert not ToolRegistry.contains("renamed")  # register=False


def test_async_function_tool_runs_sync_and_async():
    @tool(register=False)
    async def later(value: int) -> str:
        """Return the value after yielding to the loop.

        Args:
            value: Any integer.
        """
        await asyncio.sleep(0)
        return f"v={value}"

    assert later.is_async
    executor = ToolExecutor([later])
    assert executor.execute(ToolCall("c", "later", {"value": 3})).content == "v=3"
    result = asyncio.run(executor.aexecute(ToolCall("c", "later", {"value": 4})))
    assert result.success and result.content == "v=4"
    assert later.execute(value=5).content == "v=5"  # direct execute outside an executor


def test_missing_type_hint_is_an_error_at_definition():
    with pytest.raises(ToolDefinitionError, match="'b' has no type hint"):
        @tool(register=False)
        def add(a: int, b) -> int:  # noqa: ANN001 - the point of the test
            """Add."""
            return a + b


@pytest.mark.parametrize("source", [
    "def f(*args: int) -> int:\n    'Sum.'\n    return 0",
    "def f(**kw: int) -> int:\n    'Sum.'\n    return 0",
    "def f(a: int, /) -> int:\n    'Sum.'\n    return 0",
    "def f(a: int) -> int:\n    return 0",  # no description anywhere
    "def f(a: 'Undefined') -> int:\n    'Bad hint.'\n    return 0",
])
def test_undescribable_functions_are_rejected(source):
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(ToolDefinitionError):
        tool(namespace["f"], register=False)


@pytest.mark.parametrize("bad", ["has space", "x" * 65, "dots.are.bad", "ünï", "newline\n"])
def test_tool_names_must_be_valid_openai_function_names(bad):
    def f(a: int) -> int:
        """Doc."""
        return a

    with pytest.raises(ToolDefinitionError, match="invalid tool name"):
        tool(f, name=bad, register=False)


def test_duplicate_tool_name_is_an_error():
    def make() -> None:
        @tool(name="dup_tool")
        def first(a: int) -> int:
            """First."""
            return a

    make()
    with pytest.raises(DuplicateNameError, match="dup_tool"):
        @tool(name="dup_tool")
        def second(a: int) -> int:
            """Second."""
            return a


def test_tool_context_is_injected_and_kept_out_of_the_schema():
    seen: list[ToolContext] = []

    @tool(register=False)
    def where(note: str, ctx: ToolContext) -> str:
        """Report the call id.

        Args:
            note: Any text.
        """
        seen.append(ctx)
        return f"{note}:{ctx.call_id}:{ctx.run_id}"

    assert list(where.spec.parameters["properties"]) == ["note"]
    result = ToolExecutor([where], run_id="run-7").execute(ToolCall("call-3", "where", {"note": "n"}))
    assert result.content == "n:call-3:run-7"
    assert seen[0].tool_name == "where"


def test_pydantic_validation_names_the_field_and_rejects_extras():
    @tool(register=False)
    def scale(factor: float, label: str = "") -> str:
        """Scale."""
        return str(factor)

    with pytest.raises(ToolArgumentError) as info:
        scale.validate_arguments({"factor": [1]})
    assert info.value.field == "factor"
    with pytest.raises(ToolArgumentError, match="unexpected argument"):
        scale.validate_arguments({"factor": 1, "bogus": 2})
    failed = scale.execute(factor="not a number")
    assert not failed.success and failed.error_type is ErrorType.INVALID_ARGS


# --- 3. BaseTool subclass with a typed call() -------------------------------------------------
class WordCountTool(BaseTool):
    """Count the words in a text."""

    category = "text"
    cost_estimate = 0.0

    def call(self, text: str, unique: bool = False) -> dict:
        """Count words.

        Args:
            text: The text to count.
            unique: Count distinct words only.
        """
        words = text.split()
        return {"observation": str(len(set(words) if unique else words)), "words": len(words)}


def test_call_method_tool_derives_spec_and_runs():
    counter = WordCountTool()
    spec = counter.spec
    assert spec.name == "word_count" and spec.description == "Count the words in a text."
    assert spec.category == "text"
    assert spec.parameters["properties"]["text"]["description"] == "The text to count."
    assert spec.parameters["required"] == ["text"]
    result = ToolExecutor([counter]).execute(ToolCall("c", "word_count", {"text": "a b a",
                                                                           "unique": True}))
    assert result.success and result.content == "2" and result.metadata == {"words": 3}
    bad = ToolExecutor([counter]).execute(ToolCall("c", "word_count", {"unique": True}))
    assert not bad.success and bad.metadata["field"] == "text"


def test_call_method_tool_registers_like_any_class():
    @ToolRegistry.register("shout")
    class ShoutTool(BaseTool):
        name = "shout"

        async def call(self, text: str) -> str:
            """Shout the text.

            Args:
                text: What to shout.
            """
            return text.upper()

    made = ToolRegistry.create("shout")
    assert made.is_async and made.spec.name == "shout"
    assert ToolExecutor([made]).execute(ToolCall("c", "shout", {"text": "hey"})).content == "HEY"


def test_call_method_subclass_with_its_own_call_gets_its_own_name():
    class BaseCounterTool(BaseTool):
        """Base counter."""

        def call(self, n: int) -> str:
            return str(n)

    class DoubleCounterTool(BaseCounterTool):
        """Doubles."""

        def call(self, n: int) -> str:
            return str(2 * n)

    assert BaseCounterTool().spec.name == "base_counter"
    assert DoubleCounterTool().spec.name == "double_counter"


# --- normalization ----------------------------------------------------------------------------
def test_normalize_str_dict_and_tool_result():
    assert normalize_result("t", "text").content == "text"
    same = ToolResult(tool_name="", content="x")
    assert normalize_result("t", same) is same and same.tool_name == "t"
    assert normalize_result("t", None).content == ""
    assert normalize_result("t", 42).content == "42"
    plain = normalize_result("t", {"a": 1, "b": [1, 2]})
    assert plain.content == '{"a": 1, "b": [1, 2]}' and plain.metadata == {}


def test_normalize_observation_dict_with_image_and_extras():
    result = normalize_result("t", {"observation": "a chart", "image": PNG, "reward": 0.5,
                                    "finished": True, "rows": 3})
    assert result.content == "a chart"
    assert result.blocks == [TextBlock("a chart"), ImageBlock(data=PNG, mimeType="image/png")]
    assert result.reward == 0.5 and result.finished is True
    assert result.metadata == {"rows": 3}
    out = result.to_tool_output()
    assert [b["type"] for b in out["blocks"]] == ["text", "image"]


def test_normalize_image_dict_with_mime_type_and_failed_observation():
    result = normalize_result("t", {"observation": "no", "image": {"data": PNG,
                                                                    "mimeType": "image/jpeg"},
                                    "success": False})
    assert result.success is False
    assert result.blocks[1] == ImageBlock(data=PNG, mimeType="image/jpeg")


def test_function_tool_returns_are_normalized_through_the_executor():
    @tool(register=False)
    def picture(caption: str) -> dict:
        """Draw.

        Args:
            caption: Caption text.
        """
        return {"observation": caption, "image": PNG, "size": 9}

    result = ToolExecutor([picture]).execute(ToolCall("c", "picture", {"caption": "cat"}))
    assert result.success and result.content == "cat" and result.metadata == {"size": 9}
    assert isinstance(result.blocks[1], ImageBlock)


# --- docstrings -------------------------------------------------------------------------------
def test_parse_google_docstring():
    text, args = parse_docstring("""Summary line.

    More detail.

    Args:
        path (str): The file.
        max_lines: How many
            lines at most.
        *rest: ignored varargs doc

    Returns:
        The text.
    """)
    assert text == "Summary line.\n\nMore detail."
    assert args == {"path": "The file.", "max_lines": "How many lines at most.",
                    "rest": "ignored varargs doc"}


# --- spec exports -----------------------------------------------------------------------------
def test_spec_exports_openai_anthropic_and_mcp_forms():
    spec = ToolSpec(name="calc", description="Math.", parameters={
        "type": "object", "properties": {"e": {"type": "string"}}, "required": ["e"]},
        requires_confirmation=True)
    schema = {"type": "object", "properties": {"e": {"type": "string"}}, "required": ["e"]}
    assert spec.to_openai_function() == {"type": "function", "function": {
        "name": "calc", "description": "Math.", "parameters": schema}}
    anthropic = spec.to_anthropic_tool()
    assert anthropic == {"name": "calc", "description": "Math.", "input_schema": schema}
    OrsToolSpec.model_validate(anthropic)
    mcp_tool = spec.to_mcp_tool()
    assert mcp_tool["inputSchema"] == schema
    assert mcp_tool["annotations"] == {"destructiveHint": True}
    parsed = mcp.types.Tool.model_validate(mcp_tool)
    assert parsed.name == "calc" and parsed.input_schema == schema


def test_spec_without_parameters_exports_an_empty_object_schema():
    spec = ToolSpec(name="now", description="Time.")
    assert spec.input_schema() == {"type": "object", "properties": {}}
    spec.input_schema()["properties"]["x"] = 1  # a copy: the spec is not changed
    assert spec.to_mcp_tool()["inputSchema"] == {"type": "object", "properties": {}}
    assert "annotations" not in spec.to_mcp_tool()
    assert spec.to_dict()["timeout_seconds"] is None


def test_invalid_json_schema_is_a_definition_error_when_added():
    class Broken(Echo):
        @property
        def spec(self) -> ToolSpec:
            return ToolSpec(name="broken", description="x",
                            parameters={"type": "object", "properties": {"a": {"type": "nope"}}})

    with pytest.raises(ToolDefinitionError, match="invalid JSON schema"):
        ToolExecutor([Broken()])


# --- the jsonschema shortcut never accepts what jsonschema rejects --------------------------
SCHEMAS = [
    {"type": "object", "properties": {"s": {"type": "string", "maxLength": 3, "minLength": 1}},
     "required": ["s"]},
    {"type": "object", "properties": {"s": {"type": "string", "enum": ["a", "b"]}},
     "additionalProperties": False},
    {"type": "object", "properties": {"i": {"type": "integer", "minimum": 1, "maximum": 5},
                                      "n": {"type": "number", "exclusiveMinimum": 0,
                                            "exclusiveMaximum": 1.5}}},
    {"type": "object", "properties": {"b": {"type": "boolean"}, "z": {"type": "null"},
                                      "o": {"type": "object"}, "a": {"type": "array"}},
     "required": ["b"], "additionalProperties": False},
    {"type": "object", "properties": {"s": {"type": "string", "maxLength": 0}}},
]
VALUES = [None, True, False, 0, 1, 3, 5, 6, -1, 1.0, 1.5, 0.5, float("nan"), float("inf"),
          10**30, "", "a", "b", "abc", "abcd", "é" * 3, [], [1], {}, {"k": 1}]


def test_fast_check_only_accepts_what_jsonschema_accepts():
    accepted = 0
    for schema in SCHEMAS:
        fast = compile_fast_check(schema)
        assert fast is not None, schema
        full = Draft202012Validator(schema)
        keys = list(schema["properties"]) + ["extra"]
        for key, value in itertools.product(keys, VALUES):
            for args in ({key: value}, {}, {**{k: v for k, v in zip(keys, VALUES, strict=False)},
                                             key: value}):
                if fast(args):
                    accepted += 1
                    assert full.is_valid(args), (schema, args)
    assert accepted > 50  # the shortcut is really used


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}},
    {"type": "object", "properties": {"s": {"type": ["string", "null"]}}},
    {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}},
    {"type": "object", "properties": {"s": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
    {"type": "object", "properties": {"i": {"type": "integer", "enum": [1, 2]}}},
    {"type": "object", "additionalProperties": {"type": "string"}},
])
def test_schemas_beyond_the_shortcut_use_jsonschema(schema):
    assert compile_fast_check(schema) is None
    validator = SchemaValidator(ToolSpec(name="t", description="t", parameters=schema))
    assert validator.fast is None


def test_builtin_schemas_take_the_shortcut():
    from jarvis.tools.calculator import CalculatorTool
    from jarvis.tools.file_read import FileReadTool
    from jarvis.tools.think import ThinkTool

    for t in (CalculatorTool(), ThinkTool(), FileReadTool()):
        assert compile_fast_check(t.spec.input_schema()) is not None, t.spec.name


def test_validator_error_names_the_field():
    validator = SchemaValidator(ToolSpec(name="t", description="t", parameters=SCHEMAS[2]))
    with pytest.raises(ToolArgumentError) as info:
        validator.validate({"i": 9})
    assert info.value.field == "i" and "'i'" in str(info.value)
    assert validator.validate({"i": 1.0}) == {"i": 1.0}  # jsonschema's integer accepts 1.0


def test_optional_tool_context_is_also_injected():
    @tool(register=False)
    def where_a(note: str, ctx: ToolContext | None = None) -> str:
        """Report the call id."""
        return f"{note}:{ctx.call_id if ctx else 'none'}"

    assert list(where_a.spec.parameters["properties"]) == ["note"]
    result = ToolExecutor([where_a]).execute(ToolCall("c-9", "where_a", {"note": "n"}))
    assert result.content == "n:c-9"
