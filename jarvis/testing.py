"""A public testing kit: run agents offline against scripted model replies.

- `ScriptedEngine`: an in-process InferenceEngine that replays scripted replies (text and tool
  calls) and records every request it got.
- `FakeOpenAIServer`: a real loopback HTTP server speaking the OpenAI chat-completions protocol
  (`POST /v1/chat/completions`, plain and SSE streaming, tool calls in both, usage;
  `GET /v1/models`). It serves scripted replies in order and records each request body, so
  a real `jarvis ask` subprocess, or any OpenAI client, can be tested end to end.

A script item is one of:
  - a string: a final text reply;
  - `reply(content, tool_calls=[tool_call(name, args), ...], usage=...)` or the same as a dict
    `{"content": ..., "tool_calls": [{"name": ..., "arguments": {...}}]}`;
  - `HTTPFailure(status, message)` / `{"status": 503, "error": "..."}`: answer with an error;
  - `Disconnect()` / `{"disconnect": true}`: drop the connection without answering;
  - `Misbehave(kind, ...)` / `{"misbehave": kind, "interval": ..., "seconds": ...}`: an answer
    that never ends well (keep-alive comments, empty deltas, one byte at a time, or an
    endless flood), to test a client's deadlines and size limits;
  - a callable `fn(request_body) -> item`, to answer from the request itself.

From the command line (for tests that run the server in another process):
    python -m jarvis.testing serve --reply "Hello" --script replies.json --record requests.jsonl
prints the base URL (`http://127.0.0.1:PORT/v1`) on its first line, then serves until stopped.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jarvis.core.types import ToolCall
from jarvis.engine.base import GenerateResult, MessageLike, StreamChunk, to_wire
from jarvis.errors import EngineError

__all__ = [
    "Disconnect",
    "Misbehave",
    "FakeOpenAIServer",
    "HTTPFailure",
    "ScriptedEngine",
    "reply",
    "tool_call",
]

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


class ScriptedEngine:
    """An in-process InferenceEngine replaying scripted replies; `calls` records each request.

    Args:
        replies: script items, served in order (see the module docstring).
        model: the model name reported when a request names none.
        models: what `list_models` returns.
        default: an item served when the script is used up (None: running out is an EngineError).
    """

    engine_id = "scripted"

    def __init__(self, replies: Iterable[ScriptItem] = (), *, model: str = "scripted-model",
                 models: Sequence[str] | None = None, default: ScriptItem | None = None) -> None:
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
              stream: bool) -> GenerateResult:
        request = {"messages": to_wire(messages), "tools": tools, "model": model or self.model,
                   "temperature": temperature, "max_tokens": max_tokens, "stream": stream}
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
                 max_tokens: int | None = None) -> GenerateResult:
        return self._next(messages, tools, model, temperature, max_tokens, False)

    def stream(self, messages: Sequence[MessageLike], *, tools: list[dict[str, Any]] | None = None,
               model: str | None = None, temperature: float | None = None,
               max_tokens: int | None = None) -> Iterator[StreamChunk]:
        result = self._next(messages, tools, model, temperature, max_tokens, True)
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


# --- the loopback HTTP server --------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return None  # keep test output clean

    def _send_json(self, status: int, body: dict[str, Any],
                   headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _path(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        return path[3:] if path.startswith("/v1") else path

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        owner = self.server.owner
        owner._log(self, None)
        if self._path() == "/models":
            self._send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "jarvis-testing"}
                for m in owner.models]})
        else:
            self._send_json(404, _error_body(f"no route GET {self.path}", "not_found"))

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        owner = self.server.owner
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_REQUEST_BYTES:
            self.close_connection = True
            self._send_json(400, _error_body("bad Content-Length", "invalid_request_error"))
            return
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            owner._log(self, None)
            self._send_json(400, _error_body("request body is not a JSON object",
                                             "invalid_request_error"))
            return
        owner._log(self, body)
        if self._path() != "/chat/completions":
            self._send_json(404, _error_body(f"no route POST {self.path}", "not_found"))
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            self._send_json(400, _error_body("messages must be a list of message objects",
                                             "invalid_request_error"))
            return
        item = owner._script.take(body)
        if isinstance(item, _Exhausted):
            self._send_json(400, _error_body(
                f"FakeOpenAIServer has no scripted reply left ({item.served} served)",
                "invalid_request_error"))
            return
        if isinstance(item, Disconnect) or isinstance(item, BaseException):
            self.close_connection = True
            try:
                import socket

                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if isinstance(item, HTTPFailure):
            headers = {}
            if item.retry_after is not None:
                headers["Retry-After"] = f"{item.retry_after:g}"
            self._send_json(item.status, _error_body(item.message, _error_type(item.status)),
                            headers)
            return
        if isinstance(item, Misbehave):
            self._misbehave(item, bool(body.get("stream")))
        elif body.get("stream"):
            self._stream(item, body)
        else:
            self._send_json(200, _completion(item, owner.next_id()))

    def _stream(self, result: GenerateResult, body: dict[str, Any]) -> None:
        owner = self.server.owner
        cid = owner.next_id()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def send(delta: dict[str, Any], finish: str | None = None) -> None:
            chunk = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": result.model, "choices": [
                         {"index": 0, "delta": delta, "finish_reason": finish}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

        send({"role": "assistant", "content": ""})
        for piece in split_text(result.content):
            send({"content": piece})
        for index, call in enumerate(result.tool_calls):
            args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            half = len(args) // 2
            send({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                  "function": {"name": call.name, "arguments": args[:half]}}]})
            send({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]})
        send({}, result.finish_reason or "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage_chunk = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                           "model": result.model, "choices": [], "usage": result.usage}
            self.wfile.write(b"data: " + json.dumps(usage_chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


    def _misbehave(self, how: Misbehave, stream: bool) -> None:
        if how.kind == "slow_headers":
            self.close_connection = True
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"x" * 4096
            end = time.monotonic() + how.seconds
            try:
                for i in range(len(head)):
                    if time.monotonic() > end:
                        break
                    self.wfile.write(head[i:i + 1])
                    self.wfile.flush()
                    time.sleep(how.interval)
            except OSError:
                pass  # the client gave up: that is the point
            return
        if how.kind in ("gzip", "gzip_bomb"):
            self._gzipped(how, stream)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.flush()
        end = time.monotonic() + how.seconds

        def pieces() -> Iterator[bytes]:
            if how.kind == "flood":
                text = json.dumps("x" * how.chunk)[1:-1]
                if stream:
                    piece = ('data: {"choices": [{"index": 0, "delta": {"content": "' + text
                             + '"}}]}\n\n').encode()
                    while True:
                        yield piece
                yield b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "'
                while True:
                    yield text.encode()
            if how.kind == "arg_flood":
                text = json.dumps("x" * how.chunk)[1:-1]
                call = '{"index": 0, "id": "call_flood", "type": "function", "function": '
                if stream:
                    yield ('data: {"choices": [{"index": 0, "delta": {"tool_calls": [' + call
                           + '{"name": "calculator", "arguments": ""}}]}}]}\n\n').encode()
                    piece = ('data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, '
                             '"function": {"arguments": "' + text + '"}}]}}]}\n\n').encode()
                    while True:
                        yield piece
                yield ('{"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": ['
                       + call + '{"name": "calculator", "arguments": "').encode()
                while True:
                    yield text.encode()
            if how.kind == "trickle":
                answer = reply("slow answer", model="test-model")
                answer.usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
                if stream:
                    chunk = {"choices": [{"index": 0, "delta": {"content": "slow answer"},
                                          "finish_reason": "stop"}], "model": "test-model"}
                    data = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
                else:
                    data = json.dumps(_completion(answer, "chatcmpl-slow")).encode()
                for i in range(len(data)):
                    yield data[i:i + 1]
                return
            empty = b'data: {"choices": [{"index": 0, "delta": {}}]}\n\n'
            unit = (b": keep-alive\n\n" if how.kind == "keepalive" else empty) if stream else b" "
            while True:
                yield unit

        try:
            for piece in pieces():
                if time.monotonic() > end:
                    break
                self.wfile.write(piece)
                self.wfile.flush()
                if how.kind not in ("flood", "arg_flood"):
                    time.sleep(how.interval)
        except OSError:
            pass  # the client gave up: that is the point


    def _gzipped(self, how: Misbehave, stream: bool) -> None:
        import zlib

        packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header
        if how.kind == "gzip":
            status = 200
            answer = reply("compressed answer", model="test-model")
            answer.usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
            if stream:
                chunk = {"choices": [{"index": 0, "delta": {"content": "compressed answer"},
                                      "finish_reason": "stop"}], "model": "test-model"}
                data = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
            else:
                data = json.dumps(_completion(answer, "chatcmpl-gzip")).encode()
            body = packer.compress(data)
            body += packer.flush()
        else:
            status = how.status
            body = _gzip_zeros(how.decoded_mib)
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream" if stream and status == 200
                         else "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            pass  # the client gave up


@functools.lru_cache(maxsize=4)
def _gzip_zeros(mebibytes: int) -> bytes:
    """A gzip stream of `mebibytes` MiB of zeros (~1 KB per MiB), made once per size."""
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(mebibytes)) + packer.flush()


MAX_REQUEST_BYTES = 64 * 1024 * 1024  # a fake server for tests: refuse absurd bodies


def _error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def _error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _completion(result: GenerateResult, cid: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant",
                               "content": result.content if result.content or not result.tool_calls
                               else None}
    if result.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in result.tool_calls]
    return {"id": cid, "object": "chat.completion", "created": int(time.time()),
            "model": result.model, "choices": [
                {"index": 0, "message": message, "finish_reason": result.finish_reason or "stop"}],
            "usage": result.usage}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: FakeOpenAIServer


@dataclass(slots=True)
class RecordedRequest:
    """One HTTP request the fake server got."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    time: float = field(default_factory=time.time)


