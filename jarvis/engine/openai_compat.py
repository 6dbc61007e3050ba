"""OpenAICompatEngine: one engine for every OpenAI-compatible server (ollama, vLLM, llama.cpp,
LM Studio, SGLang, OpenAI itself), built on the `openai` package, with a lightweight built-in
HTTP client as the alternative transport for fast start-up (see jarvis.engine.transport).

Failures are loud: an engine that rejects tools is an EngineError that says so (never a
quiet retry without them); transient failures (connection reset, 408, 429, 500, 502-504) are retried with
exponential backoff a bounded number of times; the final error names the engine, its URL,
what went wrong and what to do.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from jarvis.core.types import ToolCall
from jarvis.engine.backends import BACKENDS, Backend, base_url, check_base_url
from jarvis.engine.base import GenerateResult, MessageLike, StreamChunk, empty_usage, to_wire
from jarvis.engine.transport import (
    MAX_RESPONSE_BYTES,
    HTTPTransport,
    OpenAITransport,
    WireError,
    auto_client,
)
from jarvis.errors import ConfigError, EngineError, UnknownNameError

T = TypeVar("T")

MAX_RETRY_AFTER = 30.0  # never sleep longer than this on a server's Retry-After
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_TOOLS_REJECTED = re.compile(r"tool|function.?call|jinja", re.IGNORECASE)
CLIENTS = ("openai", "http")


def _count(value: Any) -> int:
    """A token count from a server: a garbled one (text, negative, bool) counts as 0."""
    if isinstance(value, bool):
        return 0
    try:
        number = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(0, number)


def _usage(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return empty_usage()
    prompt = _count(raw.get("prompt_tokens"))
    completion = _count(raw.get("completion_tokens"))
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": _count(raw.get("total_tokens")) or prompt + completion}


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else str(p.get("text") or "")
                       for p in content if isinstance(p, (str, dict)))
    return str(content)


class OpenAICompatEngine:
    """An InferenceEngine for any OpenAI-compatible chat-completions server.

    Args:
        backend: ollama, vllm, llamacpp, lmstudio, sglang or openai.
        host: the server (e.g. http://localhost:11434); default: the backend's usual address.
        api_key: default: the backend's key variable (OPENAI_API_KEY, ...) or a placeholder.
        model: the default model for requests that name none.
        timeout: seconds one request may take in all (first byte, every gap, the total).
        max_response_bytes: largest reply read, streamed or not (larger: an EngineError).
        max_retries: extra attempts after a transient failure.
        retry_backoff: seconds before the first retry; doubles each time.
        client: "openai" (the openai package), "http" (the built-in client: same protocol,
            much faster to import and ~6x cheaper a request), or "auto": the built-in client
            where it sends what the openai package would (see transport.auto_client).
        vision: whether models take images (True, False or "auto": guessed from the model's
            name, see jarvis.engine.vision); images go as `image_url` parts, else as text
            placeholders.
        vision_models: model names or globs -> True/False, winning over `vision`.
    """

    # Takes OpenAI's `response_format` (json_schema): structured answers go natively.
    supports_response_format = True

    def __init__(self, backend: str = "openai", host: str | None = None, *,
                 api_key: str | None = None, model: str = "", timeout: float = 120.0,
                 connect_timeout: float = 5.0, max_retries: int = 3, retry_backoff: float = 0.5,
                 models: Sequence[str] | None = None, client: str = "openai",
                 max_response_bytes: int = MAX_RESPONSE_BYTES, vision: bool | str = "auto",
                 vision_models: dict[str, bool] | None = None) -> None:
        from jarvis.engine.vision import check_setting

        spec = BACKENDS.get(backend)
        if spec is None:
            raise UnknownNameError("engine", backend, BACKENDS)
        if client not in CLIENTS and client != "auto":
            raise ConfigError(f"unknown engine client {client!r}; use one of: auto, "
                              f"{', '.join(CLIENTS)}")
        self.backend: Backend = spec
        self.engine_id = backend
        self.host = host or spec.default_host
        self.base_url = base_url(spec, self.host)
        check_base_url(backend, self.base_url)
        self.client_kind = auto_client(self.base_url) if client == "auto" else client
        self._chosen = client == "auto"  # `client` may still build an openai.OpenAI on request
        self._openai: Any = None
        from jarvis.security.redact import redact_url

        # What errors, events and the run log show: a password or ?key= in the engine's URL
        # (a remote server behind basic auth) is not for every reader of an error.
        self.shown_url = redact_url(self.base_url)
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
        self.max_response_bytes = max(1, int(max_response_bytes))
        self._models: list[str] | None = list(models) if models is not None else None
        try:
            self.vision = check_setting(vision)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.vision_models = dict(vision_models or {})
        self._transport: Any = None
        self._aclient: Any = None
        # on_retry(attempt, max_retries, delay, reason): told before each retry (status lines)
        self.on_retry: Callable[[int, int, float, str], None] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAICompatEngine({self.engine_id!r}, {self.shown_url!r}, client={self.client_kind!r})"

    # --- transports --------------------------------------------------------------------------
    @property
    def transport(self) -> Any:
        """The HTTP transport (built on first use)."""
        if self._transport is None:
            with self._lock:
                if self._transport is None:
                    kind = HTTPTransport if self.client_kind == "http" else OpenAITransport
                    self._transport = kind(self.base_url, self.api_key, self.timeout,
                                           self.connect_timeout,
                                           max_response_bytes=self.max_response_bytes)
        return self._transport

    @property
    def client(self) -> Any:
        """The `openai.OpenAI` client (with client="openai", or "auto" whatever it picked)."""
        transport = self.transport
        if isinstance(transport, OpenAITransport):
            return transport.client
        if not self._chosen:
            raise EngineError("this engine uses the built-in HTTP client; build it with "
                              "client=\"openai\" for an openai.OpenAI client")
        with self._lock:  # "auto" picked the built-in client; one openai client for callers
            if self._openai is None:
                self._openai = OpenAITransport(self.base_url, self.api_key, self.timeout,
                                               self.connect_timeout,
                                               max_response_bytes=self.max_response_bytes)
        return self._openai.client

    @property
    def async_client(self) -> Any:
        if self._aclient is None:
            from jarvis.engine.transport import bounded_async_client, openai_module

            openai = openai_module()
            AsyncOpenAI, Timeout = openai.AsyncOpenAI, openai.Timeout  # noqa: N806

            self._aclient = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key,
                                        timeout=Timeout(self.timeout, connect=self.connect_timeout),
                                        max_retries=0, http_client=bounded_async_client(
                                            self.max_response_bytes))
        return self._aclient

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self._openai is not None:
            self._openai.close()
            self._openai = None
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
                max_tokens: int | None, response_format: dict[str, Any] | None = None
                ) -> dict[str, Any]:
        name = model or self.model
        if not name:
            raise EngineError(f"no model given for {self.engine_id} at {self.shown_url}: pass "
                              f"-m/--model or set JARVIS_MODEL")
        params: dict[str, Any] = {"model": name,
                                  "messages": to_wire(messages, images=self.accepts_images(name))}
        if tools:
            params["tools"] = tools
        if temperature is not None:
            params["temperature"] = temperature
        if max_tokens is not None:
            params[self.backend.max_tokens_param] = max_tokens
        if response_format is not None:
            params["response_format"] = response_format
        return params

    def generate(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
                 model: str | None = None, temperature: float | None = None,
                 max_tokens: int | None = None,
                 response_format: dict[str, Any] | None = None) -> GenerateResult:
        """One reply; transient failures are retried, others raise EngineError."""
        params = self._params(messages, tools, model, temperature, max_tokens, response_format)
        data = self._with_retries(lambda: self.transport.chat(params), params)
        return self._parse(data, params)

    async def agenerate(self, messages: Sequence[MessageLike], *,
                        tools: list[dict[str, Any]] | None = None, model: str | None = None,
                        temperature: float | None = None,
                        max_tokens: int | None = None,
                        response_format: dict[str, Any] | None = None) -> GenerateResult:
        """Async `generate` (openai.AsyncOpenAI, or a worker thread with the HTTP client)."""
        import asyncio

        if self.client_kind == "http":
            return await asyncio.to_thread(self.generate, messages, tools=tools, model=model,
                                           temperature=temperature, max_tokens=max_tokens,
                                           response_format=response_format)
        from jarvis.engine.transport import openai_wire_error

        params = self._params(messages, tools, model, temperature, max_tokens, response_format)
        attempt = 0
        while True:
            try:
                # wait_for: the timeout bounds the whole call, not only each read.
                response = await asyncio.wait_for(
                    self.async_client.chat.completions.create(**params), self.timeout)
                return self._parse(response.model_dump(), params)
            except TimeoutError:
                delay = self._classify(WireError(
                    "timeout", f"no complete reply within {self.timeout:g} s (the [engine] "
                               f"timeout bounds the whole request)"), params, attempt)
            except Exception as exc:  # classified below; anything unknown is re-raised
                delay = self._classify(openai_wire_error(exc, self.timeout), params, attempt)
            attempt += 1
            await asyncio.sleep(delay)

    def stream(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
               model: str | None = None, temperature: float | None = None,
               max_tokens: int | None = None,
               response_format: dict[str, Any] | None = None) -> Iterator[StreamChunk]:
        """Text deltas as they arrive; the last chunk carries the whole GenerateResult.

        Only the request is retried: once text has been handed out, a broken stream is an
        EngineError (retrying would repeat text the caller already showed).
        """
        params = self._params(messages, tools, model, temperature, max_tokens, response_format)
        params["stream"] = True
        if self.backend.stream_usage:
            params["stream_options"] = {"include_usage": True}
        chunks = self._with_retries(lambda: self.transport.chat_stream(params), params)
        content: list[str] = []
        # Pieces per call, joined once at the end: `slot["arguments"] += delta` would copy the
        # whole argument string for every delta (quadratic in a long, finely split stream).
        calls: dict[int, dict[str, Any]] = {}
        usage: dict[str, int] | None = None
        finish: str | None = None
        model_name = params["model"]
        answered = False  # a reply that is not a stream at all must not read as an empty answer
        try:
            for chunk in chunks:
                if not isinstance(chunk, dict) or not isinstance(chunk.get("choices", []), list):
                    raise WireError("protocol", f"bad stream chunk: {str(chunk)[:200]!r}")
                answered = True
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
                model_name = chunk.get("model") or model_name
                for choice in chunk.get("choices") or ():
                    if not isinstance(choice, dict):
                        raise WireError("protocol", f"bad stream choice: {str(choice)[:200]!r}")
                    finish = choice.get("finish_reason") or finish
                    delta = choice.get("delta") or {}
                    text = delta.get("content")
                    if text:
                        content.append(text)
                        yield StreamChunk(delta=text)
                    for tc in delta.get("tool_calls") or ():
                        index = tc.get("index")
                        slot = calls.setdefault(index if index is not None else len(calls),
                                                {"id": "", "name": [], "arguments": []})
                        if tc.get("id"):
                            slot["id"] = tc["id"]
                        fn = tc.get("function") or {}
                        for part in ("name", "arguments"):
                            piece = fn.get(part)
                            if piece:
                                if not isinstance(piece, str):
                                    raise TypeError(f"tool call {part} is {type(piece).__name__}")
                                slot[part].append(piece)
        except WireError as exc:
            if exc.kind in ("timeout", "too_large"):
                self._classify(exc, params, self.max_retries)  # raises the clear EngineError
            raise EngineError(f"the stream from {self.engine_id} at {self.shown_url} broke off: "
                              f"{exc.message}") from exc
        except (AttributeError, TypeError) as exc:  # a chunk whose parts have the wrong shapes
            raise EngineError(f"the stream from {self.engine_id} at {self.shown_url} is not an "
                              f"OpenAI chat-completion stream: {exc}") from exc
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        if not answered:
            raise EngineError(f"{self.engine_id} at {self.shown_url} answered a streaming request "
                              "without any stream events (is it an OpenAI-compatible server? "
                              "--no-stream may work)")
        for c in calls.values():
            c["name"], c["arguments"] = "".join(c["name"]), "".join(c["arguments"])
        if any(not c["name"] for c in calls.values()):
            raise EngineError(f"{self.engine_id} at {self.shown_url} streamed a tool call that "
                              f"names no function (model {model_name})")
        tool_calls = [ToolCall(id=c["id"] or f"call_{uuid.uuid4().hex[:12]}", name=c["name"],
                               arguments=c["arguments"] or "{}")
                      for _, c in sorted(calls.items())]
        yield StreamChunk(result=GenerateResult(
            content="".join(content), tool_calls=tool_calls, usage=usage or empty_usage(),
            model=model_name, finish_reason=finish or ("tool_calls" if tool_calls else "stop")))

    def _parse(self, data: dict[str, Any], params: dict[str, Any]) -> GenerateResult:
        choices = data.get("choices")
        if not choices or not isinstance(choices[0], dict):
            raise EngineError(f"{self.engine_id} at {self.shown_url} answered without any choices "
                              f"(model {params['model']})")
        choice = choices[0]
        message = choice.get("message") or {}
        raw_calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(raw_calls or [], list):
            raise EngineError(f"{self.engine_id} at {self.shown_url} answered with a malformed "
                              f"message (model {params['model']}): {str(message)[:200]}")
        tool_calls = []
        for tc in raw_calls or ():
            fn = tc.get("function") if isinstance(tc, dict) else None
            if not isinstance(fn, dict) or not fn.get("name"):
                # Dropping it would turn the turn into an empty answer.
                raise EngineError(f"{self.engine_id} at {self.shown_url} answered with a tool call "
                                  f"that names no function (model {params['model']}): "
                                  f"{str(tc)[:200]}")
            arguments = fn.get("arguments")
            tool_calls.append(ToolCall(id=tc.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                                       name=str(fn["name"]),
                                       arguments=arguments if arguments is not None else "{}"))
        return GenerateResult(content=_text(message.get("content")), tool_calls=tool_calls,
                              usage=_usage(data.get("usage")),
                              model=data.get("model") or params["model"],
                              finish_reason=choice.get("finish_reason"))

    # --- failures ----------------------------------------------------------------------------
    def _with_retries(self, call: Callable[[], T], params: dict[str, Any]) -> T:
        attempt = 0
        while True:
            try:
                return call()
            except WireError as exc:
                delay = self._classify(exc, params, attempt)
                self._notify_retry(attempt, delay, exc)
            attempt += 1
            time.sleep(delay)

    def _notify_retry(self, attempt: int, delay: float, exc: Any) -> None:
        """Tell `on_retry(attempt, max_retries, delay, reason)` (a front end's status line)
        that a request failed and is retried; a failing hook never breaks the request."""
        hook = getattr(self, "on_retry", None)
        if hook is not None:
            reason = f"HTTP {exc.status}" if getattr(exc, "status", None) else str(
                getattr(exc, "kind", "error"))
            try:
                hook(attempt + 1, self.max_retries, delay, reason)
            except Exception:  # noqa: BLE001  (a display hook must not fail the request)
                pass

    def _classify(self, exc: BaseException, params: dict[str, Any], attempt: int) -> float:
        """Seconds to wait before retrying `exc`, or raise the EngineError that explains it."""
        if not isinstance(exc, WireError):
            raise exc
        where = f"{self.engine_id} at {self.shown_url}"
        if exc.kind == "timeout":
            raise EngineError(f"{where} did not answer in time ({exc.message}; model "
                              f"{params['model']}); raise [engine] timeout or use a smaller "
                              f"model") from exc
        if exc.kind == "too_large":
            raise EngineError(f"{where} sent too much: {exc.message} (model "
                              f"{params['model']})") from exc
        if exc.kind == "refused":
            # Nothing listens there: retrying only delays the message the user needs.
            hint = self.backend.start_hint
            raise EngineError(f"cannot reach {where}: {exc.message}. Is it running? "
                              f"{hint[:1].upper()}{hint[1:]}, or set {self.backend.host_env} to "
                              f"where it listens") from exc
        if exc.kind == "protocol":
            raise EngineError(f"{where} answered with something that is not an OpenAI "
                              f"chat completion: {exc.message}") from exc
        if exc.kind == "status":
            status = exc.status or 0
            message = exc.message
            if (params.get("tools") and status in (400, 422, 500, 501)
                    and _TOOLS_REJECTED.search(message)):
                raise EngineError(
                    f"{where} rejected the tools for model {params['model']} (HTTP {status}: "
                    f"{message}). Use a model or server setup with tool calling "
                    f"({self.backend.start_hint}), or the react agent (-a react), or ask "
                    f"without --tools") from exc
            # Only what can succeed later is retried: 429 and the temporary 5xx. 501 (not
            # implemented), 505 and the like say the same thing every time.
            if status not in RETRY_STATUSES:
                raise EngineError(self._status_hint(where, status, message, params)) from exc
            if attempt >= self.max_retries:
                raise EngineError(f"{where} failed with HTTP {status} ({message}) after "
                                  f"{attempt + 1} attempts; try again later") from exc
            if exc.retry_after is not None:
                return min(exc.retry_after, MAX_RETRY_AFTER)
            return self._backoff(attempt)
        # A reset or dropped connection.
        if attempt >= self.max_retries:
            raise EngineError(f"lost the connection to {where} ({exc.message}) {attempt + 1} "
                              f"times; is the server healthy?") from exc
        return self._backoff(attempt)

    def _backoff(self, attempt: int) -> float:
        import random  # only a retry needs it (~2 ms to import on every start)

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

    def accepts_images(self, model: str) -> bool:
        """Whether image parts are sent to `model` (else text placeholders)."""
        from jarvis.engine.vision import accepts_images

        return accepts_images(model, self.vision, self.vision_models)

    # --- models and health -------------------------------------------------------------------
    def list_models(self) -> list[str]:
        """Model ids the server lists (cached after the first call)."""
        if self._models is None:
            self._models = self._with_retries(lambda: self.transport.models(),
                                              {"model": "(listing models)"})
        return list(self._models)

    def default_model(self) -> str:
        """The model to use when none is named: the backend's default, else the first listed."""
        if self.model:
            return self.model
        official = self.base_url.startswith(BACKENDS[self.engine_id].default_host)
        if self.backend.default_model and official:
            return self.backend.default_model  # another OpenAI-compatible service: ask it
        models = self.list_models()
        if not models:
            raise EngineError(f"{self.engine_id} at {self.shown_url} lists no models; "
                              f"{self.backend.start_hint}")
        return models[0]

    def health(self) -> bool:
        from jarvis.engine.probe import probe

        return probe(self.base_url, min(self.timeout, 2.0)).ok
