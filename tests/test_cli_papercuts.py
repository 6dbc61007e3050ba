"""The smaller papercuts of issue 25, each through the CLI as a user types it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def jarvis(env: dict[str, str], cwd: Path, *args: str,
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, input=stdin)


def test_schedule_durations_and_limits_in_words(cli_env, tmp_path) -> None:
    added = jarvis(cli_env, tmp_path, "schedule", "add", "Check the build", "--every", "1h",
                   "--timeout", "5m", "--retry-backoff", "90s", "--grace", "1d", "--json")
    assert added.returncode == 0, added.stderr
    task = json.loads(added.stdout)
    assert (task["schedule_value"], task["timeout_seconds"], task["retry_backoff_seconds"],
            task["grace_seconds"]) == ("3600", 300.0, 90.0, 86400.0)
    bad = jarvis(cli_env, tmp_path, "schedule", "add", "x", "--every", "1x")
    assert bad.returncode == 2
    assert "'1x' is not a duration: give seconds (90) or a number with a unit: 90s" in bad.stderr
    far = jarvis(cli_env, tmp_path, "schedule", "add", "x", "--every", "400d")
    assert far.returncode == 2
    assert "interval must be between 1 second and 366 days" in far.stderr


def test_tools_run_takes_key_value_words_and_says_error_once(cli_env, tmp_path) -> None:
    out = jarvis(cli_env, tmp_path, "tools", "run", "calculator", "expression=sqrt(144) + 3**2")
    assert out.returncode == 0 and out.stdout == "21.0\n", out.stderr
    typed = jarvis(cli_env, tmp_path, "tools", "run", "think", "thought=true")
    assert typed.stdout == "true\n"  # a string argument stays a string
    failed = jarvis(cli_env, tmp_path, "tools", "run", "calculator", "expression=1/0")
    assert failed.returncode == 1 and failed.stderr == "Error (execution): division by zero\n"
    odd = jarvis(cli_env, tmp_path, "tools", "run", "calculator", "expression")
    assert odd.returncode == 2 and "key=value words, not 'expression'" in odd.stderr


def test_the_sdk_engine_error_names_no_cli_flag(cli_env, tmp_path) -> None:
    from ports import closed_port

    port = closed_port()
    env = dict(cli_env, **{v: f"http://127.0.0.1:{port}" for v in (
        "OLLAMA_HOST", "VLLM_HOST", "LLAMACPP_HOST", "LMSTUDIO_HOST", "SGLANG_HOST")})
    code = ("from jarvis import Jarvis\n"
            "try:\n    Jarvis().ask('hi')\nexcept Exception as exc:\n    print(exc)\n")
    sdk = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert sdk.stdout.startswith("no inference engine is reachable"), sdk.stderr
    assert "--" not in sdk.stdout  # no CLI flag in what the SDK raises
    cli = jarvis(env, tmp_path, "ask", "hi")
    assert cli.returncode == 1 and cli.stderr.rstrip().endswith("(--verbose shows details)")


def test_config_show_is_valid_toml(cli_env, tmp_path) -> None:
    import tomllib

    (tmp_path / "config.toml").write_text(
        '[engine]\nmodel = "from-file"\n\n[engine.vision_models]\n"my-vlm*" = true\n\n'
        '[tools.file_read]\nallowed_dirs = ["notes"]\n\n'
        '[mcp.servers.files]\ncommand = "npx"\nenv = { GITHUB_TOKEN = "secret-value" }\n\n'
        '[channels.phone]\nurl = "ntfy://ntfy.sh/topic"\n')
    out = jarvis(dict(cli_env, JARVIS_MAX_TURNS="7"), tmp_path, "config", "show")
    assert out.returncode == 0, out.stderr
    data = tomllib.loads(out.stdout)
    assert data["engine"]["model"] == "from-file" and data["agent"]["max_turns"] == 7
    assert data["engine"]["vision_models"] == {"my-vlm*": True}
    assert data["tools"]["file_read"]["allowed_dirs"] == [str(tmp_path / "notes")]
    assert data["mcp"]["servers"]["files"]["env"]["GITHUB_TOKEN"] == "***"
    assert "max_tokens" not in data["engine"]  # not set: a comment
    assert "# max_tokens =  (not set)  # default" in out.stdout
    assert out.stdout.count("\n[engine]\n") == 1
    assert 'max_turns = 7  # JARVIS_MAX_TURNS' in out.stdout


def test_a_read_only_memory_and_run_log_do_not_stop_ask_or_runs_list(cli_env, tmp_path,
                                                                      jarvis_home) -> None:
    from readonly import read_only

    from jarvis.testing import FakeOpenAIServer

    notes = tmp_path / "notes.md"
    notes.write_text("Anna's birthday is on 3 May.\n")
    assert jarvis(cli_env, tmp_path, "memory", "index", str(notes)).returncode == 0
    with FakeOpenAIServer(default="On 3 May.") as fake:
        env = dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="test-model")
        assert jarvis(env, tmp_path, "ask", "first question").returncode == 0  # one run logged

        def locked(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*read_only(jarvis_home), sys.executable, "-m", "jarvis.cli",
                                   *args], env=env, cwd=tmp_path, capture_output=True,
                                  text=True, timeout=60)

        asked = locked("ask", "When is Anna's birthday?")
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout == "On 3 May.\n"
        assert "jarvis: warning: no memory context for this question: cannot open memory " \
               "database" in asked.stderr
        assert "the run was not recorded" in asked.stderr
        listed = locked("runs", "list")
    assert listed.returncode == 0, listed.stderr
    assert "first question" in listed.stdout


def test_serve_logs_each_request_and_streams_tool_activity(cli_env, tmp_path) -> None:
    import re

    import httpx
    from logged_process import LoggedProcess

    from jarvis.testing import FakeOpenAIServer, reply, tool_call

    script = [reply(tool_calls=[tool_call("calculator", {"expression": "6*7"})]), "It is 42."]
    with FakeOpenAIServer(script) as fake:
        env = dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="test-model")
        served = LoggedProcess(subprocess.Popen(
            [sys.executable, "-m", "jarvis.cli", "serve", "--port", "0", "--tools", "calculator"],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
            "jarvis serve")
        try:
            url = re.search(r"(http://\S+)", served.wait_for_line("listening on", 60)).group(1)
            token = (Path(cli_env["JARVIS_HOME"]) / "serve.token").read_text().strip()
            with httpx.Client(base_url=url, timeout=60,
                              headers={"Authorization": f"Bearer {token}"}) as client:
                assert client.get("/health").status_code == 200
                body = {"model": "orchestrator", "stream": True, "messages": [
                    {"role": "user", "content": "What is 6*7? secret-question"}]}
                with client.stream("POST", "/v1/chat/completions?api_key=hunter2",
                                   json=body) as answer:
                    chunks = [json.loads(line[6:]) for line in answer.iter_lines()
                              if line.startswith("data: {")]
                assert client.get("/nope").status_code == 404
            served.wait_for_line("GET /nope 404")
            log = served.text()
        finally:
            served.proc.terminate()
            served.proc.wait(20)
            served.close_streams()
    assert re.search(r"jarvis serve: GET /health 200 \d+\.\d ms", log), log
    assert re.search(r"jarvis serve: POST /v1/chat/completions 200 \d+\.\d ms", log), log
    assert "hunter2" not in log and "secret-question" not in log  # no query, no body
    activity = [c["jarvis"]["tool_activity"] for c in chunks if "tool_activity" in c.get("jarvis", {})]
    assert [(a["event"], a["tool"]) for a in activity] == [("start", "calculator"),
                                                          ("end", "calculator")]
    assert activity[1]["success"] is True
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "It is 42."


def test_the_testing_kit_cli_takes_misbehave_items_and_records_requests(tmp_path) -> None:
    import httpx
    from waiting import wait_for

    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"misbehave": "gzip"}, "Second."]))
    record = tmp_path / "requests.jsonl"
    url_file = tmp_path / "server.url"
    with url_file.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "jarvis.testing", "serve", "--script",
                                 str(script), "--record", str(record)], stdout=out,
                                stderr=subprocess.PIPE, text=True)
    try:
        base = wait_for(lambda: url_file.read_text().strip(), timeout=30, what="the URL")
        body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}
        first = httpx.post(base + "/chat/completions", json=body, timeout=30)
        assert first.status_code == 200 and first.headers["content-encoding"] == "gzip"
        assert httpx.post(base + "/chat/completions", json=body, timeout=30).json()[
            "choices"][0]["message"]["content"] == "Second."
        assert httpx.get(base + "/models", timeout=30).status_code == 200
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(r["method"], r["path"]) for r in lines] == [
        ("POST", "/v1/chat/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models")]
    assert lines[0]["body"]["messages"] == body["messages"] and lines[2]["body"] is None
