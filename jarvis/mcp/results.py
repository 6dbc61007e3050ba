"""Converting between MCP tool results and jarvis ToolResults (both directions)."""

from __future__ import annotations

import json
from typing import Any

from jarvis.core.types import ErrorType, ImageBlock, TextBlock, ToolResult

# Bounds on what one result may carry: a hostile or broken server must not flood the model's
# context or memory (the executor cuts `content` further to its own output limit).
MAX_TEXT_BLOCK_CHARS = 1_000_000
MAX_IMAGE_CHARS = 8_000_000  # base64 characters over all images of one result


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT_BLOCK_CHARS:
        return text
    return text[:MAX_TEXT_BLOCK_CHARS] + f"\n[... {len(text) - MAX_TEXT_BLOCK_CHARS} characters cut ...]"


def _describe_blob(kind: str, mime: str | None, data: str, uri: str | None = None) -> str:
    size = len(data) * 3 // 4
    where = f" {uri}" if uri else ""
    return f"[{kind}{where} ({mime or 'unknown type'}), about {size} bytes, not shown]"


def to_tool_result(tool_name: str, server: str, remote: str, result: Any) -> ToolResult:
    """An MCP CallToolResult as a ToolResult: text and images as blocks, `isError` as a
    failure, structured content kept in metadata."""
    blocks: list[TextBlock | ImageBlock] = []
    image_chars = 0
    for item in result.content or []:
        kind = getattr(item, "type", None)
        if kind == "text":
            blocks.append(TextBlock(_cut(item.text)))
        elif kind == "image":
            image_chars += len(item.data)
            if image_chars > MAX_IMAGE_CHARS:
                blocks.append(TextBlock(_describe_blob("image", item.mime_type, item.data)
                                        .replace("not shown", "too large, not shown")))
            else:
                blocks.append(ImageBlock(data=item.data, mimeType=item.mime_type))
        elif kind == "audio":
            blocks.append(TextBlock(_describe_blob("audio", item.mime_type, item.data)))
        elif kind == "resource":
            res = item.resource
            text = getattr(res, "text", None)
            if text is not None:
                blocks.append(TextBlock(_cut(text)))
            else:
                blocks.append(TextBlock(_describe_blob("resource", res.mime_type,
                                                       getattr(res, "blob", ""), str(res.uri))))
        elif kind == "resource_link":
            blocks.append(TextBlock(f"[resource link {item.name}: {item.uri}]"))
        else:
            blocks.append(TextBlock(f"[unsupported MCP content type {kind!r}]"))
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    structured = result.structured_content
    content = "\n".join(texts)
    if not texts and structured is not None:
        content = json.dumps(structured, ensure_ascii=False, default=str)
    if not content and blocks:
        content = "\n".join(f"[image ({b.mimeType})]" for b in blocks if isinstance(b, ImageBlock))
    metadata: dict[str, Any] = {"mcp_server": server, "mcp_tool": remote}
    if structured is not None:
        metadata["structured_content"] = structured
    has_image = any(isinstance(b, ImageBlock) for b in blocks)
    out = ToolResult(tool_name=tool_name, content=content, metadata=metadata,
                     blocks=blocks if has_image or len(blocks) > 1 else [])
    if result.is_error:
        out.success = False
        out.error_type = ErrorType.EXECUTION
        if not out.content:
            out.content = f"MCP server {server!r} reported an error from tool {remote!r}"
    return out


def to_call_tool_result(result: ToolResult) -> Any:
    """A jarvis ToolResult as an MCP CallToolResult (for `jarvis mcp serve`)."""
    from mcp.types import CallToolResult, ImageContent, TextContent

    content: list[Any] = []
    for block in result.all_blocks():
        if isinstance(block, ImageBlock):
            content.append(ImageContent(type="image", data=block.data, mime_type=block.mimeType))
        else:
            content.append(TextContent(type="text", text=block.text))
    if not result.success and result.blocks:
        content.insert(0, TextContent(type="text", text=result.content))
    structured = result.metadata.get("structured_content")
    return CallToolResult(content=content, is_error=not result.success,
                          structured_content=structured if isinstance(structured, dict) else None)
