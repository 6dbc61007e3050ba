"""Converting MCP tool results into jarvis ToolResults (the other direction, for `jarvis mcp
serve`, is jarvis.server.mcp_served.to_call_tool_result)."""

from __future__ import annotations

import json
import re
from typing import Any

from jarvis.core.images import image_or_problem, safe_mime
from jarvis.core.types import ErrorType, ImageBlock, TextBlock, ToolResult, image_placeholder

# Bounds on what one result may carry: a hostile or broken server must not flood the model's
# context or memory (the executor cuts `content` further to its own output limit).
MAX_TEXT_BLOCK_CHARS = 1_000_000
MAX_IMAGE_CHARS = 8_000_000  # base64 characters over all images of one result
MAX_BLOCKS = 1_000  # content items of one result; past them, one note
MAX_RESULT_TEXT_CHARS = 2 * MAX_TEXT_BLOCK_CHARS  # text over all blocks of one result
MAX_IMAGES = 16  # images of one result (each checked: jarvis.core.images)
# An embedded text resource longer than this is cut here, with its URI and the tool that reads
# it: cut later by the executor's output limit, the model would lose the rest without knowing
# where to find it.
MAX_EMBEDDED_TEXT_CHARS = 20_000


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT_BLOCK_CHARS:
        return text
    return text[:MAX_TEXT_BLOCK_CHARS] + f"\n[... {len(text) - MAX_TEXT_BLOCK_CHARS} characters cut ...]"


def _describe_blob(kind: str, mime: str | None, data: str, uri: str | None = None) -> str:
    size = len(data) * 3 // 4
    where = f" {uri}" if uri else ""
    return f"[{kind}{where} ({mime or 'unknown type'}), about {size} bytes, not shown]"


BINARY_MIN_CHARS = 256  # a base64-looking string this long in structured content is binary
_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s_-]+$")


