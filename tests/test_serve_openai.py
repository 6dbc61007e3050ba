"""`jarvis serve` OpenAI-compatible API, driven by the `openai` client; the engine behind the
agents is the loopback FakeOpenAIServer."""

from __future__ import annotations

import httpx
import openai
import pytest
from serve_support import running

from jarvis.server import ServeSettings
from jarvis.testing import FakeOpenAIServer, HTTPFailure, reply, tool_call


def client_for(server, key: str | None = None) -> openai.OpenAI:
    """An OpenAI client of `server` with its owner token (or the given API key)."""
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key or server.token,
                         max_retries=0, timeout=30)


def test_models_are_jarvis_agents() -> None:
    with running() as server, client_for(server) as client:
        ids = [m.id for m in client.models.list()]
        assert client.models.retrieve("react").id == "react"
        with pytest.raises(openai.NotFoundError, match="unknown model 'gpt-4o'"):
            client.models.retrieve("gpt-4o")
    assert {"simple", "react", "orchestrator"} <= set(ids)


def test_chat_completion_runs_the_agent_with_the_served_tools() -> None:
    script = [reply(tool_calls=[tool_call("calculator", {"expression": "6*7"})]),
              "The answer is 42."]
    with FakeOpenAIServer(script) as fake, running(fake=fake) as server, \
            client_for(server) as client:
        answer = client.chat.completions.create(
            model="orchestrator",
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Earlier question"},
                      {"role": "assistant", "content": "Earlier answer"},
                      {"role": "user", "content": "What is 6*7?"}])
    assert answer.choices[0].message.content == "The answer is 42."
    assert answer.choices[0].finish_reason == "stop" and answer.model == "orchestrator"
    assert answer.usage.total_tokens > 0
    extras = answer.model_extra["jarvis"]
    assert extras["turns"] == 2
    assert extras["tool_results"][0]["tool_name"] == "calculator"
    assert extras["tool_results"][0]["content"] == "42" and extras["tool_results"][0]["success"]
    first = fake.requests[0]
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant", "user"]
    assert first["messages"][0]["content"].startswith("Be brief.")
    assert {t["function"]["name"] for t in first["tools"]} == {"think", "calculator"}
    # The tool result went back to the engine in the second request.
    assert fake.requests[1]["messages"][-1] == {"role": "tool", "content": "42",
                                                "tool_call_id": first_call_id(fake)}


def first_call_id(fake: FakeOpenAIServer) -> str:
    return fake.requests[1]["messages"][-2]["tool_calls"][0]["id"]


def test_streaming_chat_completion() -> None:
    with FakeOpenAIServer(["Hello there from the fake engine"]) as fake, \
            running(fake=fake) as server, client_for(server) as client:
        stream = client.chat.completions.create(
            model="simple", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True})
        chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1 and "".join(pieces) == "Hello there from the fake engine"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert fake.requests[0]["stream"] is True


def test_bad_chat_requests_are_4xx_with_openai_errors() -> None:
    with running() as server, client_for(server) as client:
        with pytest.raises(openai.NotFoundError, match="unknown model 'gpt-4'.*orchestrator"):
            client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.BadRequestError, match="last non-system message"):
            client.chat.completions.create(model="simple",
                                           messages=[{"role": "assistant", "content": "x"}])
        with pytest.raises(openai.BadRequestError, match="client-side tools are not supported"):
            client.chat.completions.create(
                model="simple", messages=[{"role": "user", "content": "x"}],
                tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
        with pytest.raises(openai.BadRequestError, match="only text content parts"):
            client.chat.completions.create(model="simple", messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:,"}}]}])
        raw = httpx.post(server.url + "/v1/chat/completions", content=b"{oops",
                         headers={"Content-Type": "application/json", **server.headers})
        assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]["message"]
        raw = httpx.post(server.url + "/v1/chat/completions", json={"model": "simple"},
                         headers=server.headers)
        assert raw.status_code == 400 and "messages" in raw.json()["error"]["message"]
        for huge in (b"9" * 4000, b"1e999", b"-1", b"2.5"):  # valid JSON, not a token count
            raw = httpx.post(server.url + "/v1/chat/completions", headers={
                "Content-Type": "application/json", **server.headers},
                content=b'{"model": "simple", "messages": [{"role": "user", "content": "x"}], '
                        b'"max_tokens": ' + huge + b"}")
            assert raw.status_code == 400, (huge[:10], raw.text[:200])
            assert "max_tokens must be a whole number" in raw.json()["error"]["message"]


def test_engine_failure_is_a_clear_502() -> None:
    with FakeOpenAIServer([HTTPFailure(400, "the fake engine refuses")]) as fake, \
            running(fake=fake) as server, client_for(server) as client:
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(
                model="simple", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502
    assert "the inference engine failed" in info.value.message
    assert "Traceback" not in info.value.message


def test_openai_client_with_api_key() -> None:
    key = "chat-key-12345"
    with FakeOpenAIServer(["ok"]) as fake, running(ServeSettings(api_key=key), fake=fake) as server:
        with client_for(server, "wrong-key-12345") as wrong, pytest.raises(
                openai.AuthenticationError):
            wrong.models.list()
        with client_for(server, key) as client:
            answer = client.chat.completions.create(
                model="simple", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "ok"


def test_workspace_agents_are_models_with_their_own_tools_and_prompt(jarvis_home) -> None:
    agents = jarvis_home / "agents"  # with no config.toml the workspace is JARVIS_HOME
    agents.mkdir()
    (agents / "mathbot.toml").write_text(
        'description = "Does sums."\nbase = "orchestrator"\n'
        'instructions = "You are mathbot."\ntools = ["calculator"]\n')
    (agents / "broken.toml").write_text('base = "nope"\n')  # skipped, not fatal
    with FakeOpenAIServer(["4"]) as fake, running(fake=fake) as server, \
            client_for(server) as client:
        assert "mathbot" in [m.id for m in client.models.list()]
        answer = client.chat.completions.create(
            model="mathbot", messages=[{"role": "user", "content": "2+2?"}])
    assert answer.choices[0].message.content == "4"
    sent = fake.requests[0]
    assert sent["messages"][0] == {"role": "system", "content": "You are mathbot."}
    assert [t["function"]["name"] for t in sent["tools"]] == ["calculator"]
