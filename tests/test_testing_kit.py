"""jarvis.testing: the scripted engine and the loopback OpenAI-compatible server."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import urllib.request

import pytest

from jarvis.errors import EngineError
from jarvis.testing import Disconnect, FakeOpenAIServer, HTTPFailure, ScriptedEngine, reply, tool_call


def _post(server: FakeOpenAIServer, body: dict) -> tuple[int, dict | str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    if resp.getheader("Content-Type") == "text/event-stream":
        return resp.status, raw
    return resp.status, json.loads(raw)


def test_scripted_engine_replays_and_records():
    engine = ScriptedEngine([reply(tool_calls=[tool_call("calculator", {"expression": "1+1"})]),
                             "done"])
    first = engine.generate([{"role": "user", "content": "hi"}], tools=[{"type": "function"}])
    assert first.tool_calls[0].name == "calculator"
    assert json.loads(first.tool_calls[0].arguments) == {"expression": "1+1"}
    assert first.finish_reason == "tool_calls"
    chunks = list(engine.stream([{"role": "user", "content": "again"}]))
    assert "".join(c.delta for c in chunks) == "done"
    assert chunks[-1].result is not None and chunks[-1].result.content == "done"
    assert engine.calls[0]["tools"] == [{"type": "function"}]
    assert engine.calls[1]["messages"][0]["content"] == "again"
    with pytest.raises(EngineError, match="no scripted reply left"):
        engine.generate([{"role": "user", "content": "more"}])


def test_scripted_engine_default_and_callable():
    engine = ScriptedEngine([lambda req: f"echo {req['messages'][-1]['content']}"], default="same")
    assert engine.generate([{"role": "user", "content": "ping"}]).content == "echo ping"
    assert engine.generate([{"role": "user", "content": "x"}]).content == "same"
    assert engine.generate([{"role": "user", "content": "x"}]).content == "same"


def test_server_plain_reply_with_tool_calls_and_usage():
    with FakeOpenAIServer([reply(tool_calls=[tool_call("think", {"thought": "a"}, id="c1")],
                                 usage={"prompt_tokens": 7, "completion_tokens": 3})]) as server:
        status, body = _post(server, {"model": "m", "messages": [{"role": "user", "content": "q"}],
                                      "tools": [{"type": "function", "function": {"name": "think"}}]})
        assert status == 200
        message = body["choices"][0]["message"]
        assert message["tool_calls"][0]["function"] == {"name": "think",
                                                        "arguments": '{"thought": "a"}'}
        assert message["tool_calls"][0]["id"] == "c1"
        assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        assert body["choices"][0]["finish_reason"] == "tool_calls"
        assert server.requests[0]["tools"][0]["function"]["name"] == "think"


def test_server_streams_sse_with_tool_calls_and_usage():
    with FakeOpenAIServer([reply("Hello there world",
                                 tool_calls=[tool_call("calculator", {"expression": "2*3"})])]) as server:
        status, raw = _post(server, {"model": "m", "stream": True,
                                     "stream_options": {"include_usage": True},
                                     "messages": [{"role": "user", "content": "q"}]})
    assert status == 200
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello there world"
    args = "".join(tc["function"].get("arguments", "") for c in chunks if c["choices"]
                   for tc in c["choices"][0]["delta"].get("tool_calls") or [])
    assert json.loads(args) == {"expression": "2*3"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_server_failures_models_and_exhaustion():
    with FakeOpenAIServer([HTTPFailure(429, "slow down", retry_after=0), Disconnect(), "ok"],
                          models=["a", "b"]) as server:
        status, body = _post(server, {"messages": []})
        assert status == 429 and body["error"]["message"] == "slow down"
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            _post(server, {"messages": []})
        status, body = _post(server, {"messages": []})
        assert body["choices"][0]["message"]["content"] == "ok"
        status, body = _post(server, {"messages": []})
        assert status == 400 and "no scripted reply left" in body["error"]["message"]
        with urllib.request.urlopen(server.base_url + "/models", timeout=5) as resp:
            assert [m["id"] for m in json.loads(resp.read())["data"]] == ["a", "b"]
        assert [r.method for r in server.log].count("GET") == 1


def test_server_works_with_the_openai_client():
    from openai import OpenAI

    with FakeOpenAIServer(["hi from fake"]) as server:
        client = OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert out.choices[0].message.content == "hi from fake"
        client.close()


def test_server_from_the_command_line(tmp_path):
    record = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.testing", "serve", "--reply", "first",
                             "--default", "again", "--record", str(record)],
                            stdout=subprocess.PIPE, text=True)
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        for expected in ("first", "again"):
            req = urllib.request.Request(base_url + "/chat/completions", method="POST",
                                         data=json.dumps({"messages": []}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=5) as resp:
                assert json.loads(resp.read())["choices"][0]["message"]["content"] == expected
        lines = record.read_text().splitlines()
        assert len(lines) == 2 and json.loads(lines[0])["path"] == "/v1/chat/completions"
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        proc.stdout.close()


@pytest.mark.parametrize("body,headers", [
    (b"[1]", {}),
    (b'{"messages": 5}', {}),
    (b'{"messages": [5]}', {}),
    (b"{}", {"Content-Length": "99999999999"}),
])
def test_server_answers_malformed_requests_with_400(body, headers):
    with FakeOpenAIServer(["unused"]) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = conn.getresponse()
        assert response.status == 400
        assert "error" in json.loads(response.read())
        conn.close()
        assert server.remaining == 1  # no scripted reply was used up
