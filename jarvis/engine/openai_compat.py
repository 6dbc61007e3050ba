"""OpenAICompatEngine: one engine, built on the `openai` package, for every OpenAI-compatible
server (ollama, vLLM, llama.cpp, LM Studio, SGLang, OpenAI itself).

Failures are loud: an engine that rejects tools is an EngineError that says so (never a
quiet retry without them); transient failures (connection reset, 429, 5xx) are retried with
exponential backoff a bounded number of times; the final error names the engine, its URL,
what went wrong and what to do.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from jarvis.core.types import ToolCall
from jarvis.engine.backends import BACKENDS, Backend, base_url
from jarvis.engine.base import GenerateResult, MessageLike, StreamChunk, empty_usage, to_wire
from jarvis.errors import EngineError, UnknownNameError

T = TypeVar("T")

MAX_RETRY_AFTER = 30.0  # never sleep longer than this on a server's Retry-After
_TOOLS_REJECTED = re.compile(r"tool|function.?call|jinja", re.IGNORECASE)


def _usage(raw: Any) -> dict[str, int]:
    if raw is None:
        return empty_usage()
    get = raw.get if isinstance(raw, dict) else (lambda k: getattr(raw, k, None))
    prompt = int(get("prompt_tokens") or 0)
    completion = int(get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": int(get("total_tokens") or prompt + completion)}


class OpenAICompatEngine:
    """An InferenceEngine for any OpenAI-compatible chat-completions server.

    Args:
        backend: ollama, vllm, llamacpp, lmstudio, sglang or openai.
        host: the server (e.g. http://localhost:11434); default: the backend's usual address.
        api_key: default: the backend's key variable (OPENAI_API_KEY, ...) or a placeholder.
        model: the default model for requests that name none.
        timeout: seconds per request.
        max_retries: extra attempts after a transient failure.
        retry_backoff: seconds before the first retry; doubles each time.
    """

    def __init__(self, backend: str = "openai", host: str | None = None, *,
                 api_key: str | None = None, model: str = "", timeout: float = 120.0,
                 connect_timeout: float = 5.0, max_retries: int = 3, retry_backoff: float = 0.5,
                 models: Sequence[str] | None = None) -> None:
        spec = BACKENDS.get(backend)
        if spec is None:
            raise UnknownNameError("engine", backend, BACKENDS)
        self.backend: Backend = spec
        self.engine_id = backend
        self.host = host or spec.default_host
        self.base_url = base_url(spec, self.host)
        key = api_key or (os.environ.get(spec.api_key_env) if spec.api_key_env else None)
        if not key and backend == "openai" and self.base_url.startswith("https://api.openai.com"):
            raise EngineError("the openai engine needs an API key: set OPENAI_API_KEY, or point "
                              "OPENAI_BASE_URL at another OpenAI-compatible server")
        self.api_key = key or spec.placeholder_key or "EMPTY"
        self.model = model
        self.timeout = timeout
        self.connect_timeout = min(connect_timeout, timeout)
        self.max_retries = max(0, max_retries)
        self.retry_backoff = max(0.0, retry_backoff)
        self._models: list[str] | None = list(models) if models is not None else None
        self._client: Any = None
        self._aclient: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAICompatEngine({self.engine_id!r}, {self.base_url!r})"

    # --- clients -----------------------------------------------------------------------------
    def _timeout(self) -> Any:
        # openai re-exports the Timeout of the HTTP library it actually uses.
        from openai import Timeout

        return Timeout(self.timeout, connect=self.connect_timeout)

    @property
    def client(self) -> Any:
        """The `openai.OpenAI` client (built on first use; it does no retries of its own)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    from openai import OpenAI

                    self._client = OpenAI(base_url=self.base_url, api_key=self.api_key,
                                          timeout=self._timeout(), max_retries=0)
        return self._client

    @property
    def async_client(self) -> Any:
        if self._aclient is None:
            from openai import AsyncOpenAI

            self._aclient = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key,
                                        timeout=self._timeout(), max_retries=0)
        return self._aclient

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        # The async client is closed by its event loop's owner (aclose); drop our reference.
        self._aclient = None

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.close()
            self._aclient = None
        self.close()

    # --- requests ----------------------------------------------------------------------------
    def _params(self, messages: Sequence[MessageLike], tools: list[dict[str, Any]] | None,
                model: str | None, temperature: float | None,
                max_tokens: int | None) -> dict[str, Any]:
        name = model or self.model
        if not name:
            raise EngineError(f"no model given for {self.engine_id} at {self.base_url}: pass -m/--model "
                              f"or set JARVIS_MODEL")
        params: dict[str, Any] = {"model": name, "messages": to_wire(messages)}
        if tools:
            params["tools"] = tools
        if temperature is not None:
            params["temperature"] = temperature
        if max_tokens is not None:
            params[self.backend.max_tokens_param] = max_tokens
        return params

    def generate(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
                 model: str | None = None, temperature: float | None = None,
                 max_tokens: int | None = None) -> GenerateResult:
        """One reply; transient failures are retried, others raise EngineError."""
        params = self._params(messages, tools, model, temperature, max_tokens)
        response = self._with_retries(lambda: self.client.chat.completions.create(**params),
                                      params)
        return self._parse(response, params)

    async def agenerate(self, messages: Sequence[MessageLike], *,
                        tools: list[dict[str, Any]] | None = None, model: str | None = None,
                        temperature: float | None = None,
                        max_tokens: int | None = None) -> GenerateResult:
        """Async `generate` on `openai.AsyncOpenAI`, with the same retry rules."""
        import asyncio

        params = self._params(messages, tools, model, temperature, max_tokens)
        attempt = 0
        while True:
            try:
                response = await self.async_client.chat.completions.create(**params)
                return self._parse(response, params)
            except Exception as exc:  # classified below; non-openai errors re-raised
                delay = self._classify(exc, params, attempt)
            attempt += 1
            await asyncio.sleep(delay)

    def stream(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
               model: str | None = None, temperature: float | None = None,
               max_tokens: int | None = None) -> Iterator[StreamChunk]:
        """Text deltas as they arrive; the last chunk carries the whole GenerateResult.

        Only the request is retried: once text has been handed out, a broken stream is an
        EngineError (retrying would repeat text the caller already showed).
        """
        params = self._params(messages, tools, model, temperature, max_tokens)
        params["stream"] = True
        if self.backend.stream_usage:
            params["stream_options"] = {"include_usage": True}
        stream = self._with_retries(lambda: self.client.chat.completions.create(**params), params)
        content: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage: dict[str, int] | None = None
        finish: str | None = None
        model_name = params["model"]
        try:
            for chunk in stream:
                if getattr(chunk, "usage", None) is not None:
                    usage = _usage(chunk.usage)
                if chunk.model:
                    model_name = chunk.model
                for choice in chunk.choices or ():
                    delta = choice.delta
                    if choice.finish_reason:
                        finish = choice.finish_reason
                    if delta is None:
                        continue
                    if delta.content:
                        content.append(delta.content)
                        yield StreamChunk(delta=delta.content)
                    for tc in delta.tool_calls or ():
                        slot = calls.setdefault(tc.index if tc.index is not None else len(calls),
                                                {"id": "", "name": "", "arguments": ""})
                        if tc.id:
                            slot["id"] = tc.id
                        if tc.function is not None:
                            if tc.function.name:
                                slot["name"] += tc.function.name
                            if tc.function.arguments:
                                slot["arguments"] += tc.function.arguments
        except Exception as exc:
            raise self._stream_error(exc) from exc
        finally:
            stream.close()
        tool_calls = [ToolCall(id=c["id"] or f"call_{uuid.uuid4().hex[:12]}", name=c["name"],
                               arguments=c["arguments"] or "{}")
                      for _, c in sorted(calls.items())]
        yield StreamChunk(result=GenerateResult(
            content="".join(content), tool_calls=tool_calls, usage=usage or empty_usage(),
            model=model_name, finish_reason=finish or ("tool_calls" if tool_calls else "stop")))

    def _parse(self, response: Any, params: dict[str, Any]) -> GenerateResult:
        choices = getattr(response, "choices", None)
        if not choices:
            raise EngineError(f"{self.engine_id} at {self.base_url} answered without any choices "
                              f"(model {params['model']})")
        choice = choices[0]
        message = choice.message
        tool_calls = []
        for tc in getattr(message, "tool_calls", None) or ():
            fn = getattr(tc, "function", None)
            if fn is None:
                continue
            tool_calls.append(ToolCall(id=tc.id or f"call_{uuid.uuid4().hex[:12]}", name=fn.name,
                                       arguments=fn.arguments or "{}"))
        return GenerateResult(content=message.content or "", tool_calls=tool_calls,
                              usage=_usage(getattr(response, "usage", None)),
                              model=getattr(response, "model", None) or params["model"],
                              finish_reason=choice.finish_reason)

    # --- failures ----------------------------------------------------------------------------
    def _with_retries(self, call: Callable[[], T], params: dict[str, Any]) -> T:
        attempt = 0
        while True:
            try:
                return call()
            except Exception as exc:
                delay = self._classify(exc, params, attempt)
            attempt += 1
            time.sleep(delay)

    def _classify(self, exc: Exception, params: dict[str, Any], attempt: int) -> float:
        """Seconds to wait before retrying `exc`, or raise the EngineError that explains it."""
        import openai

        where = f"{self.engine_id} at {self.base_url}"
        if isinstance(exc, EngineError):
            raise exc
        if isinstance(exc, openai.APITimeoutError):
            raise EngineError(f"{where} did not answer within {self.timeout:g} s (model "
                              f"{params['model']}); raise [engine] timeout or use a smaller "
                              f"model") from exc
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            message = _error_message(exc)
            if params.get("tools") and status in (400, 422, 500, 501) and _TOOLS_REJECTED.search(message):
                raise EngineError(
                    f"{where} rejected the tools for model {params['model']} (HTTP {status}: "
                    f"{message}). Use a model or server setup with tool calling "
                    f"({self.backend.start_hint}), or the react agent (-a react), or ask "
                    f"without --tools") from exc
            transient = status == 429 or status >= 500
            if not transient:
                raise EngineError(self._status_hint(where, status, message, params)) from exc
            if attempt >= self.max_retries:
                raise EngineError(f"{where} failed with HTTP {status} ({message}) after "
                                  f"{attempt + 1} attempts; try again later") from exc
            retry_after = _retry_after(exc)
            if retry_after is not None:
                return min(retry_after, MAX_RETRY_AFTER)
            return self._backoff(attempt)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            if _refused(exc):
                # Nothing listens there: retrying only delays the message the user needs.
                raise EngineError(f"cannot reach {where}: {cause or 'connection refused'}. "
                                  f"Is it running? {self.backend.start_hint[:1].upper()}"
                                  f"{self.backend.start_hint[1:]}, or set {self.backend.host_env} "
                                  f"to where it listens") from exc
            if attempt >= self.max_retries:
                raise EngineError(f"lost the connection to {where} ({cause or exc}) "
                                  f"{attempt + 1} times; is the server healthy?") from exc
            return self._backoff(attempt)
        raise exc

    def _backoff(self, attempt: int) -> float:
        return self.retry_backoff * (2 ** attempt) * (1 + random.random() * 0.25)

    def _status_hint(self, where: str, status: int, message: str, params: dict[str, Any]) -> str:
        text = f"{where} rejected the request with HTTP {status}: {message}"
        if status in (401, 403):
            env = self.backend.api_key_env
            return text + (f". Check the API key ({env})" if env else ". Check the server's API key")
        if status == 404:
            return text + (f". Is model {params['model']!r} available there? "
                           f"Pick one with -m/--model or JARVIS_MODEL")
        return text

    def _stream_error(self, exc: Exception) -> EngineError:
        if isinstance(exc, EngineError):
            return exc
        return EngineError(f"the stream from {self.engine_id} at {self.base_url} broke off: "
                           f"{type(exc).__name__}: {exc}")

    # --- models and health -------------------------------------------------------------------
    def list_models(self) -> list[str]:
        """Model ids the server lists (cached after the first call)."""
        if self._models is None:
            page = self._with_retries(lambda: self.client.models.list(), {"model": "(listing)"})
            self._models = [m.id for m in page.data]
        return list(self._models)

    def default_model(self) -> str:
        """The model to use when none is named: the backend's default, else the first listed."""
        if self.model:
            return self.model
        if self.backend.default_model:
            return self.backend.default_model
        models = self.list_models()
        if not models:
            raise EngineError(f"{self.engine_id} at {self.base_url} lists no models; "
                              f"{self.backend.start_hint}")
        return models[0]

    def health(self) -> bool:
        from jarvis.engine.discovery import probe

        return probe(self.base_url, min(self.timeout, 2.0)).ok


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        return json.dumps(body)[:300]
    if isinstance(body, str) and body:
        return body[:300]
    return str(getattr(exc, "message", exc))[:300]


def _refused(exc: BaseException) -> bool:
    """Whether nothing listens at the address (the chain holds a ConnectError / refusal).

    Checked by name: openai may vendor its own copy of httpx.
    """
    seen = 0
    node: BaseException | None = exc
    while node is not None and seen < 10:
        if isinstance(node, ConnectionRefusedError) or type(node).__name__ == "ConnectError":
            return True
        node = node.__cause__ or node.__context__
        seen += 1
    return False


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
