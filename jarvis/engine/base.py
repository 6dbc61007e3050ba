"""The InferenceEngine protocol and the records an engine returns.

Agents talk to every engine through this protocol: `generate` for one reply, `stream` for a
reply delivered piece by piece (its last chunk carries the complete result), `list_models`,
`health` and `close`. Third-party engines implement the protocol; nothing needs subclassing.
Callers go through `generate_reply` / `stream_reply`, the engine boundary: they accept the
reply shapes OpenJarvis engines return (dicts, bare text pieces) and engines without `stream`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jarvis.core.types import Message, ToolCall

MessageLike = Message | dict[str, Any]


def empty_usage() -> dict[str, int]:
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def add_usage(total: dict[str, int], usage: dict[str, Any] | None) -> dict[str, int]:
    """Add a reply's token counts into `total` (in place) and return it."""
    if usage:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int):
                total[key] = total.get(key, 0) + value
    return total


@dataclass(slots=True)
class GenerateResult:
    """One complete reply from an engine."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=empty_usage)
    model: str = ""
    finish_reason: str | None = "stop"

    def to_message(self) -> Message:
        """The assistant message to append to the transcript."""
        # OpenAI wants null content (not "") on an assistant turn that only calls tools.
        content = (self.content or None) if self.tool_calls else self.content
        return Message(role="assistant", content=content, tool_calls=list(self.tool_calls))


@dataclass(slots=True)
class StreamChunk:
    """A piece of a streamed reply: a text delta; the last chunk has `result` set."""

    delta: str = ""
    result: GenerateResult | None = None


@runtime_checkable
class InferenceEngine(Protocol):
    """What an agent needs from a model server."""

    engine_id: str

    def generate(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
                 model: str | None = None, temperature: float | None = None,
                 max_tokens: int | None = None) -> GenerateResult:
        """One reply (content and/or tool calls, usage, model, finish_reason)."""
        ...

    def stream(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
               model: str | None = None, temperature: float | None = None,
               max_tokens: int | None = None) -> Iterator[StreamChunk]:
        """The same reply as text deltas; the last chunk carries the full GenerateResult."""
        ...

    def list_models(self) -> list[str]:
        ...

    def health(self) -> bool:
        ...

    def close(self) -> None:
        ...


def to_wire(messages: Sequence[MessageLike], images: bool = True) -> list[dict[str, Any]]:
    """Messages in OpenAI chat form. `images`: send image parts as `image_url` content parts
    (for a model that takes images); False sends each image as a text placeholder instead.
    Dicts are taken as already in wire form.

    The images of one request are bounded (MAX_REQUEST_IMAGE_CHARS of base64): every turn of
    an agent adds the images its tools returned, and each request resends the whole
    transcript, so ten turns of 8 MB results would make an 80 MB request. The newest images
    are sent; messages past the budget carry their placeholders instead."""
    from jarvis.core.images import MAX_REQUEST_IMAGE_CHARS

    budget = MAX_REQUEST_IMAGE_CHARS
    send = [False] * len(messages)
    if images:
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if isinstance(m, Message) and m.parts:
                size = sum(len(p.data) for p in m.images)
                if size <= budget:
                    budget -= size
                    send[i] = True
    return [m.to_openai(images=send[i]) if isinstance(m, Message) else dict(m)
            for i, m in enumerate(messages)]


def arguments_text(arguments: str | dict[str, Any]) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def normalize_reply(reply: Any, engine: Any = None) -> GenerateResult:
    """The engine boundary: a GenerateResult from whatever `generate` returned.

    Engines written for OpenJarvis return a plain dict (`{"content", "usage", "tool_calls",
    "model", "finish_reason"}`); everything above the engine (agents, the SDK, the llm tool)
    sees only GenerateResult, so the conversion happens here, once. A reply of any other shape
    is an EngineError naming the engine, not an AttributeError deep in an agent.
    """
    if isinstance(reply, GenerateResult):
        return reply
    name = getattr(engine, "engine_id", None) or type(engine).__name__
    if not isinstance(reply, dict):
        from jarvis.errors import EngineError

        raise EngineError(f"engine {name!r} returned a {type(reply).__name__}; expected a "
                          f"GenerateResult or a dict with 'content'")
    try:
        content = reply.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError(f"'content' is a {type(content).__name__}, not a string")
        usage = reply.get("usage") or {}
        if not isinstance(usage, dict):
            raise TypeError(f"'usage' is a {type(usage).__name__}, not a dict")
        calls = [_tool_call(c, i) for i, c in enumerate(reply.get("tool_calls") or [])]
        return GenerateResult(
            content=content or "", tool_calls=calls,
            usage={**empty_usage(), **{k: v for k, v in usage.items() if isinstance(v, int)}},
            model=str(reply.get("model") or ""),
            finish_reason=reply.get("finish_reason", "tool_calls" if calls else "stop"))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        from jarvis.errors import EngineError

        raise EngineError(f"engine {name!r} returned a malformed reply: {exc}") from None


def _tool_call(call: Any, index: int) -> ToolCall:
    """A ToolCall from OpenAI's `{"id", "function": {"name", "arguments"}}` or a flat dict."""
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, dict):
        raise TypeError(f"tool call {index} is a {type(call).__name__}, not a dict")
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool call {index} has no name")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, (str, dict)):
        raise TypeError(f"tool call {index} arguments are a {type(arguments).__name__}")
    return ToolCall(id=str(call.get("id") or f"call_{index}"), name=name, arguments=arguments)


