"""Engine replies that never end well: `[engine] timeout` bounds the whole request and
`[engine] max_response_bytes` the reply, on both transports, streamed or not, and `jarvis ask`
ends with one clear line. The loopback server misbehaves on purpose (jarvis.testing.Misbehave)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from jarvis.engine.openai_compat import OpenAICompatEngine
from jarvis.errors import EngineError
from jarvis.testing import FakeOpenAIServer, Misbehave

TIMEOUT = 1.0
BUDGET = TIMEOUT + 2.0  # the deadline plus scheduling slack on a busy machine
CLIENTS = ["http", "openai"]


def engine_for(server: FakeOpenAIServer, client: str, **options) -> OpenAICompatEngine:
    options.setdefault("timeout", TIMEOUT)
    return OpenAICompatEngine("vllm", server.url, model="test-model", max_retries=0,
                              client=client, **options)


def ask(engine: OpenAICompatEngine, stream: bool) -> str:
    messages = [{"role": "user", "content": "hi"}]
    if not stream:
        return engine.generate(messages).content
    text = []
    for chunk in engine.stream(messages):
        if chunk.delta:
            text.append(chunk.delta)
    return "".join(text)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("kind", "stream"), [("keepalive", True), ("empty_deltas", True),
                                              ("trickle", True), ("keepalive", False),
                                              ("trickle", False), ("slow_headers", True),
                                              ("slow_headers", False)])
def test_a_reply_that_never_ends_is_cut_at_the_timeout(client, kind, stream):
    # 0.05 s between bytes: every socket read succeeds, so only a whole-call deadline helps.
    with FakeOpenAIServer([Misbehave(kind, interval=0.05, seconds=30)]) as server:
        engine = engine_for(server, client)
        engine.transport  # noqa: B018 - built (openai imported) before the clock starts
        started = time.monotonic()
        with pytest.raises(EngineError) as caught:
            ask(engine, stream)
        took = time.monotonic() - started
        engine.close()
    assert TIMEOUT * 0.9 <= took < BUDGET, took
    message = str(caught.value)
    assert "did not answer in time" in message and "no complete reply within 1 s" in message
    assert "[engine] timeout" in message


@pytest.mark.parametrize("client", CLIENTS)
def test_a_slow_but_complete_reply_within_the_timeout_is_fine(client):
    # The trickled answer is ~60 bytes (streamed) at 5 ms a byte: well inside 3 s.
    with FakeOpenAIServer([Misbehave("trickle", interval=0.005)]) as server:
        engine = engine_for(server, client, timeout=5.0)
        assert ask(engine, stream=True) == "slow answer"
        engine.close()


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [True, False])
def test_an_endless_reply_is_cut_at_max_response_bytes(client, stream):
    limit = 256 * 1024
    with FakeOpenAIServer([Misbehave("flood", seconds=30)]) as server:
        engine = engine_for(server, client, timeout=30.0, max_response_bytes=limit)
        started = time.monotonic()
        with pytest.raises(EngineError) as caught:
            ask(engine, stream)
        took = time.monotonic() - started
        engine.close()
    assert took < 10, took
    message = str(caught.value)
    assert f"larger than {limit} bytes" in message and "[engine] max_response_bytes" in message
    assert ("streamed reply" in message) == stream


@pytest.mark.parametrize("client", CLIENTS)
def test_endless_tool_call_arguments_in_small_deltas_are_cut_in_linear_time(client):
    # 16 MB of 64-byte argument deltas: joining them piece by piece (not re-copying the whole
    # argument string per delta) reaches the byte cap in well under a second of work.
    limit = 16 * 1024 * 1024
    with FakeOpenAIServer([Misbehave("arg_flood", seconds=60, chunk=64)]) as server:
        engine = engine_for(server, client, timeout=60.0, max_response_bytes=limit)
        started = time.monotonic()
        with pytest.raises(EngineError) as caught:
            ask(engine, stream=True)
        took = time.monotonic() - started
        engine.close()
    assert f"larger than {limit} bytes" in str(caught.value), caught.value
    assert took < 20, took


def test_max_response_bytes_comes_from_config(monkeypatch):
    from jarvis.core.config import load_config
    from jarvis.engine.discovery import get_engine

    config = load_config(overrides={"engine.max_response_bytes": 4096, "engine.timeout": 3})
    with FakeOpenAIServer() as server:
        engine = get_engine(config, "vllm", server.url, "test-model", default_client="http")
        assert engine.max_response_bytes == 4096 and engine.timeout == 3
        engine.close()


# --- jarvis ask as a real subprocess -----------------------------------------------------------

def run_ask(cli_env, tmp_path, server, *args, config="timeout = 1\n"):
    (tmp_path / "config.toml").write_text(
        f'[engine]\ndefault = "vllm"\nmodel = "test-model"\nmax_retries = 0\n'
        f'{config}[engine.hosts]\nvllm = "{server.url}"\n[runs]\nenabled = false\n')
    env = dict(cli_env, JARVIS_CONFIG=str(tmp_path / "config.toml"))
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", *args, "hello"], env=env,
                         text=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    return out, time.monotonic() - started


@pytest.mark.parametrize(("kind", "args"), [("keepalive", ()), ("empty_deltas", ()),
                                            ("trickle", ()), ("trickle", ("--no-stream",))])
def test_jarvis_ask_ends_with_one_line_when_the_engine_stalls(cli_env, tmp_path, kind, args):
    with FakeOpenAIServer([Misbehave(kind, interval=0.05, seconds=30)]) as server:
        out, took = run_ask(cli_env, tmp_path, server, *args)
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("Error: ") and "did not answer in time" in lines[0]
    assert took < 15, took  # start-up (imports) plus the 1 s deadline


@pytest.mark.parametrize("args", [(), ("--no-stream",)])
def test_jarvis_ask_ends_with_one_line_on_an_oversized_reply(cli_env, tmp_path, args):
    with FakeOpenAIServer([Misbehave("flood", seconds=30)]) as server:
        out, _ = run_ask(cli_env, tmp_path, server, *args,
                         config="timeout = 30\nmax_response_bytes = 1048576\n")
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "MemoryError" not in out.stderr, out.stderr
    assert "larger than 1048576 bytes" in lines[0]


def test_the_async_client_is_bounded_too():
    import asyncio

    with FakeOpenAIServer([Misbehave("keepalive", interval=0.05, seconds=30)]) as server:
        engine = engine_for(server, "openai")
        engine.async_client  # noqa: B018 - built (openai imported) before the clock starts
        started = time.monotonic()
        with pytest.raises(EngineError, match="no complete reply within 1 s"):
            asyncio.run(engine.agenerate([{"role": "user", "content": "hi"}]))
        took = time.monotonic() - started
        asyncio.run(engine.aclose())
    assert took < BUDGET, took


def test_the_async_client_caps_the_reply_size_too():
    import asyncio

    limit = 256 * 1024
    with FakeOpenAIServer([Misbehave("flood", seconds=30, chunk=4096)]) as server:
        engine = engine_for(server, "openai", timeout=30.0, max_response_bytes=limit)
        started = time.monotonic()
        with pytest.raises(EngineError) as caught:
            asyncio.run(engine.agenerate([{"role": "user", "content": "hi"}]))
        took = time.monotonic() - started
        asyncio.run(engine.aclose())
    assert f"larger than {limit} bytes" in str(caught.value), caught.value
    assert took < 10, took  # the cap, well before the 30 s timeout (was 5 s, and bound 5 s)


def test_misbehaviour_can_be_scripted_as_json_for_a_server_in_another_process():
    # The dict form is what `python -m jarvis.testing serve --script FILE` reads.
    with FakeOpenAIServer([{"misbehave": "trickle", "interval": 0.001}]) as server:
        engine = engine_for(server, "http", timeout=10.0)
        assert ask(engine, stream=False) == "slow answer"
        engine.close()
    with pytest.raises(ValueError, match="unknown misbehaviour"):
        Misbehave("sulk")


@pytest.mark.parametrize("client", CLIENTS)
def test_listing_models_is_bounded_too(client):
    # A raw-socket server: any request gets headers, then one space every 50 ms.
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
                while not stop.wait(0.05):
                    conn.sendall(b" ")
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    engine = OpenAICompatEngine("vllm", f"http://127.0.0.1:{listener.getsockname()[1]}",
                                timeout=TIMEOUT, max_retries=0, client=client)
    engine.transport  # noqa: B018 - built (openai imported) before the clock starts
    started = time.monotonic()
    try:
        with pytest.raises(EngineError, match="did not answer in time"):
            engine.list_models()
    finally:
        stop.set()
        engine.close()
        thread.join(5)
        listener.close()
    assert time.monotonic() - started < BUDGET + 1


class _ErrorFlood:
    """A raw-socket engine that answers 500 and then an error body that never ends; it
    records how much the client read before it hung up."""

    def __init__(self, seconds: float = 30.0) -> None:
        import socket
        import threading

        self.sent = 0
        self.closed = threading.Event()
        self.seconds = seconds
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            while len(body) < length:
                body += conn.recv(65536)
            piece = b"x" * (1 << 20)
            end = time.monotonic() + self.seconds
            try:
                conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\n"
                             b"Connection: close\r\n\r\n" + b'{"error": {"message": "')
                while time.monotonic() < end:
                    conn.sendall(piece)
                    self.sent += len(piece)
            except OSError:
                pass  # the client hung up: what the test waits for
            self.closed.set()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_an_endless_error_body_is_not_read_forever(client):
    from waiting import wait_for

    limit = 4 * 1024 * 1024
    server = _ErrorFlood()
    try:
        engine = OpenAICompatEngine("vllm", server.url, model="test-model", max_retries=0,
                                    client=client, timeout=5.0, max_response_bytes=limit)
        with pytest.raises(EngineError):
            engine.generate([{"role": "user", "content": "hi"}])
        # Nothing in the process keeps reading it (the openai client reads an error body
        # itself, on the request's helper thread): the connection is dropped, not drained.
        wait_for(server.closed.is_set, timeout=10, what="the client to hang up")
        assert server.sent < 64 * limit, server.sent
        engine.close()
    finally:
        server.close()


def test_trickled_headers_leave_no_request_thread_behind():
    import threading

    from waiting import wait_for

    def helpers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "jarvis-engine-request"]

    with FakeOpenAIServer([Misbehave("slow_headers", interval=0.05, seconds=60)] * 3) as server:
        engine = engine_for(server, "openai")
        for _ in range(3):
            with pytest.raises(EngineError, match="did not answer in time"):
                ask(engine, stream=False)
        # The openai client's request thread, which the caller stopped waiting for at the
        # deadline, ends too (its socket is shut), rather than one per call piling up.
        wait_for(lambda: not helpers(), timeout=15, what="the request threads to end")
        engine.close()


@pytest.mark.parametrize("status", [500, 200])
@pytest.mark.parametrize("stream", [False, True])
def test_a_gzip_bomb_is_cut_at_max_response_bytes_after_decoding(status, stream):
    # 256 KB on the wire, 256 MiB decoded. The openai client reads an error body whole
    # itself, decoded by httpx: the budget counted the wire bytes, so 1 MB became 1 GB in
    # memory (a 64 MB one, 64 GB). Now the body is decoded under the budget.
    limit = 1024 * 1024
    with FakeOpenAIServer([Misbehave("gzip_bomb", status=status, decoded_mib=256)]) as server:
        engine = engine_for(server, "openai", timeout=20.0, max_response_bytes=limit)
        started = time.monotonic()
        with pytest.raises(EngineError) as caught:
            ask(engine, stream)
        took = time.monotonic() - started
        engine.close()
    assert f"larger than {limit} bytes" in str(caught.value), str(caught.value)[:300]
    assert took < 10, took


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_gzip_encoded_answer_is_still_read(client, stream):
    with FakeOpenAIServer([Misbehave("gzip")]) as server:
        engine = engine_for(server, client, timeout=10.0)
        if client == "http":  # the built-in client asks for no encoding: an honest error
            with pytest.raises(EngineError):
                ask(engine, stream)
        else:
            assert ask(engine, stream) == "compressed answer"
        engine.close()


def test_the_async_client_decodes_under_the_budget_too():
    import asyncio

    limit = 1024 * 1024
    with FakeOpenAIServer([Misbehave("gzip_bomb", decoded_mib=256)]) as server:
        engine = engine_for(server, "openai", timeout=20.0, max_response_bytes=limit)

        async def call():
            return await engine.async_client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "hi"}])

        with pytest.raises(Exception, match=f"larger than {limit} bytes"):
            asyncio.run(call())
        engine.close()
