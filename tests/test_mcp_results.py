"""MCP CallToolResult <-> ToolResult conversion, with the SDK's own result types."""

from __future__ import annotations

from mcp.types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from jarvis.core.types import ErrorType, ImageBlock, TextBlock, ToolResult
from jarvis.mcp import results
from jarvis.mcp.results import to_tool_result
from jarvis.server.mcp_served import to_call_tool_result


def test_mixed_content_becomes_blocks() -> None:
    result = CallToolResult(content=[
        TextContent(type="text", text="two things:"),
        ImageContent(type="image", data="/9j/4A==", mime_type="image/jpeg"),  # a JPEG signature
        AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
        EmbeddedResource(type="resource", resource=TextResourceContents(
            uri="file:///notes.txt", text="note body", mime_type="text/plain")),
        ResourceLink(type="resource_link", name="report", uri="file:///report.pdf"),
    ])
    out = to_tool_result("s__t", "s", "t", result)
    assert out.success
    kinds = [type(b).__name__ for b in out.blocks]
    assert kinds == ["TextBlock", "ImageBlock", "TextBlock", "TextBlock", "TextBlock"]
    assert out.blocks[1] == ImageBlock(data="/9j/4A==", mimeType="image/jpeg")
    assert "audio" in out.blocks[2].text and "not shown" in out.blocks[2].text
    assert "note body" in out.content and "file:///report.pdf" in out.content


def test_structured_only_and_errors() -> None:
    only = to_tool_result("s__t", "s", "t", CallToolResult(content=[], structured_content={"n": 1}))
    assert only.content == '{"n": 1}' and only.metadata["structured_content"] == {"n": 1}
    failed = to_tool_result("s__t", "s", "t", CallToolResult(content=[], is_error=True))
    assert not failed.success and failed.error_type is ErrorType.EXECUTION
    assert "'s'" in failed.content


def test_oversized_content_is_bounded() -> None:
    text_limit, image_limit = results.MAX_TEXT_BLOCK_CHARS, results.MAX_IMAGE_CHARS
    half = image_limit // 2 + 4
    out = to_tool_result("s__t", "s", "t", CallToolResult(content=[
        TextContent(type="text", text="x" * (text_limit + 40)),
        ImageContent(type="image", data="iVBORw0KGgoA" + "A" * (half - 12), mime_type="image/png"),
        ImageContent(type="image", data="iVBORw0KGgoA" + "B" * (half - 12), mime_type="image/png"),
    ]))
    assert out.blocks[0].text.startswith("x" * 100) and "40 characters cut" in out.blocks[0].text
    assert len(out.blocks[0].text) < text_limit + 100
    assert isinstance(out.blocks[1], ImageBlock)
    assert isinstance(out.blocks[2], TextBlock) and "too large" in out.blocks[2].text


def test_tool_result_to_mcp() -> None:
    ok = to_call_tool_result(ToolResult(tool_name="x", content="fine",
                                        blocks=[TextBlock("fine"), ImageBlock(data="aGk=")]))
    assert not ok.is_error and [c.type for c in ok.content] == ["text", "image"]
    bad = to_call_tool_result(ToolResult.failure("x", "nope", ErrorType.TIMEOUT))
    assert bad.is_error and bad.content[0].text == "nope"


def test_embedded_image_resource_is_an_image() -> None:
    from mcp.types import BlobResourceContents

    out = to_tool_result("s__t", "s", "t", CallToolResult(content=[EmbeddedResource(
        type="resource", resource=BlobResourceContents(uri="file:///a.png", blob="iVBORw0KGgo=",
                                                       mime_type="image/png"))]))
    assert out.blocks == [ImageBlock(data="iVBORw0KGgo=", mimeType="image/png")]
    assert out.content == "[image: image/png, 8 B]"