def generate_reply(engine: Any, messages: Sequence[MessageLike], **kwargs: Any) -> GenerateResult:
    """The engine boundary for one reply: `engine.generate(...)` as a GenerateResult.

    Every caller above the engine (agents, the llm tool, MCP sampling) goes through here, so an
    engine that returns a dict (OpenJarvis style) works everywhere and a malformed reply is an
    EngineError wherever it shows up.
    """
    return normalize_reply(engine.generate(messages, **kwargs), engine)


def stream_reply(engine: Any, messages: Sequence[MessageLike], emit: Callable[[str], Any],
                 *, check: Callable[[], None] | None = None, **kwargs: Any) -> GenerateResult:
    """The engine boundary for a streamed reply: each text delta goes to `emit`; returns the
    complete reply.

    `stream` is optional for third-party engines (OpenJarvis engines often have only
    `generate`): without one, the reply comes from `generate` and its whole content is
    emitted once. Streams may yield StreamChunks, bare text pieces or a final reply dict.
    `check` is called between chunks (it raises to stop, e.g. when the run is cancelled);
    the engine's stream is closed however the loop ends, so its connection is released.
    """
    stream = getattr(engine, "stream", None)
    # A class that subclasses InferenceEngine without writing stream() inherits the
    # protocol's empty body, which returns None: that is no stream either.
    chunks = stream(messages, **kwargs) if callable(stream) else None
    if chunks is None:
        whole = generate_reply(engine, messages, **kwargs)
        if whole.content:
            emit(whole.content)
        return whole
    result: GenerateResult | None = None
    pieces: list[str] = []
    try:
        for raw in chunks:
            if check is not None:
                check()
            chunk = normalize_chunk(raw, engine)
            if isinstance(raw, str):
                pieces.append(raw)
            if chunk.delta:
                emit(chunk.delta)
            if chunk.result is not None:
                result = chunk.result
    finally:
        close = getattr(chunks, "close", None)
        if callable(close):
            close()
    if result is None and pieces:
        # An engine that streams bare text pieces (OpenJarvis style) never sends a final
        # result: the text it streamed is the reply.
        result = GenerateResult(content="".join(pieces))
    if result is None:
        from jarvis.errors import EngineError

        raise EngineError(f"the stream from {getattr(engine, 'engine_id', 'the engine')}"
                          f" ended without a final result")
    return result


def normalize_chunk(chunk: Any, engine: Any = None) -> StreamChunk:
    """A StreamChunk from what `stream` yielded: a StreamChunk, a text piece, or a reply dict."""
    if isinstance(chunk, StreamChunk):
        return chunk
    if isinstance(chunk, str):
        return StreamChunk(delta=chunk)
    return StreamChunk(result=normalize_reply(chunk, engine))
