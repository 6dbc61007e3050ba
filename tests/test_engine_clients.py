"""Which HTTP client an engine uses: `auto` picks the built-in one where it sends what the openai
package would, and the built-in client handles redirects as the openai package does (a
same-server 307/308 is followed with the same request) or says where they point."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jarvis import Jarvis
from jarvis.engine.openai_compat import OpenAICompatEngine
from jarvis.engine.transport import auto_client
from jarvis.errors import EngineError
from jarvis.testing import FakeOpenAIServer

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def no_proxy_env(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "https_proxy",
                 "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_auto_picks_the_builtin_client_only_where_it_is_equivalent(no_proxy_env):
    assert auto_client("http://127.0.0.1:8000/v1") == "http"
    assert auto_client("http://gpu-box.lan:11434/v1") == "http"
    assert auto_client("https://api.openai.com/v1") == "openai"  # TLS: openai's CA bundle
    assert auto_client("http://user:secret@host:8000/v1") == "openai"  # basic auth from URL
    assert auto_client("http://host:8000/v1?key=abc") == "openai"
    no_proxy_env.setenv("NO_PROXY", "localhost")  # says where no proxy goes: changes nothing
    assert auto_client("http://127.0.0.1:8000/v1") == "http"
    no_proxy_env.setenv("HTTPS_PROXY", "http://proxy:3128")  # only for https URLs
    assert auto_client("http://127.0.0.1:8000/v1") == "http"
    no_proxy_env.setenv("Http_Proxy", "http://proxy:3128")  # any case, as httpx reads it
    assert auto_client("http://127.0.0.1:8000/v1") == "openai"
    no_proxy_env.delenv("Http_Proxy")
    no_proxy_env.setenv("all_proxy", "socks5://proxy:1080")
    assert auto_client("http://127.0.0.1:8000/v1") == "openai"


def test_the_sdk_and_serve_default_is_the_builtin_client_on_a_plain_http_server(no_proxy_env):
    with FakeOpenAIServer(["first", "second"]) as fake:
        with Jarvis(engine="vllm", host=fake.url, model="test-model") as j:
            assert j.ask("hi", context=False) == "first"
            assert j.engine.client_kind == "http"
            assert fake.log[-1].headers.get("User-Agent") == "jarvis"
            # An SDK user who reaches for the openai client still gets one, on the same server.
            reply = j.engine.client.chat.completions.create(model="test-model", messages=USER)
            assert reply.choices[0].message.content == "second"
        explicit = OpenAICompatEngine("vllm", fake.url, model="test-model", client="http")
        with pytest.raises(EngineError, match="built-in HTTP client"):
            explicit.client  # noqa: B018 - asked for the built-in client by name: no openai one
        explicit.close()


class _Redirecting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    status = 308
    location = "/moved/v1/chat/completions"
    bodies: list[Any] = []

    def log_message(self, *args: Any) -> None:
        return None

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.startswith("/moved/"):
            self.send_response(self.status)
            self.send_header("Location", self.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        type(self).bodies.append(json.loads(body))
        data = json.dumps({"id": "x", "object": "chat.completion", "model": "test-model",
                           "choices": [{"index": 0, "finish_reason": "stop", "message": {
                               "role": "assistant", "content": "moved answer"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def redirecting():
    class Handler(_Redirecting):
        bodies: list[Any] = []

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Handler, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("client", ["http", "openai"])
def test_a_same_server_308_is_followed_with_the_same_request(redirecting, client):
    handler, url = redirecting
    engine = OpenAICompatEngine("vllm", url, model="test-model", client=client, max_retries=0)
    try:
        assert engine.generate(USER).content == "moved answer"
        assert handler.bodies[-1]["messages"] == USER  # the POST body went along
    finally:
        engine.close()


@pytest.mark.parametrize(("status", "location"), [(301, "/moved/v1/chat/completions"),
                                                  (307, "http://elsewhere.invalid/v1")])
def test_other_redirects_are_an_error_naming_where_they_point(redirecting, status, location):
    handler, url = redirecting
    handler.status, handler.location = status, location
    engine = OpenAICompatEngine("vllm", url, model="test-model", client="http", max_retries=0)
    try:
        with pytest.raises(EngineError, match=f"HTTP {status}.*redirects to '{location}'"):
            engine.generate(USER)
        assert handler.bodies == []
    finally:
        engine.close()
