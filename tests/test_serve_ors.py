"""`jarvis serve` ORS endpoints, driven by the published ors-sdk client and by raw HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import httpx
import pytest
from approvals_support import post_out, read_inbox
from ors.client import ORS, AsyncORS, Task
from serve_support import explode, running, submit

from jarvis.resources import default_manager
from jarvis.server import ServeSettings
from jarvis.tools.repl import REPL_KIND

TASK = Task(environment_name="jarvis", task_spec={})


def test_ors_client_lists_tools_and_calls_them() -> None:
    with running(extra_tools=[explode, submit]) as server, \
            ORS(base_url=server.url, api_key=server.token) as client:
        env = client.environment("jarvis")
        tools = {t.name: t for t in env.list_tools()}
        assert set(tools) == {"think", "calculator", "explode", "submit"}
        assert tools["calculator"].input_schema["required"] == ["expression"]
        assert "Evaluate" in tools["calculator"].description
        with env.session(task=TASK) as session:
            out = session.call_tool("calculator", {"expression": "6*7"})
            assert [b.text for b in out.blocks] == ["42"] and out.finished is False
            # A tool-level failure is a well-formed output the model can read.
            failed = session.call_tool("calculator", {"expression": "1/0"})
            assert "division by zero" in failed.blocks[0].text
            assert failed.metadata["error_type"] == "execution"
            crashed = session.call_tool("explode", {"reason": "x"})
            assert "RuntimeError: boom: x" in crashed.blocks[0].text
            assert crashed.metadata["error_type"] == "execution"
            invalid = session.call_tool("calculator", {"wrong": 1})
            assert invalid.metadata["error_type"] == "invalid_args"
            done = session.call_tool("submit", {"answer": 42})
            assert done.reward == 1.0 and done.finished is True
            with pytest.raises(RuntimeError, match="404.*unknown tool 'nope'"):
                session.call_tool("nope", {})
            assert session.get_prompt()[0].text.startswith("You are in the jarvis tool environment")


def test_sessions_hold_run_state_and_release_it_on_delete() -> None:
    pytest.importorskip("resource")
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux sandbox")
    settings = ServeSettings(approve=True)
    with running(settings, tools=["repl"], tool_settings={"repl": {"timeout": 5}}) as server, \
            ORS(base_url=server.url, api_key=server.token) as client:
        env = client.environment("jarvis")
        with env.session(task=TASK) as a, env.session(split="default", index=0) as b:
            assert a.call_tool("repl", {"code": "x = 21"}).blocks[0].text == "(no output)"
            assert a.call_tool("repl", {"code": "x * 2"}).blocks[0].text.strip() == "42"
            other = b.call_tool("repl", {"code": "x"})
            assert "NameError" in other.blocks[0].text and other.metadata["error_type"]
            proc = _leased_repl(a.sid)
            assert proc is not None and proc.alive
        # Leaving the session (POST /delete) released its interpreter.
        assert not proc.alive and a.sid not in server.app_state.ors.sessions


def _leased_repl(sid: str):
    for owner, key in list(default_manager()._leases):  # noqa: SLF001 - test introspection
        if owner == sid and key[0] == REPL_KIND:
            return default_manager()._leases[(owner, key)]
    return None


def test_confirmation_tools_are_denied_without_approve() -> None:
    with running(tools=["repl"]) as server, ORS(base_url=server.url, api_key=server.token) as client:
        with client.environment("jarvis").session(task=TASK) as session:
            out = session.call_tool("repl", {"code": "1"})
    assert out.metadata["error_type"] == "denied" and "--yes" in out.blocks[0].text


def test_task_spec_narrows_the_tools() -> None:
    with running() as server, ORS(base_url=server.url, api_key=server.token) as client:
        env = client.environment("jarvis")
        with env.session(task=Task("jarvis", {"tools": ["think"]})) as session:
            assert [t.name for t in session.list_tools()] == ["think"]
            with pytest.raises(RuntimeError, match="404.*unknown tool 'calculator'"):
                session.call_tool("calculator", {"expression": "1"})


def _sid(client: httpx.Client) -> str:
    text = client.post("/create_session").text
    return text.split("data: ", 1)[1].split("\n", 1)[0]


def _events(text: str) -> dict[str, str]:
    events: dict[str, str] = {}
    for block in text.strip().split("\n\n"):
        lines = block.split("\n")
        name = lines[0].removeprefix("event: ")
        events[name] = events.get(name, "") + "\n".join(x.removeprefix("data: ") for x in lines[1:])
    return events


def test_bad_requests_get_clear_4xx_answers() -> None:
    settings = ServeSettings(max_body_bytes=4096)
    with running(settings) as server, httpx.Client(base_url=server.url, headers=server.headers) as http:
        sid = _sid(http)
        h = {"X-Session-ID": sid}
        r = http.post("/create", content=b"{not json",
                      headers={**h, "Content-Type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["detail"]
        r = http.post("/create", content=b'{"task_spec": {}}', headers=h)  # no Content-Type
        assert r.status_code == 415 and "application/json" in r.json()["detail"]
        r = http.post("/create", json={}, headers=h)
        assert r.status_code == 400 and "task_spec" in r.json()["detail"]
        assert http.post("/create", json={"task_spec": {}}, headers=h).status_code == 200
        r = http.post("/create", json={"task_spec": {}}, headers=h)
        assert r.status_code == 409
        r = http.post("/jarvis/call", json={"name": "think", "input": {"thought": "x" * 5000}},
                      headers=h)
        assert r.status_code == 413 and "the limit is 4096 bytes" in r.json()["detail"]
        r = http.post("/jarvis/call", json={"name": "think", "input": []}, headers=h)
        assert r.status_code == 400 and "must be a JSON object" in r.json()["detail"]
        r = http.post("/jarvis/call", json={"name": "think", "input": {}, "x": 1}, headers=h)
        assert r.status_code == 400 and "unknown field(s) x" in r.json()["detail"]
        r = http.post("/jarvis/call", json={"name": "nope", "input": {}}, headers=h)
        assert r.status_code == 404 and "unknown tool 'nope'" in r.json()["detail"]
        r = http.post("/jarvis/call", json={"name": "think", "input": {}},
                      headers={"X-Session-ID": "never-created"})
        assert r.status_code == 404 and "unknown session" in r.json()["detail"]
        r = http.post("/jarvis/call", json={"name": "think", "input": {}})
        assert r.status_code == 400 and "X-Session-ID" in r.json()["detail"]
        r = http.get("/elsewhere/tools")
        assert r.status_code == 404 and "unknown environment 'elsewhere'" in r.json()["detail"]
        r = http.get("/no/such/route")
        assert r.status_code == 404 and "no route" in r.json()["detail"]
        r = http.get("/jarvis/call")
        assert r.status_code == 405
        # Chunked body with no Content-Length is bounded too.
        r = http.post("/jarvis/call", content=iter([b'{"name": "think", "input": {"thought": "',
                                                   b"y" * 5000, b'"}}']),
                      headers={**h, "Content-Type": "application/json"})
        assert r.status_code == 413
        # And the session still works after all that.
        r = http.post("/jarvis/call", json={"name": "think", "input": {"thought": "ok"}}, headers=h)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        payload = json.loads(_events(r.text)["end"])
        assert payload == {"ok": True, "output": {
            "blocks": [{"text": "ok", "detail": None, "type": "text"}], "metadata": None,
            "reward": None, "finished": False}}


def test_long_outputs_are_split_into_sse_chunks() -> None:
    with running() as server, ORS(base_url=server.url, api_key=server.token) as client:
        with client.environment("jarvis").session(task=TASK) as session:
            thought = "".join(f"line {i}\n" for i in range(2000))  # ~15 kB, with newlines
            out = session.call_tool("think", {"thought": thought})
    assert out.blocks[0].text == thought


def test_idle_sessions_expire() -> None:
    settings = ServeSettings(session_idle_seconds=0.3)
    with running(settings) as server, httpx.Client(base_url=server.url, headers=server.headers) as http:
        sid = _sid(http)
        assert http.post("/create", json={"task_spec": {}}, headers={"X-Session-ID": sid}).is_success
        assert http.post("/ping", headers={"X-Session-ID": sid}).is_success
        deadline = time.monotonic() + 10
        while sid in server.app_state.ors.sessions and time.monotonic() < deadline:
            time.sleep(0.05)
        r = http.post("/ping", headers={"X-Session-ID": sid})
        assert r.status_code == 404 and "expired after 0.3 s" in r.json()["detail"]


def test_session_limit() -> None:
    settings = ServeSettings(max_sessions=1)
    with running(settings) as server, httpx.Client(base_url=server.url, headers=server.headers) as http:
        first, second = _sid(http), _sid(http)
        assert http.post("/create", json={"task_spec": {}}, headers={"X-Session-ID": first}).is_success
        r = http.post("/create", json={"task_spec": {}}, headers={"X-Session-ID": second})
        assert r.status_code == 429 and "maximum of 1 sessions" in r.json()["detail"]


def test_api_key_is_required_when_set() -> None:
    key = "s3cret-key-123"
    with running(ServeSettings(api_key=key)) as server, httpx.Client(base_url=server.url) as http:
        assert http.get("/health").json()["status"] == "ok"  # open for probes
        r = http.get("/jarvis/tools")
        assert r.status_code == 401 and "missing API key" in r.json()["detail"]
        assert http.get("/jarvis/tools", headers={"X-API-Key": "wrong-key-000"}).status_code == 401
        assert http.get("/jarvis/tools", headers={"X-API-Key": key}).is_success
        assert http.get("/jarvis/tools", headers={"Authorization": f"Bearer {key}"}).is_success
        r = http.get("/v1/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        with ORS(base_url=server.url, api_key=key) as client:
            with client.environment("jarvis").session(task=TASK) as session:
                assert session.call_tool("think", {"thought": "k"}).blocks[0].text == "k"


def test_non_loopback_needs_an_api_key() -> None:
    from jarvis.errors import UserError
    from jarvis.server import build_app

    with pytest.raises(UserError, match="refusing to listen on 0.0.0.0 without an API key"):
        build_app(ServeSettings(host="0.0.0.0"), tools=[])
    ServeSettings(host="0.0.0.0", api_key="long-enough-key").check()
    ServeSettings(host="::1").check()


def test_concurrent_sessions() -> None:
    async def one(env, i: int) -> list[str]:
        async with env.session(task=TASK) as session:
            return [(await session.call_tool("think", {"thought": f"{i}-{k}"})).blocks[0].text
                    for k in range(3)]

    async def main(url: str, token: str) -> list[list[str]]:
        # Keep the client referenced: its __del__ closes the sessions.
        client = AsyncORS(base_url=url, api_key=token)
        env = client.environment("jarvis")
        try:
            return await asyncio.gather(*(one(env, i) for i in range(20)))
        finally:
            await env.client.close()

    with running() as server:
        results = asyncio.run(main(server.url, server.token))
        assert results == [[f"{i}-{k}" for k in range(3)] for i in range(20)]
        assert server.app_state.ors.sessions == {}


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_cli_serves_and_refuses_unsafe_hosts(cli_env: dict[str, str]) -> None:
    import subprocess

    refused = subprocess.run([sys.executable, "-m", "jarvis.cli", "serve", "--host", "0.0.0.0"],
                             env=cli_env, capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "without an API key" in refused.stderr
    assert "Traceback" not in refused.stderr
    # [serve] in config.toml gives defaults; flags win over it.
    with open("config.toml", "w") as f:
        f.write('[serve]\nenv_name = "lab"\ntools = ["think"]\nport = 1\n')
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "serve", "--port", "0",
                             "--tools", "think,calculator"], env=cli_env,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("jarvis serve: listening on http://127.0.0.1:"), first
        url = first.rsplit(" ", 1)[1].strip()
        token = (Path(cli_env["JARVIS_HOME"]) / "serve.token").read_text().strip()
        with ORS(base_url=url, api_key=token) as client:
            env = client.environment("lab")
            assert [t.name for t in env.list_tools()] == ["think", "calculator"]
            with env.session(task=Task("lab", {})) as session:
                assert session.call_tool("calculator", {"expression": "2**10"}).blocks[0].text == "1024"
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        proc.stderr.close()
    assert proc.returncode in (0, -15)  # uvicorn exits cleanly on SIGTERM


def test_reconnecting_with_the_task_id_answers_without_running_the_tool_again() -> None:
    import threading

    from jarvis.tools.base import tool

    runs: list[str] = []
    release = threading.Event()

    @tool(register=False)
    def slow_count(label: str) -> str:
        """Count calls, slowly.

        Args:
            label: echoed back.
        """
        runs.append(label)
        release.wait(10)
        return f"{label} #{len(runs)}"

    with running(extra_tools=[slow_count]) as server, \
            httpx.Client(base_url=server.url, headers=server.headers) as http:
        sid = _sid(http)
        h = {"X-Session-ID": sid}
        assert http.post("/create", json={"task_spec": {}}, headers=h).is_success
        body = {"name": "slow_count", "input": {"label": "a"}}
        with http.stream("POST", "/jarvis/call", json=body, headers=h) as first:
            lines = first.iter_lines()
            assert next(lines) == "event: task_id"
            task_id = next(lines).removeprefix("data: ")
        # The stream was dropped mid-call; the client comes back with the task_id.
        release.set()
        again = http.post("/jarvis/call", json={**body, "task_id": task_id}, headers=h)
        payload = json.loads(_events(again.text)["end"])
        assert payload["output"]["blocks"][0]["text"] == "a #1"
        assert runs == ["a"]
        unknown = http.post("/jarvis/call", json={**body, "task_id": "nope"}, headers=h)
        assert "unknown task_id 'nope'" in _events(unknown.text)["error"]


def test_a_held_call_is_refused_in_call_and_a_grant_made_before_start_lets_it_through() -> None:
    """An ORS session cannot park (its client waits for the result within the call): a call
    the egress guard holds is refused, saying why and how to allow it; the person's grants
    (as of the server's start) let it through."""
    from jarvis.approvals import open_approvals
    from jarvis.approvals.grants import make_grant
    def session_calls():
        with running(tools=[], extra_tools=[read_inbox, post_out]) as server, \
                ORS(base_url=server.url, api_key=server.token) as client:
            with client.environment("jarvis").session(task=TASK) as session:
                session.call_tool("read_inbox", {})
                return session.call_tool("post_out", {"channel": "phone", "text": "code 1234"})

    refused = session_calls()
    assert refused.metadata["error_type"] == "denied"
    text = refused.blocks[0].text
    assert "an ORS session answers each tool call within the call" in text, text
    assert "jarvis grants add" in text
    store = open_approvals(None)
    try:
        store.add_grant(make_grant("post_out", "channel", "phone"))
    finally:
        store.close()
    sent = session_calls()
    assert sent.blocks[0].text == "posted to phone", sent.blocks[0].text


def test_a_grant_made_or_revoked_while_the_server_runs_counts_from_the_next_session() -> None:
    from jarvis.approvals import open_approvals
    from jarvis.approvals.grants import make_grant
    with running(tools=[], extra_tools=[read_inbox, post_out]) as server, \
            ORS(base_url=server.url, api_key=server.token) as client:

        def session_calls():
            with client.environment("jarvis").session(task=TASK) as session:
                session.call_tool("read_inbox", {})
                return session.call_tool("post_out", {"channel": "phone", "text": "code 1234"})

        assert session_calls().metadata["error_type"] == "denied"
        store = open_approvals(None)
        try:
            grant = store.add_grant(make_grant("post_out", "channel", "phone"))
            sent = session_calls()
            assert sent.blocks[0].text == "posted to phone", sent.blocks[0].text
            store.revoke_grant(grant.id)
            assert session_calls().metadata["error_type"] == "denied"
        finally:
            store.close()
