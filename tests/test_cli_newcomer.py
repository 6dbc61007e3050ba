"""A newcomer's walk through the CLI (issue 16): each papercut, through a real subprocess."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jarvis.testing import FakeOpenAIServer, HTTPFailure, reply, tool_call


def jarvis(env: dict[str, str], *args: str, stdin: str | None = None,
           timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, text=True,
                          capture_output=True, timeout=timeout,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)


@pytest.fixture
def env(cli_env):
    cli_env["JARVIS_ENGINE"] = "vllm"
    cli_env["JARVIS_MODEL"] = "test-model"
    return cli_env


def _point(env: dict[str, str], server: FakeOpenAIServer) -> dict[str, str]:
    env["VLLM_HOST"] = server.url
    return env


# --- the question from stdin ---------------------------------------------------------------
@pytest.mark.parametrize("args", [(), ("-",)])
def test_ask_reads_the_question_from_stdin(env, args):
    with FakeOpenAIServer(["four"]) as server:
        out = jarvis(_point(env, server), "ask", *args, stdin="What is 2+2?\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "four\n"
    assert server.requests[0]["messages"][-1]["content"] == "What is 2+2?"


def test_ask_with_an_empty_stdin_is_a_usage_error(env):
    out = jarvis(env, "ask", stdin="   \n")
    assert out.returncode == 2 and "the question on stdin is empty" in out.stderr
    assert "Traceback" not in out.stderr


# --- stops without an answer ---------------------------------------------------------------
def test_max_turns_stop_exits_3_and_keeps_stdout_for_answers(env):
    script = [reply(tool_calls=[tool_call("calculator", {"expression": "1+1"})])]
    with FakeOpenAIServer(script) as server:
        out = jarvis(_point(env, server), "ask", "--no-stream", "--max-turns", "1", "--tools",
                     "calculator", "x")
    assert out.returncode == 3
    assert out.stdout == ""  # no canned "Stopped after ..." text posing as an answer
    assert "stopped at max_turns" in out.stderr and "exit code 3" in out.stderr


def test_loop_guard_stop_exits_3(env):
    same = reply(tool_calls=[tool_call("calculator", {"expression": "1+1"})])
    with FakeOpenAIServer([same] * 6, default=same) as server:
        out = jarvis(_point(env, server), "ask", "--no-stream", "--max-turns", "8", "--tools",
                     "calculator", "x")
    assert out.returncode == 3, out.stderr
    assert out.stdout == "" and "kept repeating the same tool call" in out.stderr


# --- the run log after the answer ----------------------------------------------------------
def test_an_unwritable_run_log_folder_warns_keeps_the_answer_and_names_the_folder(env, tmp_path):
    Path("config.toml").write_text('[runs]\ndb_path = "/proc/no-such/runs.db"\n')
    with FakeOpenAIServer(["the answer"]) as server:
        out = jarvis(_point(env, server), "ask", "hi")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "the answer\n"
    assert "the run was not recorded" in out.stderr
    assert "Make the folder /proc/no-such writable" in out.stderr
    assert "Move the file aside" not in out.stderr and "Traceback" not in out.stderr


# --- engine errors ---------------------------------------------------------------------------
class _HtmlErrors(BaseHTTPRequestHandler):
    status = 501
    hits = 0

    def log_message(self, *args):  # noqa: ANN002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._html()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).hits += 1
        self._html()

    def _html(self) -> None:
        body = (b"<!DOCTYPE html><html><head><title>501 Not Implemented</title></head><body>"
                b"<h1>Not Implemented</h1><p>" + b"x" * 2000 + b"</p></body></html>")
        self.send_response(self.status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_an_html_501_is_one_short_line_and_not_retried(env):
    _HtmlErrors.hits = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlErrors)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env["VLLM_HOST"] = f"http://127.0.0.1:{server.server_address[1]}"
        out = jarvis(env, "ask", "--no-context", "hi")
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 1
    line = out.stderr.strip()
    assert "\n" not in line and "501" in line and "Traceback" not in line
    assert "<" not in line and "xxxx" not in line  # no markup dumped into the message
    assert "HTML error page: 501 Not Implemented" in line
    assert _HtmlErrors.hits == 1  # 501 says the same every time: no retries


# --- status line -----------------------------------------------------------------------------
def test_status_line_only_on_a_terminal(env):
    script = ["piped answer", HTTPFailure(503, "busy", retry_after=0), "piped answer"]
    with FakeOpenAIServer(script) as server:
        piped = jarvis(_point(env, server), "ask", "hi")
        assert piped.returncode == 0 and "waiting for" not in piped.stderr
        master, slave = pty.openpty()
        try:
            proc = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", "hi"],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=slave, text=True, timeout=30)
            os.close(slave)
            seen = b""
            while select.select([master], [], [], 0.5)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
        finally:
            os.close(master)
    assert proc.returncode == 0 and proc.stdout == "piped answer\n"
    text = seen.decode()
    assert "waiting for test-model" in text and "\r\x1b[K" in text  # shown, then erased
    assert "HTTP 503 from vllm; retry 1 of 3" in text  # retries show there too


# --- memory context --------------------------------------------------------------------------
def test_memory_context_is_announced_before_the_answer_and_only_when_relevant(env, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("The wifi password is hunter2.\n\nExample: What is 15% of 340?\n")
    assert jarvis(env, "memory", "index", str(notes)).returncode == 0
    with FakeOpenAIServer(["hunter2", "51"]) as server:
        proc = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", "wifi password?"],
                              env=_point(env, server), stdin=subprocess.DEVNULL, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        assert proc.returncode == 0
        lines = proc.stdout.splitlines()
        assert lines[0].startswith("[memory] context from: ") and lines[-1] == "hunter2"
        unrelated = jarvis(env, "ask", "What is 15% of 340?")
        assert unrelated.returncode == 0 and "[memory]" not in unrelated.stderr
        system = server.requests[1]["messages"][0]
        assert system["role"] != "system" or "hunter2" not in system["content"]
    shown = json.loads(jarvis(env, "config", "show", "--json").stdout)
    assert shown["values"]["memory.context_min_match"]["value"] == 0.5


# --- models, --config after the subcommand, did-you-mean -------------------------------------
def test_models_lists_the_engines_models(env):
    with FakeOpenAIServer([], models=["alpha", "beta"]) as server:
        out = jarvis(_point(env, server), "models")
        as_json = jarvis(env, "models", "--json")
    assert out.returncode == 0 and out.stdout == "alpha\nbeta\n"
    assert json.loads(as_json.stdout) == {"engine": "vllm", "models": ["alpha", "beta"]}


def test_config_and_verbose_work_after_the_subcommand(env, tmp_path):
    config = tmp_path / "elsewhere.toml"
    config.write_text("[agent]\nmax_turns = 7\n")
    before = jarvis(env, "--config", str(config), "config", "show", "--json")
    after = jarvis(env, "config", "show", "--json", "--config", str(config))
    assert before.returncode == after.returncode == 0, after.stderr
    shown = json.loads(after.stdout)
    assert shown["config_file"] == str(config)
    assert shown["values"]["agent.max_turns"]["value"] == 7
    assert shown == json.loads(before.stdout)


@pytest.mark.parametrize("args, words", [
    (("aks", "hi"), "Did you mean 'ask'?"),
    (("ask", "-a", "reakt", "hi"), "did you mean 'react'?"),
    (("ask", "-e", "olama", "hi"), "did you mean 'ollama'"),
    (("tools", "show", "calculater"), "did you mean 'calculator'?"),
])
def test_did_you_mean_for_commands_agents_engines_and_tools(env, args, words):
    out = jarvis(env, *args)
    assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr


# --- listings and counts ---------------------------------------------------------------------
def test_runs_list_has_aligned_columns_under_a_header(env):
    with FakeOpenAIServer(["a", "bb", "ccc"]) as server:
        for question in ("one", "a longer question", "x"):
            assert jarvis(_point(env, server), "ask", question).returncode == 0
    out = jarvis(env, "runs", "list")
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["ID", "STARTED", "STATUS"] and "TOOL CALLS" in lines[0]
    assert "tools=" not in out.stdout
    starts = {line.index(" ok ") for line in lines[1:]}
    assert len(starts) == 1  # the status column starts at the same place on every row
    assert len({line.index("test-model") for line in lines[1:]}) == 1


def test_memory_db_on_a_missing_file_says_so(env, tmp_path):
    missing = tmp_path / "typo.db"
    for args in (("stats",), ("search", "anything")):
        out = jarvis(env, "memory", "--db", str(missing), *args)
        assert out.returncode == 2 and f"no memory database at {missing}" in out.stderr
    assert not missing.exists()


def test_one_item_counts_are_singular_and_limit_is_named_alike(env, tmp_path):
    note = tmp_path / "one.md"
    note.write_text("a single short note about tulips\n")
    assert jarvis(env, "memory", "index", str(note)).returncode == 0
    stats = jarvis(env, "memory", "stats", "--sources")
    assert "(1 indexed file)" in stats.stdout and "1 chunk  " in stats.stdout
    for args in (("memory", "search", "tulips", "--limit", "1"), ("runs", "list", "-n", "1"),
                 ("memory", "search", "tulips", "-n", "1")):
        assert jarvis(env, *args).returncode == 0, args


# --- tracebacks turned into one line ---------------------------------------------------------
def test_memory_db_folder_that_cannot_be_created_is_one_line(env):
    env["JARVIS_MEMORY_DB"] = "/proc/x/m.db"
    out = jarvis(env, "memory", "stats")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "cannot create the folder for memory database /proc/x/m.db" in out.stderr


@pytest.mark.parametrize("content, words", [
    (None, "cannot read --script"),
    ("[1,", "is not valid JSON"),
    ('{"content": "x"}', "expected a JSON list"),
    ('[{"contnet": "x"}]', "reply 1 has unknown key(s) contnet"),
    ("[3]", "reply 1 is a int"),
])
def test_testing_serve_script_problems_are_one_line(tmp_path, content, words):
    script = tmp_path / "script.json"
    if content is not None:
        script.write_text(content)
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "jarvis.testing", "serve", "--script",
                          str(script)], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - started < 30
    assert out.returncode != 0 and words in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("client", ["http", "openai"])
def test_both_engine_clients_keep_html_out_and_do_not_retry_a_501(client):
    from jarvis.engine.openai_compat import OpenAICompatEngine
    from jarvis.errors import EngineError

    _HtmlErrors.hits = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlErrors)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        engine = OpenAICompatEngine("vllm", f"http://127.0.0.1:{server.server_address[1]}",
                                    model="m", client=client, retry_backoff=0)
        with pytest.raises(EngineError) as info:
            engine.generate([{"role": "user", "content": "hi"}])
        engine.close()
    finally:
        server.shutdown()
        server.server_close()
    message = str(info.value)
    assert "<" not in message and "xxxx" not in message and "501" in message
    assert "HTML error page: 501 Not Implemented" in message
    assert _HtmlErrors.hits == 1