def scrub_binary(value: Any, depth: int = 0) -> Any:
    """`value` (structured content) with binary data replaced by short placeholders, so text
    the model reads never carries base64: content items with `data` (image, audio), `blob`
    resources and long base64-looking strings."""
    if depth > 40:
        return "[...]"
    if isinstance(value, dict):
        kind = value.get("type")
        if isinstance(value.get("data"), str) and kind in ("image", "audio"):
            return _describe_blob(str(kind), value.get("mimeType"), value["data"])
        if isinstance(value.get("blob"), str):
            return _describe_blob("resource", value.get("mimeType"), value["blob"],
                                  value.get("uri"))
        return {k: scrub_binary(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_binary(v, depth + 1) for v in value]
    if isinstance(value, str) and len(value) >= BINARY_MIN_CHARS and " " not in value[:BINARY_MIN_CHARS] \
            and _BASE64.match(value[:4096]):
        return f"[binary data, about {len(value) * 3 // 4} bytes, not shown]"
    if isinstance(value, str) and len(value) >= BINARY_MIN_CHARS and value[:5].lower() == "data:":
        # A data URL (`data:image/png;base64,...`) is binary too: its ':' ';' ',' got it past
        # the base64 test, and it was pasted whole into the model's text.
        head, _, data = value.partition(",")
        kind = head[5:].split(";", 1)[0][:50] or "data"
        return f"[{kind} data URL, about {len(data) * 3 // 4} bytes, not shown]"
    return value


def _mirrors_content(structured: Any) -> bool:
    """Structured content that only repeats the content list (some servers send
    `{"content": [...]}` as structured content too): nothing to add to the text."""
    return isinstance(structured, dict) and set(structured) == {"content"} \
        and isinstance(structured["content"], list)


def to_tool_result(tool_name: str, server: str, remote: str, result: Any) -> ToolResult:
    """An MCP CallToolResult as a ToolResult: text and images as blocks, `isError` as a
    failure, structured content kept in metadata.

    `content` (what a model reads as text) never holds binary data: an image is there as a
    placeholder like `[image: image/png, 12 KB]` while its block carries the data (the agent
    sends it to a model that takes images); structured content shown as text has its binary
    parts replaced by placeholders.
    """
    blocks: list[TextBlock | ImageBlock] = []
    lines: list[str] = []
    image_chars = 0
    images = 0
    has_text = False
    text_chars = texts_cut = 0
    items = list(result.content or [])
    for index, item in enumerate(items):
        kind = getattr(item, "type", None)
        if index >= MAX_BLOCKS:
            # Many blocks add up: 100 000 of them were all kept and joined. What is past the
            # bounds is counted, not copied.
            more = len(items) - index
            blocks.append(TextBlock(f"[... {more} more content item(s) of this result cut]"))
            lines.append(blocks[-1].text)
            break
        if kind == "text":
            has_text = True
            if text_chars >= MAX_RESULT_TEXT_CHARS:  # 50 blocks of 1 MB: not 50 MB of text
                texts_cut += 1
                continue
            blocks.append(TextBlock(_cut(item.text)))
            text_chars += len(blocks[-1].text)
            lines.append(blocks[-1].text)
            continue
        if kind == "image":
            image_chars += len(item.data)
            images += 1
            problem, data, mime = image_or_problem(item.data, item.mime_type)
            if image_chars > MAX_IMAGE_CHARS:
                blocks.append(TextBlock(_describe_blob("image", safe_mime(item.mime_type),
                                                       item.data)
                                        .replace("not shown", "too large, not shown")))
            elif images > MAX_IMAGES:
                blocks.append(TextBlock(f"[image not shown: more than {MAX_IMAGES} images in "
                                        f"one result]"))
            elif problem is not None:
                blocks.append(TextBlock(f"[image from the server refused: {problem}]"))
            else:
                blocks.append(ImageBlock(data=data, mimeType=mime))
                lines.append(image_placeholder(blocks[-1]))
                continue
        elif kind == "audio":
            blocks.append(TextBlock(_describe_blob("audio", item.mime_type, item.data)))
        elif kind == "resource":
            res = item.resource
            text = getattr(res, "text", None)
            blob = getattr(res, "blob", None)
            mime = res.mime_type or ""
            if text is not None:
                has_text = True
                if len(text) > MAX_EMBEDDED_TEXT_CHARS:
                    text = (text[:MAX_EMBEDDED_TEXT_CHARS]
                            + f"\n[... {len(text) - MAX_EMBEDDED_TEXT_CHARS} more characters of "
                              f"resource {res.uri} (read it with mcp_read_resource "
                              f"server={server!r} uri={str(res.uri)!r})]")
                blocks.append(TextBlock(text))
            elif (blob and mime.startswith("image/") and image_chars + len(blob) <= MAX_IMAGE_CHARS
                  and images < MAX_IMAGES and image_or_problem(blob, mime)[0] is None):
                # An embedded image is an image like any other: it can reach the model.
                image_chars += len(blob)
                images += 1
                _, data, actual = image_or_problem(blob, mime)
                blocks.append(ImageBlock(data=data, mimeType=actual))
                lines.append(image_placeholder(blocks[-1]))
                continue
            else:
                blocks.append(TextBlock(_describe_blob("resource", res.mime_type,
                                                       getattr(res, "blob", ""), str(res.uri))
                                        + f" (read it with mcp_read_resource server={server!r} "
                                          f"uri={str(res.uri)!r})"))
        elif kind == "resource_link":
            blocks.append(TextBlock(f"[resource link {item.name}: {item.uri} (read it with "
                                    f"mcp_read_resource server={server!r} uri={str(item.uri)!r})]"))
        else:
            blocks.append(TextBlock(f"[unsupported MCP content type {kind!r}]"))
        lines.append(blocks[-1].text)
    if texts_cut:
        blocks.append(TextBlock(f"[... {texts_cut} more text item(s) of this result cut]"))
        lines.append(blocks[-1].text)
    structured = result.structured_content
    content = "\n".join(lines)
    if not has_text and structured is not None and not _mirrors_content(structured):
        shown = json.dumps(scrub_binary(structured), ensure_ascii=False, default=str)
        content = "\n".join([shown, *lines]) if lines else shown
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

