"""`jarvis ask` and `jarvis runs` against the loopback server: in process (click's CliRunner,
tests/cli_support.py), and as real subprocesses end to end, for the time to fail without an
engine and without a terminal or on one."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import run_in_process
from ports import closed_port

from jarvis.testing import FakeOpenAIServer, HTTPFailure, reply, tool_call

LOCAL = ("OLLAMA_HOST", "VLLM_HOST", "LLAMACPP_HOST", "LMSTUDIO_HOST", "SGLANG_HOST")


def jarvis(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_in_process(args, env=env)


def jarvis_process(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def env(cli_env):
    cli_env["JARVIS_ENGINE"] = "vllm"
    cli_env["JARVIS_MODEL"] = "test-model"
    return cli_env


def _point(env: dict[str, str], server: FakeOpenAIServer) -> dict[str, str]:
    env["VLLM_HOST"] = server.url
    return env


PERCENT = [reply(tool_calls=[tool_call("calculator", {"expression": "0.15 * 340"})]),
           "15% of 340 is 51."]


def test_ask_with_calculator_end_to_end(env):
    with FakeOpenAIServer(PERCENT) as server:
        out = jarvis_process(_point(env, server), "ask", "--tools", "calculator", "What is 15% of 340?")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "15% of 340 is 51.\n"  # nothing but the answer
    assert "[tool] calculator" in out.stderr and "-> 51.0" in out.stderr
    first, second = server.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["calculator"]
    assert first["stream"] is True and first["messages"][-1]["content"] == "What is 15% of 340?"
    tool_msg = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool_msg[0]["content"] == "51.0"


def test_ask_json_and_the_run_log(env):
    with FakeOpenAIServer(PERCENT) as server:
        out = jarvis(_point(env, server), "ask", "--json", "--agent", "orchestrator", "--tools",
                     "calculator", "What is 15% of 340?")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["content"] == "15% of 340 is 51." and data["turns"] == 2
    assert data["engine"] == "vllm" and data["model"] == "test-model"
    assert data["tool_results"][0]["tool_name"] == "calculator"
    usage = data["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert server.requests[0].get("stream") is not True  # --json does not stream

    listed = jarvis(env, "runs", "list", "--json")
    runs = json.loads(listed.stdout)
    assert runs[0]["id"] == data["run_id"] and runs[0]["source"] == "cli"
    assert runs[0]["tool_calls"] == 1
    shown = jarvis(env, "runs", "show", data["run_id"][:6])
    assert shown.returncode == 0, shown.stderr
    assert "calculator" in shown.stdout and "15% of 340 is 51." in shown.stdout
    missing = jarvis(env, "runs", "show", "zzzz")
    assert missing.returncode == 2 and "no run" in missing.stderr


def test_no_stream_prints_the_answer_once(env):
    with FakeOpenAIServer(["plain answer"]) as server:
        out = jarvis(_point(env, server), "ask", "--no-stream", "hello")
    assert out.stdout == "plain answer\n"
    assert server.requests[0].get("stream") is not True
    assert server.requests[0].get("tools") is None


def test_react_agent_prints_only_the_final_answer(env):
    with FakeOpenAIServer(['Thought: math\nAction: calculator\nAction Input: {"expression": "6*7"}',
                           "Thought: done\nFinal Answer: 42"]) as server:
        out = jarvis(_point(env, server), "ask", "-a", "react", "--tools", "calculator", "6*7?")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "42\n"
    assert "Action" not in out.stdout and "[tool] calculator" in out.stderr


def test_no_engine_reachable_fails_fast_and_says_what_it_tried(cli_env):
    for var in LOCAL:
        cli_env[var] = f"http://127.0.0.1:{closed_port()}"
    start = time.perf_counter()
    jarvis_process(cli_env, "config", "show")  # start-up and config loading, for comparison
    baseline = time.perf_counter() - start
    start = time.perf_counter()
    out = jarvis_process(cli_env, "ask", "hello")
    elapsed = time.perf_counter() - start
    assert out.returncode != 0 and out.stdout == ""
    line = out.stderr.strip()
    assert "no inference engine is reachable (tried ollama" in line
    assert "\n" not in line and len(line) < 200 and "Traceback" not in out.stderr
    verbose = jarvis_process(cli_env, "ask", "--verbose", "hello")
    assert verbose.returncode == out.returncode
    assert cli_env["OLLAMA_HOST"] in verbose.stderr and "ollama serve" in verbose.stderr
    # Under 1.5 s on an idle machine (bench/bench_agent.py); here, on a shared and loaded
    # one, the part beyond plain start-up (probes bounded at 0.4 s, and `ask`'s own imports)
    # must stay within a few seconds: no retries, no waiting out connect timeouts.
    assert elapsed < 1.5 or elapsed - baseline < 3.0, (elapsed, baseline)


def test_unknown_tool_or_agent_is_an_error_listing_valid_names(env):
    env["VLLM_HOST"] = f"http://127.0.0.1:{closed_port()}"  # never contacted
    out = jarvis(env, "ask", "--tools", "calculater", "x")
    assert out.returncode == 2 and "unknown tool 'calculater'" in out.stderr
    assert "calculator" in out.stderr and "Traceback" not in out.stderr
    out = jarvis(env, "ask", "-a", "wizard", "x")
    assert out.returncode == 2 and "unknown agent 'wizard'" in out.stderr
    assert "orchestrator" in out.stderr


@pytest.mark.parametrize("host", ["not a url", "http://localhost:99999", "ftp://example"])
def test_unusable_engine_address_is_a_one_line_error(env, host):
    out = jarvis(env, "ask", "--host", host, "x")
    assert out.returncode == 2 and "is not a usable server address" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    env["VLLM_HOST"] = host  # the same through the environment
    out = jarvis(env, "ask", "x")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr


def test_engine_rejecting_tools_is_reported(env):
    with FakeOpenAIServer([HTTPFailure(400, "model gemma:2b does not support tools"),
                           "answer without tools"]) as server:
        out = jarvis(_point(env, server), "ask", "--tools", "calculator", "x")
    assert out.returncode == 1 and "rejected the tools" in out.stderr
    assert len(server.requests) == 1 and out.stdout == ""


def test_transient_errors_are_retried(env):
    Path("config.toml").write_text("[engine]\nretry_backoff = 0.01\n")
    with FakeOpenAIServer([HTTPFailure(503, "busy"), HTTPFailure(429, "slow"), "made it"]) as server:
        out = jarvis(_point(env, server), "ask", "hi")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "made it\n" and len(server.requests) == 3


DANGER = '''
from jarvis import tool

@tool(requires_confirmation=True)
def danger(target: str) -> str:
    """Touch a file (needs approval).

    Args:
        target: file name
    """
    open(target, "w").write("touched")
    return "touched " + target
'''


@pytest.mark.parametrize("flags,approved", [((), False), (("--yes",), True)])
def test_confirmation_tools_are_denied_without_a_terminal_and_approved_by_yes(env, flags, approved):
    Path("config.toml").write_text("")
    Path("tools").mkdir()
    Path("tools/danger.py").write_text(DANGER)
    with FakeOpenAIServer([reply(tool_calls=[tool_call("danger", {"target": "flag.txt"})]),
                           "finished"]) as server:
        out = jarvis_process(_point(env, server), "ask", *flags, "--tools", "danger", "touch it")
    assert out.returncode == 0, out.stderr
    assert Path("flag.txt").exists() is approved
    fed_back = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"][0]
    if approved:
        assert fed_back == "touched flag.txt"
    else:
        assert fed_back.startswith("ERROR (denied)") and "FAILED" in out.stderr


def test_ask_help_lists_the_flags(cli_env):
    out = jarvis(cli_env, "ask", "--help")
    for flag in ("--agent", "--tools", "--model", "--engine", "--json", "--no-stream",
                 "--max-turns", "--yes", "--system", "--no-context"):
        assert flag in out.stdout
    assert jarvis(cli_env, "runs", "--help").returncode == 0


@pytest.mark.parametrize("answer,approved", [("y", True), ("n", False)])
def test_confirmation_tools_ask_on_a_terminal(env, answer, approved):
    Path("config.toml").write_text("")
    Path("tools").mkdir()
    Path("tools/danger.py").write_text(DANGER)
    master, slave = pty.openpty()
    try:
        os.write(master, f"{answer}\n".encode())  # typed ahead; the tty buffers it
        with FakeOpenAIServer([reply(tool_calls=[tool_call("danger", {"target": "flag.txt"})]),
                               "finished"]) as server:
            out = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", "--tools", "danger",
                                  "touch it"], env=_point(env, server), stdin=slave, text=True,
                                 capture_output=True, timeout=30)
    finally:
        os.close(slave)
        os.close(master)
    assert out.returncode == 0, out.stderr
    assert "Allow tool danger" in out.stderr and '"target": "flag.txt"' in out.stderr
    assert Path("flag.txt").exists() is approved
    assert out.stdout == "finished\n"


def test_runs_show_says_when_a_run_stopped_at_max_turns(env):
    script = [reply(tool_calls=[tool_call("calculator", {"expression": "1+1"})])]
    with FakeOpenAIServer(script) as server:
        out = jarvis(_point(env, server), "ask", "--json", "--max-turns", "1", "--tools",
                     "calculator", "x")
    assert out.returncode == 3, out.stderr  # stopped without an answer (documented code)
    run_id = json.loads(out.stdout)["run_id"]
    shown = jarvis(env, "runs", "show", run_id)
    assert shown.returncode == 0 and "stopped: at max_turns" in shown.stdout


def test_a_broken_run_log_or_state_folder_is_a_one_line_error(env, tmp_path):
    home = tmp_path / "state"
    home.mkdir()
    (home / "runs.db").write_text("not a database")
    env["JARVIS_HOME"] = str(home)
    with FakeOpenAIServer(["hello"]) as server:
        out = jarvis(_point(env, server), "ask", "hi")
    # The answer was paid for: keep it, warn that it was not recorded, exit 0.
    assert out.returncode == 0 and out.stdout == "hello\n"
    assert "the run was not recorded: cannot use the run log" in out.stderr
    assert "Move the file aside" in out.stderr and "Traceback" not in out.stderr
    listed = jarvis(env, "runs", "list")
    assert listed.returncode == 2 and "Traceback" not in listed.stderr
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    env["JARVIS_HOME"] = str(in_the_way)
    with FakeOpenAIServer(["hello"]) as server:
        out = jarvis(_point(env, server), "ask", "hi")
    assert out.returncode == 2 and "point JARVIS_HOME at a writable folder" in out.stderr
    assert "Traceback" not in out.stderr
