"""ScriptedEngine: an in-process InferenceEngine that replays scripted replies."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from jarvis.engine.base import GenerateResult, MessageLike, StreamChunk, to_wire
from jarvis.errors import EngineError
from jarvis.testing.script import (
    Disconnect,
    HTTPFailure,
    Misbehave,
    ScriptItem,
    _Exhausted,
    _Script,
    response_format_problem,
    split_text,
)


class ScriptedEngine:
    """An in-process InferenceEngine replaying scripted replies; `calls` records each request.

    Args:
        replies: script items, served in order (see the module docstring).
        model: the model name reported when a request names none.
        models: what `list_models` returns.
        default: an item served when the script is used up (None: running out is an EngineError).
        response_format: take OpenAI's `response_format` (structured answers then go natively;
            each request records it); without, a request carrying one is an EngineError.
    """

    engine_id = "scripted"

    def __init__(self, replies: Iterable[ScriptItem] = (), *, model: str = "scripted-model",
                 models: Sequence[str] | None = None, default: ScriptItem | None = None,
                 response_format: bool = False) -> None:
        self.supports_response_format = bool(response_format)
        self.model = model
        self.models = list(models) if models is not None else [model]
        self._script = _Script(replies, default)
        self.closed = False

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Every request so far: messages (OpenAI form), tools, model, temperature, ..."""
        return self._script.requests

    @property
    def remaining(self) -> int:
        return self._script.remaining

    def add(self, *replies: ScriptItem) -> None:
        self._script.add(*replies)

    def _next(self, messages: Sequence[MessageLike], tools: list[dict[str, Any]] | None,
              model: str | None, temperature: float | None, max_tokens: int | None,
              stream: bool, response_format: dict[str, Any] | None = None) -> GenerateResult:
        request = {"messages": to_wire(messages), "tools": tools, "model": model or self.model,
                   "temperature": temperature, "max_tokens": max_tokens, "stream": stream}
        if response_format is not None:
            if not self.supports_response_format:
                raise EngineError("this ScriptedEngine does not take response_format; make it "
                                  "with ScriptedEngine(..., response_format=True)")
            problem = response_format_problem(response_format)
            if problem:
                raise EngineError(f"scripted engine refused the request: {problem}")
            request["response_format"] = response_format
        item = self._script.take(request)
        if isinstance(item, _Exhausted):
            raise EngineError(f"ScriptedEngine has no scripted reply left ({item.served} served); "
                              f"add more replies or pass default=")
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, HTTPFailure):
            raise EngineError(f"scripted engine failure {item.status}: {item.message}")
        if isinstance(item, Disconnect):
            raise EngineError("scripted engine dropped the connection")
        if isinstance(item, Misbehave):
            raise EngineError("Misbehave needs the loopback FakeOpenAIServer, not ScriptedEngine")
        return item

    def generate(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
                 model: str | None = None, temperature: float | None = None,
                 max_tokens: int | None = None,
                 response_format: dict[str, Any] | None = None) -> GenerateResult:
        return self._next(messages, tools, model, temperature, max_tokens, False, response_format)

    def stream(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
               model: str | None = None, temperature: float | None = None,
               max_tokens: int | None = None,
               response_format: dict[str, Any] | None = None) -> Iterator[StreamChunk]:
        result = self._next(messages, tools, model, temperature, max_tokens, True, response_format)
        for piece in split_text(result.content):
            yield StreamChunk(delta=piece)
        yield StreamChunk(result=result)

    async def agenerate(self, messages: Sequence[MessageLike], **kwargs: Any) -> GenerateResult:
        return self.generate(messages, **kwargs)

    def list_models(self) -> list[str]:
        return list(self.models)

    def health(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True
