"""MCP resources as jarvis results: text bounded, images kept as images, other binary described."""

from __future__ import annotations

from typing import Any

from jarvis.core.images import image_or_problem
from jarvis.core.types import (
    ImageBlock,
    TextBlock,
    ToolResult,
    base64_size,
    human_size,
    image_placeholder,
)

MAX_RESOURCE_IMAGE_CHARS = 8_000_000  # base64 characters over all images of one read
MAX_IMAGES = 16


def resource_result(tool_name: str, server: str, uri: str, result: Any, max_chars: int) -> ToolResult:
    """A ReadResourceResult as a ToolResult: text cut to `max_chars` in all, images as image
    blocks (with placeholders in the text), other binary contents described, never pasted."""
    blocks: list[TextBlock | ImageBlock] = []
    lines: list[str] = []
    left = max_chars
    cut = 0
    image_chars = images = 0
    for item in result.contents or []:
        text = getattr(item, "text", None)
        mime = getattr(item, "mime_type", None) or ""
        where = str(getattr(item, "uri", uri))
        if text is not None:
            piece = text[:left]
            cut += len(text) - len(piece)
            left -= len(piece)
            blocks.append(TextBlock(piece))
            lines.append(piece)
            continue
        blob = getattr(item, "blob", "") or ""
        problem = None
        if mime.startswith("image/"):
            # Bounded over the whole result (a server may return any number of contents),
            # and each one checked as every image is before it may reach a model.
            problem, data, actual = image_or_problem(blob, mime)
            if image_chars + len(blob) > MAX_RESOURCE_IMAGE_CHARS:
                problem = f"over {human_size(MAX_RESOURCE_IMAGE_CHARS * 3 // 4)} of images"
            elif images >= MAX_IMAGES:
                problem = f"more than {MAX_IMAGES} images"
        if mime.startswith("image/") and problem is None:
            image_chars += len(blob)
            images += 1
            image = ImageBlock(data=data, mimeType=actual)
            blocks.append(image)
            lines.append(image_placeholder(image))
        elif problem is not None:
            note = f"[image {where} not shown: {problem}]"
            blocks.append(TextBlock(note))
            lines.append(note)
        else:
            size = human_size(base64_size(blob))
            note = f"[binary resource {where} ({mime or 'unknown type'}), {size}, not shown]"
            blocks.append(TextBlock(note))
            lines.append(note)
    content = "\n".join(lines) if lines else f"(resource {uri} is empty)"
    if cut:
        content += (f"\n[... {cut} characters cut; ask again with a larger max_chars (at most "
                    f"the tool's maximum)]")
    has_image = any(isinstance(b, ImageBlock) for b in blocks)
    return ToolResult(tool_name=tool_name, content=content,
                      blocks=blocks if has_image else [],
                      metadata={"mcp_server": server, "uri": uri, "truncated_chars": cut})


def describe_resource(item: Any) -> dict[str, Any]:
    """One resource or template of a listing, JSON-ready."""
    data = item.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {k: data[k] for k in ("uri", "uriTemplate", "name", "title", "description", "mimeType",
                                 "size") if k in data}
