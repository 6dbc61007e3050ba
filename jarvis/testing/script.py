"""Script items (what a scripted model answers) and the thread-safe queue that serves them;
see jarvis.testing for the forms an item can take."""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jarvis.core.types import ToolCall
from jarvis.engine.base import GenerateResult

_ids = itertools.count(1)


@dataclass(slots=True)
class HTTPFailure:
    """A scripted error answer: HTTP `status` with an OpenAI-style error body."""

    status: int = 500
    message: str = "scripted failure"
    retry_after: float | None = None


@dataclass(slots=True)
class Disconnect:
    """A scripted dropped connection: the server closes the socket without answering."""


@dataclass(slots=True)
class Misbehave:
    """A scripted hostile answer, for testing deadlines and limits (streamed or not).

    kind:
      "keepalive"     streamed: an SSE comment line every `interval` s, never an answer;
                      plain: a JSON body that is only whitespace, one byte every `interval` s
      "empty_deltas"  streamed: a chunk with an empty delta every `interval` s; plain: as
                      keepalive
      "trickle"       a valid answer ("slow answer"), one byte every `interval` s
      "flood"         an answer that never ends: `chunk`-byte pieces of text as fast as the
                      client reads
      "arg_flood"     the same with a tool call whose arguments never end (streamed: one
                      `chunk`-byte argument delta per event)
      "slow_headers"  the status line and headers themselves, one byte every `interval` s
      "gzip"          a valid answer ("compressed answer"), sent with Content-Encoding: gzip
      "gzip_bomb"     `status` (default 500: an error body, which the openai client reads
                      whole itself) with a gzip body of zeros that decodes to `decoded_mib` MiB
    The server gives up after `seconds` (or when the client leaves).
    """

    kind: str
    interval: float = 0.05
    seconds: float = 60.0
    chunk: int = 64 * 1024
    status: int = 500
    decoded_mib: int = 256

    def __post_init__(self) -> None:
        if self.kind not in ("keepalive", "empty_deltas", "trickle", "flood", "arg_flood",
                             "slow_headers", "gzip", "gzip_bomb"):
            raise ValueError(f"unknown misbehaviour {self.kind!r}")


@dataclass(slots=True)
class _Exhausted:
    served: int = 0


ScriptItem = Any  # str | GenerateResult | dict | HTTPFailure | Disconnect | Exception | callable


