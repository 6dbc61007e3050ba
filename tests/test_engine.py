"""OpenAICompatEngine against the loopback OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from ports import closed_port

from jarvis.engine.backends import BACKENDS, base_url
from jarvis.engine.base import InferenceEngine
from jarvis.engine.openai_compat import OpenAICompatEngine
from jarvis.errors import EngineError
from jarvis.testing import Disconnect, FakeOpenAIServer, HTTPFailure, reply, tool_call

CALC = {"type": "function", "function": {"name": "calculator", "description": "math",
                                         "parameters": {"type": "object", "properties": {}}}}
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["openai", "http"])
def client(request) -> str:
    """Engine tests run with both transports: the openai package and the built-in client."""
    return request.param


def _engine(server: FakeOpenAIServer, client: str, backend: str = "vllm",
            **kwargs) -> OpenAICompatEngine:
    kwargs.setdefault("retry_backoff", 0.01)
    kwargs["client"] = client
    return OpenAICompatEngine(backend, server.url if backend != "openai" else server.base_url,
                              model="m", api_key="k", **kwargs)


def test_generate_returns_tool_calls_usage_and_sends_tools(client):
    with FakeOpenAIServer([reply(tool_calls=[tool_call("calculator", {"expression": "1+1"}, "c9")],
                                 usage={"prompt_tokens": 11, "completion_tokens": 4})]) as server:
        engine = _engine(server, client)
        assert isinstance(engine, InferenceEngine)
        result = engine.generate(USER, tools=[CALC], temperature=0.2, max_tokens=50)
        engine.close()
    assert result.tool_calls[0].id == "c9"
    assert result.tool_calls[0].name == "calculator"
    assert json.loads(result.tool_calls[0].arguments) == {"expression": "1+1"}
    assert result.usage == {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
    assert result.finish_reason == "tool_calls"
    body = server.requests[0]
    assert body["tools"] == [CALC] and body["model"] == "m"
    assert body["temperature"] == 0.2 and body["max_tokens"] == 50


def test_openai_backend_uses_max_completion_tokens_and_base_url_as_given(client):
    with FakeOpenAIServer(["ok"]) as server:
        engine = _engine(server, client, backend="openai")
        assert engine.base_url == server.base_url
        engine.generate(USER, max_tokens=9)
        engine.close()
    assert server.requests[0]["max_completion_tokens"] == 9
    assert "max_tokens" not in server.requests[0]


def test_stream_yields_deltas_then_the_full_result_with_tool_calls_and_usage(client):
    calls = [tool_call("calculator", {"expression": "6*7"}), tool_call("think", {"thought": "x"})]
    with FakeOpenAIServer([reply("Let me compute that", tool_calls=calls)]) as server:
        engine = _engine(server, client)
        chunks = list(engine.stream(USER, tools=[CALC]))
        engine.close()
    deltas = [c.delta for c in chunks if c.delta]
    assert len(deltas) > 1 and "".join(deltas) == "Let me compute that"
    result = chunks[-1].result
    assert result is not None and result.content == "Let me compute that"
    assert [c.name for c in result.tool_calls] == ["calculator", "think"]
    assert json.loads(result.tool_calls[0].arguments) == {"expression": "6*7"}
    assert result.usage["total_tokens"] > 0  # asked for with stream_options.include_usage
    assert server.requests[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("failure", [HTTPFailure(503, "overloaded"), HTTPFailure(500, "boom"),
                                     HTTPFailure(429, "slow down", retry_after=0), Disconnect()])
def test_transient_failures_are_retried(failure, client):
    with FakeOpenAIServer([failure, failure, "finally"]) as server:
        engine = _engine(server, client, max_retries=3)
        assert engine.generate(USER).content == "finally"
        engine.close()
    assert len(server.requests) == 3


def test_retries_are_bounded_and_the_final_error_is_clear(client):
    with FakeOpenAIServer(default=HTTPFailure(503, "overloaded")) as server:
        engine = _engine(server, client, max_retries=2)
        with pytest.raises(EngineError, match=r"HTTP 503 \(overloaded\) after 3 attempts"):
            engine.generate(USER)
        engine.close()
    assert len(server.requests) == 3


def test_retry_backoff_grows(client):
    with FakeOpenAIServer([HTTPFailure(500), HTTPFailure(500), "ok"]) as server:
        engine = _engine(server, client, max_retries=3, retry_backoff=0.05)
        start = time.perf_counter()
        engine.generate(USER)
        elapsed = time.perf_counter() - start
        engine.close()
    assert elapsed >= 0.05 + 0.10  # 0.05 s, then 0.10 s


@pytest.mark.parametrize("failure", [
    HTTPFailure(400, "registry.ollama.ai/library/gemma:2b does not support tools"),
    HTTPFailure(500, "tools param requires --jinja flag"),
])
def test_engine_rejecting_tools_is_an_error_not_a_silent_retry(failure, client):
    with FakeOpenAIServer([failure, "an answer without tools"]) as server:
        engine = _engine(server, client)
        with pytest.raises(EngineError, match="rejected the tools") as info:
            engine.generate(USER, tools=[CALC])
        engine.close()
    assert "react" in str(info.value)
    assert len(server.requests) == 1  # never re-sent without the tools
    assert server.remaining == 1


def test_client_errors_are_not_retried_and_name_the_fix(client):
    failures = [HTTPFailure(404, "model 'nope' not found"), HTTPFailure(401, "bad key")]
    with FakeOpenAIServer(failures) as server:
        engine = _engine(server, client)
        with pytest.raises(EngineError, match=r"HTTP 404.*-m/--model"):
            engine.generate(USER)
        with pytest.raises(EngineError, match=r"HTTP 401.*VLLM_API_KEY"):
            engine.generate(USER)
        engine.close()
    assert len(server.requests) == 2


def test_unreachable_engine_fails_fast_with_how_to_start_it(client):
    engine = OpenAICompatEngine("ollama", f"http://127.0.0.1:{closed_port()}", model="m",
                                retry_backoff=30.0, client=client)
    engine.transport  # noqa: B018 - build the client (and import openai) before timing
    start = time.perf_counter()
    with pytest.raises(EngineError, match=r"cannot reach ollama.*ollama serve.*OLLAMA_HOST"):
        engine.generate(USER)
    # Refused connections are not retried (a retry would wait 30 s); room for a loaded machine.
    assert time.perf_counter() - start < 10


def test_list_models_default_model_and_health(client):
    with FakeOpenAIServer(models=["first", "second"]) as server:
        compatible = OpenAICompatEngine("openai", server.base_url, client=client, api_key="k")
        assert compatible.default_model() == "first"  # not api.openai.com: ask the server
        compatible.close()
        engine = OpenAICompatEngine("lmstudio", server.url, client=client)
        assert engine.list_models() == ["first", "second"]
        assert engine.default_model() == "first"
        assert engine.health() is True
        engine.close()
    assert OpenAICompatEngine("lmstudio", f"http://127.0.0.1:{closed_port()}").health() is False


def test_missing_model_and_missing_openai_key_are_errors(monkeypatch, client):
    with FakeOpenAIServer(["x"]) as server:
        engine = OpenAICompatEngine("vllm", server.url, client=client)
        with pytest.raises(EngineError, match="no model"):
            engine.generate(USER)
    with pytest.raises(EngineError, match="OPENAI_API_KEY"):
        OpenAICompatEngine("openai")


def test_async_generate(client):
    with FakeOpenAIServer([HTTPFailure(502, "bad gateway"), "async hello"]) as server:
        engine = _engine(server, client)

        async def main():
            try:
                return await engine.agenerate(USER)
            finally:
                await engine.aclose()

        result = asyncio.run(main())
    assert result.content == "async hello"
    assert len(server.requests) == 2


def test_host_spellings_become_base_urls():
    assert base_url(BACKENDS["ollama"], "localhost:11434") == "http://localhost:11434/v1"
    assert base_url(BACKENDS["vllm"], "http://h:8000/") == "http://h:8000/v1"
    assert base_url(BACKENDS["vllm"], "http://h:8000/v1") == "http://h:8000/v1"
    assert base_url(BACKENDS["openai"], "https://example.com/api") == "https://example.com/api"


def test_engine_uses_the_requested_client(client):
    with FakeOpenAIServer(["x"]) as server:
        engine = _engine(server, client)
        engine.generate(USER)
        assert engine.client_kind == client
        user_agent = server.log[-1].headers.get("User-Agent", "")
        assert (user_agent == "jarvis") is (client == "http")
        engine.close()


def test_http_client_reuses_connections_and_survives_a_closed_keepalive():
    with FakeOpenAIServer(["one", Disconnect(), "three"]) as server:
        engine = OpenAICompatEngine("vllm", server.url, model="m", client="http",
                                    retry_backoff=0.01)
        assert engine.generate(USER).content == "one"
        assert engine.generate(USER).content == "three"  # dropped once, retried
        engine.close()


class _NotOpenAI:
    """A real loopback server that answers every request with the same non-OpenAI body."""

    def __init__(self, body: bytes, content_type: str) -> None:
        import http.server
        import threading

        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

        self.body = body
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("body,ctype", [
    (b"<html>not an API</html>", "text/html"),
    (b'data: 5\n\ndata: [DONE]\n\n', "text/event-stream"),
    (b'data: {"choices": [{"delta": "text"}]}\n\n', "text/event-stream"),
])
def test_a_reply_that_is_not_a_stream_is_an_error_not_an_empty_answer(body, ctype, client):
    server = _NotOpenAI(body, ctype)
    try:
        engine = OpenAICompatEngine("vllm", server.url, model="m", api_key="k", client=client,
                                    max_retries=0)
        with pytest.raises(EngineError, match="stream"):
            list(engine.stream(USER))
        engine.close()
    finally:
        server.close()


@pytest.mark.parametrize("host", ["not a url", "http://h:abc", "ftp://example", "http://:80"])
def test_unusable_host_is_a_config_error(host):
    from jarvis.errors import ConfigError

    with pytest.raises(ConfigError, match="not a usable server address"):
        OpenAICompatEngine("vllm", host, model="m", client="http")


def _completion_with(message: object, usage: object = None) -> bytes:
    body = {"id": "x", "model": "m", "usage": usage,
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
    return json.dumps(body).encode()


@pytest.mark.parametrize("message", [
    "hello",
    {"role": "assistant", "content": None, "tool_calls": "oops"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
])
def test_malformed_messages_are_engine_errors_not_tracebacks_or_empty_answers(message, client):
    server = _NotOpenAI(_completion_with(message), "application/json")
    try:
        engine = OpenAICompatEngine("vllm", server.url, model="m", api_key="k", client=client,
                                    max_retries=0)
        with pytest.raises(EngineError, match="malformed message|names no function"):
            engine.generate(USER)
        engine.close()
    finally:
        server.close()


def test_content_parts_and_garbled_usage_are_read_sensibly(client):
    message = {"role": "assistant", "content": [{"type": "text", "text": "hi "}, "there"]}
    server = _NotOpenAI(_completion_with(message, {"prompt_tokens": "a", "completion_tokens": -5,
                                                   "total_tokens": True}), "application/json")
    try:
        engine = OpenAICompatEngine("vllm", server.url, model="m", api_key="k", client=client)
        result = engine.generate(USER)
        assert result.content == "hi there"
        assert result.usage == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        engine.close()
    finally:
        server.close()


def test_a_streamed_tool_call_without_a_name_is_an_engine_error(client):
    chunk = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "function": {"arguments": "{}"}}]}}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    server = _NotOpenAI(body, "text/event-stream")
    try:
        engine = OpenAICompatEngine("vllm", server.url, model="m", api_key="k", client=client,
                                    max_retries=0)
        with pytest.raises(EngineError, match="names no function"):
            list(engine.stream(USER))
        engine.close()
    finally:
        server.close()


def test_deeply_nested_json_from_the_server_is_an_engine_error(client):
    for body, ctype, call in [(b"[" * 100_000, "application/json", "generate"),
                              (b"data: " + b"[" * 100_000 + b"\n\n", "text/event-stream", "stream")]:
        server = _NotOpenAI(body, ctype)
        try:
            engine = OpenAICompatEngine("vllm", server.url, model="m", api_key="k", client=client,
                                        max_retries=0)
            with pytest.raises(EngineError):
                list(engine.stream(USER)) if call == "stream" else engine.generate(USER)
            engine.close()
        finally:
            server.close()