class FakeOpenAIServer:
    """A loopback OpenAI-compatible server with scripted replies; use it as a context manager.

    Args:
        replies: script items for `POST /v1/chat/completions`, served in order.
        models: what `GET /v1/models` lists.
        default: an item served once the script is used up (None: a 400 error saying so).
        port: 0 picks a free port.

    `requests` holds the JSON body of every chat-completions request; `log` holds every HTTP
    request (GET /v1/models included) with its headers.
    """

    def __init__(self, replies: Iterable[ScriptItem] = (), *, models: Sequence[str] = ("test-model",),
                 default: ScriptItem | None = None, host: str = "127.0.0.1", port: int = 0,
                 on_request: Callable[[RecordedRequest], None] | None = None) -> None:
        self.models = list(models)
        self._script = _Script(replies, default)
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.log: list[RecordedRequest] = []
        self.on_request = on_request

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        if self._server is None:
            self._server = _Server((self._host, self._port), _Handler)
            self._server.owner = self
            self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                            name="jarvis-fake-openai", kwargs={"poll_interval": 0.05})
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    close = stop

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- addresses ---------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeOpenAIServer is not started; use start() or `with`")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT (what OLLAMA_HOST / VLLM_HOST / ... take)."""
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:PORT/v1 (what OPENAI_BASE_URL takes)."""
        return self.url + "/v1"

    # --- script and records ------------------------------------------------------------------
    def add(self, *replies: ScriptItem) -> None:
        """Append script items."""
        self._script.add(*replies)

    @property
    def remaining(self) -> int:
        return self._script.remaining

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The body of every chat-completions request so far, in order."""
        return self._script.requests

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> bool:
        """Block until `count` chat-completions requests have arrived (False on timeout)."""
        return self._script.wait_for(count, timeout)

    def next_id(self) -> str:
        return f"chatcmpl-{next(self._ids)}"

    def _log(self, handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        record = RecordedRequest(handler.command, handler.path, dict(handler.headers.items()), body)
        with self._lock:
            self.log.append(record)
        if self.on_request is not None:
            self.on_request(record)


# --- command line --------------------------------------------------------------------------------

SCRIPT_KEYS = frozenset({"content", "tool_calls", "usage", "finish_reason", "model",
                         "status", "error", "retry_after", "disconnect"})


def _load_script(path: str) -> list[Any]:
    """The replies in a --script file; a problem is one line naming the file (SystemExit)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise SystemExit(f"error: cannot read --script {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise SystemExit(f"error: --script {path} is not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise SystemExit(f"error: --script {path}: expected a JSON list of replies")
    for number, item in enumerate(data, 1):
        if isinstance(item, str):
            continue
        if not isinstance(item, dict):
            raise SystemExit(f"error: --script {path}: reply {number} is a "
                             f"{type(item).__name__}; use a string or an object")
        unknown = sorted(set(item) - SCRIPT_KEYS)
        if unknown:
            raise SystemExit(f"error: --script {path}: reply {number} has unknown key(s) "
                             f"{', '.join(unknown)}; valid: {', '.join(sorted(SCRIPT_KEYS))}")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jarvis.testing serve ...`: run a FakeOpenAIServer until interrupted."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m jarvis.testing",
                                     description="Run jarvis's fake OpenAI-compatible server.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve scripted replies on a loopback port")
    serve.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    serve.add_argument("--reply", action="append", default=[], help="a text reply (repeatable)")
    serve.add_argument("--script", help="a JSON file with a list of replies")
    serve.add_argument("--default", help="text served once the script is used up")
    serve.add_argument("--model", action="append", default=[], help="a model to list")
    serve.add_argument("--record", help="append each request body as a JSON line to this file")
    args = parser.parse_args(argv)

    items: list[Any] = list(args.reply)
    if args.script:
        items.extend(_load_script(args.script))
    record_lock = threading.Lock()

    def record(req: RecordedRequest) -> None:
        if args.record:
            with record_lock, open(args.record, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"method": req.method, "path": req.path, "body": req.body}) + "\n")

    server = FakeOpenAIServer(items, models=args.model or ("test-model",), default=args.default,
                              port=args.port, on_request=record)
    with server:
        print(server.base_url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
