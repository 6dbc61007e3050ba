"""Records that flow between agents, engines and tools.

Plain dataclasses (no pydantic) so that importing them is cheap; pydantic is used only at
validation boundaries (tool arguments, config, agent files).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal


class ErrorType(StrEnum):
    """Why a tool call failed; carried on a failed ToolResult."""

    INVALID_ARGS = "invalid_args"
    TOOL_NOT_FOUND = "tool_not_found"
    TIMEOUT = "timeout"
    EXECUTION = "execution"
    DENIED = "denied"
    TRANSPORT = "transport"
    BUDGET = "budget"  # the run's budget does not allow the call (jarvis.tools.budget)


@dataclass(slots=True)
class ToolCall:
    """A request from a model to run one tool. `arguments` is a JSON string or a dict."""

    id: str
    name: str
    arguments: str | dict[str, Any] = "{}"

    def to_openai(self) -> dict[str, Any]:
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass(slots=True)
class ToolCallAction:
    """OpenEnv RFC-004 style action: a named operation with structured parameters."""

    tool_name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    tool_call_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class TextBlock:
    """An ORS text block."""

    text: str
    detail: Any = None
    type: Literal["text"] = "text"

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "detail": self.detail, "type": "text"}


@dataclass(slots=True, frozen=True)
class ImageBlock:
    """An ORS image block: base64 `data` with its `mimeType`."""

    data: str
    mimeType: str = "image/png"  # noqa: N815 - the ORS wire name
    detail: Any = None
    type: Literal["image"] = "image"

    def to_dict(self) -> dict[str, Any]:
        return {"data": self.data, "mimeType": self.mimeType, "detail": self.detail, "type": "image"}


Block = TextBlock | ImageBlock


def block_from_dict(data: dict[str, Any]) -> Block:
    """Build a block from its ORS dict form."""
    if data.get("type") == "image":
        return ImageBlock(data=data["data"], mimeType=data.get("mimeType", "image/png"),
                          detail=data.get("detail"))
    return TextBlock(text=str(data.get("text", "")), detail=data.get("detail"))


@dataclass(slots=True)
class ToolResult:
    """The outcome of one tool call, success or failure.

    `content` is the text the model reads. `blocks` holds ORS content blocks (text and images);
    when empty, the content is the single text block. `error_type` is set on failures.
    `labels` refines the tool's declared output labels for this one result ("private",
    "untrusted"; docs/trust.md): None means "as the tool's spec says"; the executor sets it to
    the labels it applied.
    """

    tool_name: str
    content: str
    success: bool = True
    usage: dict[str, Any] = field(default_factory=dict)
    cost_usd: float = 0.0
    latency_seconds: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    finished: bool = False
    reward: float | None = None
    error_type: ErrorType | None = None
    call_id: str | None = None
    labels: frozenset[str] | None = None

    def __post_init__(self) -> None:
        # Tools may spell the error type as a string ("timeout"); every reader expects the enum.
        if self.error_type is not None and not isinstance(self.error_type, ErrorType):
            self.error_type = ErrorType(self.error_type)

    @classmethod
    def failure(cls, tool_name: str, message: str, error_type: ErrorType | str,
                **metadata: Any) -> ToolResult:
        """A failed result whose content is the error message the model reads."""
        return cls(tool_name=tool_name, content=message, success=False,
                   error_type=ErrorType(error_type), metadata=dict(metadata))

    def images(self) -> list[ImageBlock]:
        """The image blocks the tool returned (they reach the model as image parts)."""
        return [b for b in self.blocks if isinstance(b, ImageBlock)]

    def all_blocks(self) -> list[Block]:
        """The ORS blocks, with the content as one text block when none were given."""
        return list(self.blocks) if self.blocks else [TextBlock(self.content)]

    def to_tool_output(self) -> dict[str, Any]:
        """The ORS ToolOutput form: blocks, metadata, reward, finished."""
        metadata = dict(self.metadata)
        if not self.success:
            metadata.setdefault("error_type", self.error_type.value if self.error_type else None)
        return {
            "blocks": [b.to_dict() for b in self.all_blocks()],
            "metadata": metadata or None,
            "reward": self.reward,
            "finished": self.finished,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (used by the SDK, the run log and `--json` output).

        `blocks` is present only when the tool gave blocks of its own (e.g. images), so that
        nothing the tool returned is lost; `reward` and `finished` only when set.
        """
        out: dict[str, Any] = {
            "tool_name": self.tool_name,
            "content": self.content,
            "success": self.success,
            "latency_seconds": self.latency_seconds,
            "cost_usd": self.cost_usd,
            "usage": dict(self.usage),
            "metadata": dict(self.metadata),
            "error_type": self.error_type.value if self.error_type else None,
            "call_id": self.call_id,
        }
        if self.blocks:
            out["blocks"] = [b.to_dict() for b in self.blocks]
        if self.reward is not None:
            out["reward"] = self.reward
        if self.finished:
            out["finished"] = True
        if self.labels is not None:
            out["labels"] = sorted(self.labels)
        return out


