"""FakeOpenAIServer: a real loopback HTTP server speaking the OpenAI chat-completions protocol
with scripted replies (plain and SSE streaming, tool calls, errors, dropped connections and
misbehaviour), recording every request."""

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

from jarvis.engine.base import GenerateResult
from jarvis.testing.script import (
    Disconnect,
    HTTPFailure,
    Misbehave,
    ScriptItem,
    _Exhausted,
    _Script,
    reply,
    response_format_problem,
    split_text,
)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: headers and body leave in two writes, and with Nagle's algorithm the body
    # waited for the client's delayed ACK of the headers: ~40 ms per answer on a kept-alive
    # connection.
    disable_nagle_algorithm = True

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
        if "response_format" in body:  # structured answers: checked as the OpenAI API does
            problem = response_format_problem(body["response_format"])
            if problem:
                owner._script.record(body)
                self._send_json(400, _error_body(problem, "invalid_request_error"))
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

    def reset(self, replies: Iterable[ScriptItem] = (), default: ScriptItem | None = None) -> None:
        """A new script (and an empty record of requests): one server for many cases."""
        self._script = _Script(replies, default)

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
