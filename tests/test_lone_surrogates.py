"""A lone surrogate (`\\udc80`: what JSON's `"\\udc80"` escape or a command-line byte that is
not UTF-8 decodes to) in tool-call arguments, a question or a chat message is refused with a
clear message and recorded: never a traceback, never a 500, never a run missing from
`jarvis runs list`. Through the CLI, a real `jarvis serve`, and the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from serve_process import jarvis_serve, owner_headers

from jarvis.testing import FakeOpenAIServer, reply, tool_call

LONE = "\udc80"


def jarvis(env: dict[str, str], *args: str | bytes, cwd: Path | None = None
           ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                          text=True, errors="backslashreplace")


def engine_env(cli_env: dict[str, str], url: str) -> dict[str, str]:
    return dict(cli_env, JARVIS_ENGINE="vllm", JARVIS_MODEL="test-model", VLLM_HOST=url)


def runs(env: dict[str, str]) -> list[dict]:
    out = jarvis(env, "runs", "list", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def show(env: dict[str, str], run_id: str) -> dict:
    out = jarvis(env, "runs", "show", run_id, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("arguments, where", [
    ({"thought": f"plan {LONE} b"}, '"thought"'),
    ({"thought": "\ud800"}, '"thought"'),  # a high surrogate alone
    ({"thought": "ok", f"x{LONE}": "y"}, 'the name "x'),  # in a key
    ({"thought": ["a", {"deep": f"{LONE}"}]}, '"thought[1].deep"'),
])
def test_tool_call_arguments_with_a_lone_surrogate_are_refused_and_recorded(
        cli_env, tmp_path, arguments, where):
    """The engine's JSON carries `"\\udc80"` escapes (the fake server sends them as JSON
    escapes, as a real one would): the call is refused before the tool runs, the model reads
    why, the run finishes and is in `jarvis runs`, its arguments stored escaped."""
    script = [reply(tool_calls=[tool_call("think", arguments)]), f"done {LONE}"]
    with FakeOpenAIServer(script) as model:
        env = engine_env(cli_env, model.url)
        out = jarvis(env, "ask", "--tools", "think", "plan it", cwd=tmp_path)
        sent = model.requests[1]["messages"]
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stdout.startswith("done ")
    (tool_message,) = [m["content"] for m in sent if m["role"] == "tool"]
    assert "arguments for think" in tool_message and where in tool_message
    assert "is not valid Unicode text" in tool_message and "lone surrogate" in tool_message
    (run,) = runs(env)
    assert run["status"] == "ok"
    stored = show(env, run["id"])
    (call,) = stored["tool_calls"]
    assert call["success"] is False and call["error_type"] == "invalid_args"
    assert "\\u" in json.dumps(call["arguments"], ensure_ascii=False)
    assert "stored as \\uXXXX escapes" in stored["metadata"]["escaped_characters"]
    assert stored["content"] == "done \\udc80"


def test_a_question_that_is_not_utf8_is_refused_and_recorded(cli_env, tmp_path):
    """`jarvis ask $'caf\\x80'`: the byte 0x80 reaches Python as U+DC80."""
    with FakeOpenAIServer(["never asked"]) as model:
        env = engine_env(cli_env, model.url)
        out = subprocess.run([sys.executable.encode(), b"-m", b"jarvis.cli", b"ask", b"caf\x80"],
                             env=env, cwd=tmp_path, capture_output=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        assert model.requests == []
    err = out.stderr.decode("utf-8", "backslashreplace")
    assert out.returncode == 2 and "Traceback" not in err
    assert err.startswith("Error: the question is not valid Unicode text: character 4 is "
                          "U+DC80"), err
    assert len(err.strip().splitlines()) == 1
    (run,) = runs(env)
    assert run["status"] == "error" and run["query"] == "caf\\udc80"
    assert "not valid Unicode text" in run["error"]
    listed = jarvis(env, "runs", "list")
    assert listed.returncode == 0 and "caf\\udc80" in listed.stdout


def test_the_sdk_refuses_and_records_too(tmp_path):
    from jarvis.core.config import load_config
    from jarvis.core.types import Message
    from jarvis.errors import UserError
    from jarvis.runlog import RunLog, run_log_path
    from jarvis.sdk import Jarvis

    with FakeOpenAIServer(["never asked"]) as model:
        j = Jarvis(config=load_config(), engine="vllm", host=model.url, model="m")
        try:
            with pytest.raises(UserError, match="the question is not valid Unicode text"):
                j.ask_full(f"hi {LONE}")
            with pytest.raises(UserError, match="message 2 of the history"):
                j.ask_full("hi", history=[Message("user", "a"), Message("assistant", "\ud83d")])
            with pytest.raises(UserError, match="the system prompt"):
                j.ask_full("hi", system=f"be {LONE}")
        finally:
            j.close()
        assert model.requests == []
    log = RunLog(run_log_path(load_config()))
    try:
        listed = log.list()
    finally:
        log.close()
    assert [r["status"] for r in listed] == ["error"] * 3
    assert {r["query"] for r in listed} == {"hi \\udc80", "hi"}


AUTH: dict[str, str] = {}


def _post(url: str, raw_json: str, **headers: str) -> httpx.Response:
    """POST a body written by hand, so `\\udc80` travels as the JSON escape a client sends
    (with the owner's token, AUTH, set once the server made it)."""
    return httpx.post(url, content=raw_json.encode("ascii"), timeout=30,
                      headers={"Content-Type": "application/json", **AUTH, **headers})


@pytest.mark.parametrize("stream", [False, True])
def test_jarvis_serve_chat_refuses_with_400_and_records_the_run(cli_env, tmp_path, stream):
    with FakeOpenAIServer(["never asked"]) as model:
        env = engine_env(cli_env, model.url)
        with jarvis_serve(env, tmp_path / "ws", "--tools", "think") as url:
            AUTH.update(owner_headers(env))
            body = ('{"model": "simple", "stream": ' + json.dumps(stream) + ', "messages": '
                    '[{"role": "user", "content": "caf\\udc80"}]}')
            answer = _post(url + "/v1/chat/completions", body)
            history = _post(url + "/v1/chat/completions",
                            '{"model": "simple", "messages": [{"role": "assistant", "content":'
                            ' "x\\ud800"}, {"role": "user", "content": "hi"}]}')
            bad_model = _post(url + "/v1/chat/completions",
                              '{"model": "s\\udc80", "messages": [{"role": "user", '
                              '"content": "hi"}]}')
        assert model.requests == []
    assert answer.status_code == 400, answer.text
    assert "not valid Unicode text" in answer.json()["error"]["message"]
    assert history.status_code == 400 and "history" in history.json()["error"]["message"]
    assert bad_model.status_code == 404 and "unknown model" in bad_model.json()["error"]["message"]
    statuses = [(r["status"], r["query"]) for r in runs(env)]
    assert ("error", "caf\\udc80") in statuses and ("error", "hi") in statuses


def test_jarvis_serve_answers_a_models_broken_text_without_a_500(cli_env, tmp_path):
    """The model's own answer carries a lone surrogate: it arrives as U+FFFD, streamed or
    not, and the run is recorded with it escaped."""
    with FakeOpenAIServer([f"fine {LONE}", f"fine {LONE}"]) as model:
        env = engine_env(cli_env, model.url)
        with jarvis_serve(env, tmp_path / "ws", "--tools", "think") as url:
            AUTH.update(owner_headers(env))
            plain = _post(url + "/v1/chat/completions",
                          '{"model": "simple", "messages": [{"role": "user", "content": "hi"}]}')
            streamed = _post(url + "/v1/chat/completions",
                             '{"model": "simple", "stream": true, "messages": '
                             '[{"role": "user", "content": "hi"}]}')
    assert plain.status_code == 200, plain.text
    assert plain.json()["choices"][0]["message"]["content"] == "fine \ufffd"
    assert streamed.status_code == 200, streamed.text
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "fine \ufffd", streamed.text
    assert sorted(r["status"] for r in runs(env)) == ["ok", "ok"]


def test_jarvis_serve_ors_call_refuses_the_arguments_cleanly(cli_env, tmp_path):
    with jarvis_serve(cli_env, tmp_path / "ws", "--tools", "think") as url:
        AUTH.update(owner_headers(cli_env))
        created = httpx.post(url + "/create_session", timeout=30, headers=AUTH)
        sid = next(line[6:] for line in created.text.splitlines() if line.startswith("data: "))
        made = _post(url + "/create", '{"task_spec": {}}', **{"X-Session-ID": sid})
        assert made.status_code == 200, made.text
        call = _post(url + "/jarvis/call", '{"name": "think", "input": {"thought": "\\udc80"}}',
                     **{"X-Session-ID": sid})
        unknown = _post(url + "/jarvis/call", '{"name": "th\\udc80", "input": {}}',
                        **{"X-Session-ID": sid})
    assert call.status_code == 200, call.text
    payload = json.loads(call.text.split("data: ")[-1])
    output = payload["output"]
    assert output["metadata"]["error_type"] == "invalid_args"
    assert "not valid Unicode text" in output["blocks"][0]["text"]
    assert unknown.status_code == 404 and "unknown tool" in unknown.json()["detail"]


def test_jarvis_mcp_serve_over_stdio_answers_instead_of_dropping(cli_env, tmp_path):
    """The SDK's stdio transport cannot parse a line holding `"\\udc80"` and dropped it
    without an answer (its client waited until it gave up): it gets a JSON-RPC error with its
    own id now, nothing runs, and the next request is served as usual."""
    import queue
    import threading

    lines = [
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
        '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"think",'
        '"arguments":{"thought":"a\\udc80b"}}}',
        '{"jsonrpc":"2.0","id":"k\\ud800","method":"tools/call","params":{"name":"think",'
        '"arguments":{"thought":["x", {"y\\udfff": 1}]}}}',
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"think",'
        '"arguments":{"thought":"fine"}}}',
    ]
    # A tool whose answer holds one too (a proxied server's, a decoded byte): U+FFFD on the
    # wire, where it used to stop the server (the SDK cannot encode it).
    (tmp_path / "config.toml").write_text("")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "broken.py").write_text(
        "from jarvis import tool\n\n\n@tool\ndef broken() -> str:\n"
        "    \"\"\"Answer with a lone surrogate.\"\"\"\n    return 'half \\udc80 of it'\n")
    lines.insert(4, '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"broken",'
                    '"arguments":{}}}')
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "mcp", "serve", "--tools",
                             "think,broken"], env=cli_env, cwd=tmp_path, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    answers: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [answers.put(json.loads(x)) for x in proc.stdout],
                              daemon=True)
    reader.start()
    try:
        proc.stdin.write("\n".join(lines) + "\n")
        proc.stdin.flush()
        got = {}
        while 3 not in got:
            answer = answers.get(timeout=60)
            got[answer.get("id")] = answer
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        reader.join(10)
        proc.stdout.close()
    assert got[2]["error"]["code"] == -32602
    assert ('"arguments.thought" is not valid Unicode text: character 2 is U+DC80'
            in got[2]["error"]["message"])
    assert "U+DFFF" in got["k\\ud800"]["error"]["message"]
    assert got[3]["result"]["content"][0]["text"] == "fine"
    assert got[5]["result"]["content"][0]["text"] == "half \ufffd of it"


def test_jarvis_mcp_serve_over_http_refuses_it_with_a_400(cli_env, tmp_path):
    from serve_process import mcp_serve_http

    with mcp_serve_http(cli_env, tmp_path / "ws", "--tools", "think") as base:
        headers = {"Content-Type": "application/json", **owner_headers(cli_env),
                   "Accept": "application/json, text/event-stream"}
        answer = httpx.post(base + "/mcp", headers=headers, timeout=30, content=(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
            b'"2025-06-18","capabilities":{},"clientInfo":{"name":"t\\udc80","version":"1"}}}'))
    assert answer.status_code == 400, answer.text
    assert "lone leading surrogate" in answer.json()["error"]["message"]
