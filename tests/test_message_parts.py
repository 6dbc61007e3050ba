"""Message content parts: images carried beside the text, sent as parts or as placeholders."""

from __future__ import annotations

import base64

import pytest
from mcp.types import CallToolResult, ImageContent

from jarvis.agents.base import image_message, observation_text
from jarvis.core.types import (
    ImageBlock,
    Message,
    TextBlock,
    ToolCall,
    ToolResult,
    human_size,
    image_placeholder,
)
from jarvis.engine.base import to_wire
from jarvis.engine.vision import accepts_images, guess_vision
from jarvis.mcp.results import scrub_binary, to_tool_result

# Images are real image bytes (a JPEG/PNG signature): anything else never reaches an engine.
IMG = ImageBlock(data=base64.b64encode(b"\xff\xd8\xff" + bytes(12285)).decode(),
                 mimeType="image/jpeg")  # 12 KB decoded
PNG8 = "iVBORw0KGgo="  # the 8-byte PNG signature


def test_plain_string_content_is_unchanged() -> None:
    m = Message(role="user", content="hello")
    assert m.parts == [] and m.images == []
    assert m.to_openai() == {"role": "user", "content": "hello"}
    assert m.to_openai(images=False) == {"role": "user", "content": "hello"}


def test_parts_keep_a_text_view_with_placeholders() -> None:
    m = Message(role="user", parts=[TextBlock("look:"), IMG])
    assert m.content == "look:\n[image: image/jpeg, 12 KB]"
    assert isinstance(m.content, str)  # every existing reader still gets text
    assert m.to_openai(images=False)["content"] == m.content
    assert m.to_openai()["content"] == [
        {"type": "text", "text": "look:"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + IMG.data}}]


def test_openai_style_list_content_is_accepted() -> None:
    m = Message(role="user", content=[
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG8}},
        "and a string"])
    assert m.parts == [TextBlock("what is this?"), ImageBlock(data=PNG8, mimeType="image/png"),
                       TextBlock("and a string")]
    assert m.content == "what is this?\n[image: image/png, 8 B]\nand a string"
    assert to_wire([m])[0]["content"][1]["image_url"]["url"] == "data:image/png;base64," + PNG8
    with pytest.raises(ValueError, match="data: URLs"):
        Message(role="user", content=[{"type": "image_url", "image_url": {"url": "https://x/y.png"}}])


def test_sizes_and_placeholders() -> None:
    assert human_size(500) == "500 B" and human_size(12 * 1024) == "12 KB"
    assert human_size(3 * 1024 * 1024 + 400_000) == "3.4 MB"
    assert image_placeholder(IMG) == "[image: image/jpeg, 12 KB]"


def test_observation_and_image_message_for_a_jarvis_tool_image() -> None:
    # An ORS image block from a jarvis tool (not MCP): the text gets the placeholder once.
    result = ToolResult(tool_name="chart", content="here is the chart",
                        blocks=[TextBlock("here is the chart"), IMG])
    assert observation_text(result) == "here is the chart\n[image: image/jpeg, 12 KB]"
    call = ToolCall(id="c1", name="chart")
    carrier = image_message([(call, result)])
    assert carrier is not None and carrier.role == "user" and carrier.images == [IMG]
    assert carrier.parts[0].text == "The image returned by tool chart (call c1):"
    assert image_message([(call, ToolResult(tool_name="t", content="x"))]) is None


def test_vision_guess_by_model_name() -> None:
    for model in ("gpt-4o-mini", "gpt-4.1", "llava:13b", "qwen2.5-vl:7b", "Qwen/Qwen2-VL-7B",
                  "llama3.2-vision", "gemma3:12b", "claude-3-5-sonnet", "pixtral-12b",
                  "minicpm-v", "o4-mini"):
        assert guess_vision(model), model
    for model in ("qwen3:8b", "llama3.1:8b", "mistral-7b-instruct", "test-model", "gpt-3.5-turbo",
                  "deepseek-r1"):
        assert not guess_vision(model), model
    assert accepts_images("qwen3:8b", "auto", {"qwen3:*": True})
    assert not accepts_images("gpt-4o", False)
    assert accepts_images("x", True)


def test_structured_content_never_shows_base64() -> None:
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(3750)).decode()
    shown = scrub_binary({"files": [{"name": "a.png", "bytes": data}],
                          "content": [{"type": "image", "data": data, "mimeType": "image/png"}]})
    text = str(shown)
    assert "AAAA" not in text and "not shown" in text and "a.png" in text
    # Structured content that is not a mirror of the content list is still shown, scrubbed.
    out = to_tool_result("s__t", "s", "t", CallToolResult(
        content=[ImageContent(type="image", data=data, mime_type="image/png")],
        structured_content={"path": "a.png", "raw": data}))
    assert "a.png" in out.content and "AAAA" not in out.content
    assert "[image: image/png, 4 KB]" in out.content
    assert out.metadata["structured_content"]["raw"] == data  # kept whole for SDK callers


def test_a_jarvis_tool_image_reaches_the_engine() -> None:
    from jarvis.agents.orchestrator import OrchestratorAgent
    from jarvis.testing import ScriptedEngine, reply, tool_call
    from jarvis.tools.base import tool

    @tool(register=False)
    def chart(title: str) -> dict:
        """Draw a chart (ORS observation + image).

        Args:
            title: The chart's title.
        """
        return {"observation": f"chart {title}", "image": {"data": PNG8, "mimeType": "image/png"}}

    engine = ScriptedEngine([reply(tool_calls=[tool_call("chart", {"title": "sales"})]), "done"])
    result = OrchestratorAgent(engine, tools=[chart]).run("draw it")
    assert result.content == "done"
    messages = engine.calls[1]["messages"]
    assert messages[-2] == {"role": "tool", "content": "chart sales\n[image: image/png, 8 B]",
                            "tool_call_id": messages[-2]["tool_call_id"]}
    assert messages[-1]["role"] == "user"
    assert messages[-1]["content"][1] == {"type": "image_url",
                                          "image_url": {"url": "data:image/png;base64," + PNG8}}