def tool_call(name: str, arguments: dict[str, Any] | str | None = None,
              id: str | None = None) -> ToolCall:  # noqa: A002 - the OpenAI field name
    """A scripted tool call (arguments as a dict or a raw JSON string)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(id=id or f"call_{next(_ids)}", name=name, arguments=args)


def reply(content: str = "", tool_calls: Iterable[ToolCall | dict[str, Any]] = (),
          usage: dict[str, int] | None = None, finish_reason: str | None = None,
          model: str = "") -> GenerateResult:
    """A scripted model reply."""
    calls = [c if isinstance(c, ToolCall) else tool_call(c["name"], c.get("arguments"), c.get("id"))
             for c in tool_calls]
    result = GenerateResult(content=content, tool_calls=calls, model=model,
                            finish_reason=finish_reason or ("tool_calls" if calls else "stop"))
    if usage is not None:
        result.usage = _full_usage(usage)
    else:
        result.usage = {}  # filled in from the request by _estimate_usage
    return result


def _full_usage(usage: dict[str, int]) -> dict[str, int]:
    prompt = int(usage.get("prompt_tokens", 0))
    completion = int(usage.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": int(usage.get("total_tokens", prompt + completion))}


def _estimate_usage(messages: list[dict[str, Any]], result: GenerateResult) -> dict[str, int]:
    """Deterministic token counts: whitespace-separated words (good enough for tests)."""
    prompt = sum(len(str(m.get("content") or "").split()) for m in messages) or 1
    completion = len(result.content.split()) + sum(
        1 + len(str(c.arguments).split()) for c in result.tool_calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _normalize(item: ScriptItem, request: dict[str, Any]) -> Any:
    """Turn a script item into a GenerateResult, HTTPFailure, Disconnect or exception."""
    if callable(item) and not isinstance(item, (type, BaseException)):
        item = item(request)
    if isinstance(item, str):
        item = reply(item)
    elif isinstance(item, dict):
        if item.get("disconnect"):
            return Disconnect()
        if item.get("misbehave"):
            return Misbehave(str(item["misbehave"]), float(item.get("interval", 0.05)),
                             float(item.get("seconds", 60.0)), int(item.get("chunk", 64 * 1024)),
                             int(item.get("status", 500)), int(item.get("decoded_mib", 256)))
        if "status" in item or "error" in item:
            return HTTPFailure(int(item.get("status", 500)), str(item.get("error", "scripted failure")),
                               item.get("retry_after"))
        item = reply(item.get("content", "") or "", item.get("tool_calls") or (),
                     item.get("usage"), item.get("finish_reason"), item.get("model", ""))
    if isinstance(item, GenerateResult):
        # Copy, so a script item reused twice is not mutated by the first use.
        result = GenerateResult(content=item.content, tool_calls=list(item.tool_calls),
                                usage=dict(item.usage), model=item.model,
                                finish_reason=item.finish_reason)
        if not result.usage:
            result.usage = _estimate_usage(request.get("messages") or [], result)
        if not result.model:
            result.model = str(request.get("model") or "")
        return result
    if isinstance(item, (HTTPFailure, Disconnect, Misbehave, BaseException)):
        return item
    raise TypeError(f"cannot use {type(item).__name__} as a scripted reply")


class _Script:
    """Thread-safe queue of script items plus a record of what was asked."""

    def __init__(self, items: Iterable[ScriptItem], default: ScriptItem | None) -> None:
        self._items = list(items)
        self._default = default
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.requests: list[dict[str, Any]] = []

    def add(self, *items: ScriptItem) -> None:
        with self._lock:
            self._items.extend(items)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._items)

    def record(self, request: dict[str, Any]) -> None:
        """Record a request that was refused before it could take a scripted reply."""
        with self._cond:
            self.requests.append(request)
            self._cond.notify_all()

    def take(self, request: dict[str, Any]) -> Any:
        with self._cond:
            self.requests.append(request)
            self._cond.notify_all()
            if self._items:
                item = self._items.pop(0)
            elif self._default is not None:
                item = self._default
            else:
                return _Exhausted(len(self.requests) - 1)
        return _normalize(item, request)

    def wait_for(self, count: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.requests) >= count, timeout)


_SCHEMA_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def response_format_problem(value: Any) -> str | None:
    """What is wrong with a request's `response_format`, as the OpenAI API checks it (None:
    nothing). Both the scripted engine and the loopback server refuse what it names."""
    if not isinstance(value, dict):
        return "Invalid 'response_format': expected an object"
    kind = value.get("type")
    if kind not in ("text", "json_object", "json_schema"):
        return (f"Invalid 'response_format.type': {kind!r}; supported: 'text', 'json_object', "
                f"'json_schema'")
    if kind != "json_schema":
        return None
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        return "Missing required parameter: 'response_format.json_schema'"
    name = spec.get("name")
    if not isinstance(name, str) or not _SCHEMA_NAME.match(name):
        return ("Invalid 'response_format.json_schema.name': it must be 1-64 letters, digits, "
                "'_' or '-'")
    if not isinstance(spec.get("schema"), dict):
        return "Invalid 'response_format.json_schema.schema': expected a JSON schema object"
    if "strict" in spec and not isinstance(spec["strict"], bool):
        return "Invalid 'response_format.json_schema.strict': expected a boolean"
    return None


def split_text(text: str, words: int = 2) -> list[str]:
    """Split text into small pieces that join back to exactly `text` (for streaming)."""
    if not text:
        return []
    parts = text.split(" ")
    pieces = []
    for i in range(0, len(parts), words):
        piece = " ".join(parts[i:i + words])
        pieces.append(piece if i + words >= len(parts) else piece + " ")
    return pieces
