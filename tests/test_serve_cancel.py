"""`jarvis serve`: a client that goes away before its answer cancels its run. A real server
(uvicorn on a loopback port, in a thread), the loopback OpenAI-compatible engine holding its
first reply until the test releases it, a raw-socket client that disconnects mid-run, and the
real run log on disk."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_for

from jarvis.core.config import load_config
from jarvis.runlog import RunLog
from jarvis.server import ServerThread, ServeSettings, build_app
from jarvis.testing import FakeOpenAIServer, reply, tool_call


class HeldEngine:
    """The engine's script: the first reply (a tool call, so the run would go on to the tool
    and a second engine request) waits until `release` is set."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()

    def first(self, request: dict[str, Any]) -> Any:
        self.arrived.set()
        self.release.wait(30)
        return reply(tool_calls=[tool_call("calculator", {"expression": "6*7"})])

    def script(self) -> list[Any]:
        return [self.first, "The answer is 42."]


@contextlib.contextmanager
def serving_with_run_log(fake: FakeOpenAIServer, runs_db: Path) -> Iterator[ServerThread]:
    from jarvis.sdk import Jarvis
    from jarvis.tools.catalog import build_tools

    config = load_config(overrides={"engine.max_retries": 0, "runs.enabled": True,
                                    "runs.db_path": str(runs_db), "memory.enabled": False})
    jarvis = Jarvis(config=config, engine="vllm", host=fake.url, model="test-model")
    app = build_app(ServeSettings(), tools=build_tools(["think", "calculator"]), jarvis=jarvis)
    try:
        with ServerThread(app) as server:
            yield server
    finally:
        jarvis.close()


def send_request(server: ServerThread, body: dict[str, Any]) -> socket.socket:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n"
                 + f"Host: {host}:{port}\r\nContent-Type: application/json\r\n"
                   f"Authorization: Bearer {server.token}\r\n"
                   f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    log = RunLog(path)
    try:
        return log.list(limit=10)
    finally:
        log.close()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
def test_a_client_that_disconnects_cancels_its_run(tmp_path, caplog, stream):
    caplog.set_level(logging.INFO, logger="jarvis.server")
    held = HeldEngine()
    runs_db = tmp_path / "runs.db"
    with FakeOpenAIServer(held.script()) as fake, serving_with_run_log(fake, runs_db) as server:
        client = send_request(server, {
            "model": "orchestrator", "stream": stream,
            "messages": [{"role": "user", "content": "What is 6*7?"}]})
        try:
            if stream:  # the stream has begun: the role chunk came before the engine answered
                seen = b""
                while b"data: " not in seen:
                    piece = client.recv(65536)
                    assert piece, f"the server closed the stream: {seen!r}"
                    seen += piece
            assert held.arrived.wait(20), "the run never reached the engine"
        finally:
            client.close()  # the client goes away while the engine still works on its reply
        wait_for(lambda: any("went away before its answer" in r.getMessage()
                             for r in caplog.records), what="the server to see the disconnect")
        held.release.set()  # the engine answers (a tool call); the run must stop right there
        (run,) = wait_for(lambda: [r for r in runs(runs_db) if r["status"] != "running"] or None,
                          timeout=20, what="the run to be recorded")
        requests = len(fake.requests)
    assert run["status"] == "cancelled", run
    assert run["source"] == "serve" and run["query"] == "What is 6*7?"
    assert requests == 1  # no second engine request after the disconnect
    assert run["tool_calls"] == 0  # and the tool the reply asked for never ran


def test_a_client_that_stays_gets_its_answer(tmp_path):
    # The watcher must not cancel a run whose client is still there.
    runs_db = tmp_path / "runs.db"
    script = [reply(tool_calls=[tool_call("calculator", {"expression": "6*7"})]),
              "The answer is 42."]
    with FakeOpenAIServer(script) as fake, serving_with_run_log(fake, runs_db) as server:
        client = send_request(server, {
            "model": "orchestrator", "messages": [{"role": "user", "content": "What is 6*7?"}]})
        with client, client.makefile("rb") as answer:
            head = answer.readline()
            length = 0
            while (line := answer.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = json.loads(answer.read(length))
    assert head.startswith(b"HTTP/1.1 200")
    assert body["choices"][0]["message"]["content"] == "The answer is 42."
    assert len(fake.requests) == 2
    (run,) = runs(runs_db)
    assert run["status"] == "ok"