class Role(StrEnum):
    """Chat roles; `Message(role=Role.USER, ...)` and `Message(role="user", ...)` are the same."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


def human_size(size: int) -> str:
    """A byte count as people read it: '512 B', '12 KB', '3.4 MB'."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{round(size / 1024)} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def image_placeholder(block: ImageBlock) -> str:
    """The text that stands for an image where it cannot be shown: `[image: image/png, 12 KB]`.

    Binary data never goes into text a model reads; this placeholder does instead.
    """
    from jarvis.core.images import safe_mime

    return f"[image: {safe_mime(block.mimeType)}, {human_size(base64_size(block.data))}]"


def base64_size(data: str) -> int:
    """How many bytes base64 text decodes to (without decoding it)."""
    tail = data[-2:] if len(data) >= 2 else data
    return max(0, len(data) * 3 // 4 - tail.count("="))


def parts_text(parts: list[Block]) -> str:
    """The text view of content parts: text parts as they are, images as placeholders."""
    return "\n".join(p.text if isinstance(p, TextBlock) else image_placeholder(p) for p in parts)


def _part_from_openai(part: Any) -> Block:
    """A content part from its OpenAI form (`text` / `image_url` with a data URL), ORS form,
    a plain string or a Block."""
    if isinstance(part, (TextBlock, ImageBlock)):
        return part
    if isinstance(part, str):
        return TextBlock(part)
    if isinstance(part, dict) and part.get("type") == "image_url":
        url = part.get("image_url")
        url = url.get("url", "") if isinstance(url, dict) else str(url or "")
        head, sep, data = url.partition(",")
        if not (url.startswith("data:") and sep and head.endswith(";base64")):
            raise ValueError("only data: URLs (base64) are supported as image parts")
        return ImageBlock(data=data, mimeType=head[5:-7] or "image/png")
    if isinstance(part, dict):
        return block_from_dict(part)
    raise TypeError(f"cannot use {type(part).__name__} as a message content part")


def _wire_parts(parts: list[Block]) -> list[dict[str, Any]]:
    """Content parts in OpenAI form. Every image is checked first (jarvis.core.images): one
    that is not a real PNG/JPEG/GIF/WebP in plain base64 within the size limit, or past the
    per-message count, goes as a text note instead, so the engine never gets a URL, a lying
    type or junk from a tool or server (and one bad image cannot fail the whole request)."""
    from jarvis.core.images import MAX_IMAGES_PER_MESSAGE, check_image

    out: list[dict[str, Any]] = []
    sent = 0
    for p in parts:
        if isinstance(p, TextBlock):
            out.append({"type": "text", "text": p.text})
            continue
        problem, mime = check_image(p.data, p.mimeType)
        if problem is None and sent >= MAX_IMAGES_PER_MESSAGE:
            problem = f"more than {MAX_IMAGES_PER_MESSAGE} images in one message"
        if problem is not None:
            out.append({"type": "text", "text": f"[image not sent: {problem}]"})
            continue
        sent += 1
        out.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{p.data}"}})
    return out


@dataclass(slots=True)
class Message:
    """One chat message in OpenAI form (`role` is a string or a Role).

    `content` is always text (or None on an assistant turn that only calls tools), so every
    reader of a transcript can treat it as a string. A message that carries more than text
    (an image a tool returned) also has `parts`: text and image blocks in order. Then `parts`
    is the message and `content` its text view, with each image as a placeholder like
    `[image: image/png, 12 KB]`. Build one with `Message(role, parts=[...])`, or pass a list
    as `content` (OpenAI content parts, ORS blocks or strings): it is split into the two.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    parts: list[Block] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.role, Role):
            self.role = self.role.value  # a plain str, so comparisons and JSON stay simple
        if isinstance(self.content, list):
            self.parts = [_part_from_openai(p) for p in self.content]
            self.content = None
        elif self.parts:
            self.parts = [_part_from_openai(p) for p in self.parts]
        if self.parts and not self.content:
            self.content = parts_text(self.parts)

    @property
    def text(self) -> str:
        """The content as text ("" for an assistant turn that only calls tools)."""
        return self.content or ""

    @property
    def images(self) -> list[ImageBlock]:
        """The image parts (empty for a text message)."""
        return [p for p in self.parts if isinstance(p, ImageBlock)]

    def to_openai(self, images: bool = True) -> dict[str, Any]:
        """The OpenAI wire form. With `images` (a model that takes them), a message with image
        parts is sent as content parts, each image as an `image_url` data URL; without, as its
        text view, each image replaced by its placeholder."""
        content: Any = self.content
        if images and self.images:
            content = _wire_parts(self.parts)
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.tool_calls:
            out["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role != "tool":
            out["name"] = self.name
        return out


@dataclass(slots=True)
class Conversation:
    """Messages in order, with an optional cap: `add` drops the oldest beyond `max_messages`.

    What `AgentContext.conversation` carries into a run (OpenJarvis's record of the same name).
    """

    messages: list[Message] = field(default_factory=list)
    max_messages: int | None = None

    def add(self, message: Message) -> None:
        """Append `message`, dropping the oldest messages beyond `max_messages`."""
        self.messages.append(message)
        if self.max_messages is not None and len(self.messages) > self.max_messages:
            del self.messages[:len(self.messages) - max(0, self.max_messages)]

    def window(self, n: int) -> list[Message]:
        """The last `n` messages (none for n <= 0)."""
        return self.messages[-n:] if n > 0 else []


@dataclass(slots=True)
class AgentResult:
    """What an agent run produced."""

    content: str
    tool_results: list[ToolResult] = field(default_factory=list)
    turns: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
