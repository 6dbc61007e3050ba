"""End to end: a workspace (config.toml + agents/x.toml + tools/y.py) used by `jarvis ask
--agent` in a real subprocess and by `Jarvis().ask_full(agent=...)`, against the loopback
OpenAI-compatible server. The server records what the model was sent."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from jarvis.testing import FakeOpenAIServer, reply, tool_call

AGENT = '''
name = "scribe"
description = "Shouts on request."
base = "orchestrator"
model = "test-model"
instructions = "You are SCRIBE-7, a workspace agent. Use shout_marker when asked to shout."
tools = ["shout_marker"]
max_turns = 4
'''

TOOL = '''
from pathlib import Path

from jarvis import tool


@tool
def shout_marker(text: str) -> str:
    """Shout a text and leave a marker file next to this tool.

    Args:
        text: What to shout.
    """
    Path(__file__).with_name("ran.txt").write_text(text)
    return text.upper() + "!!"
'''


def make_workspace(root: Path, base_url: str) -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "tools").mkdir()
    (root / "config.toml").write_text(textwrap.dedent(f'''
        [engine]
        default = "openai"
        model = "test-model"
        max_retries = 0

        [engine.hosts]
        openai = "{base_url}"

        [memory]
        context = false
    '''))
    (root / "agents" / "scribe.toml").write_text(AGENT)
    (root / "tools" / "shouting.py").write_text(TOOL)
    return root


def script() -> list:
    return [reply(tool_calls=[tool_call("shout_marker", {"text": "hello workspace"})]),
            "Done: HELLO WORKSPACE!!"]


def check_requests(requests: list[dict], workspace: Path) -> None:
    assert len(requests) == 2
    first = requests[0]
    system = [m for m in first["messages"] if m["role"] == "system"]
    assert system and "You are SCRIBE-7" in system[0]["content"]
    assert [t["function"]["name"] for t in first["tools"]] == ["shout_marker"]
    assert first["model"] == "test-model"
    tool_messages = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert tool_messages and tool_messages[0]["content"] == "HELLO WORKSPACE!!"
    assert (workspace / "tools" / "ran.txt").read_text() == "hello workspace"


def test_cli_ask_with_workspace_agent(tmp_path: Path, cli_env: dict[str, str]) -> None:
    with FakeOpenAIServer(script()) as server:
        ws = make_workspace(tmp_path / "ws", server.base_url)
        env = {**cli_env, "OPENAI_API_KEY": "test-key"}
        result = subprocess.run(
            [sys.executable, "-m", "jarvis.cli", "ask", "--agent", "scribe", "--json",
             "Shout hello workspace"],
            env=env, cwd=ws, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["content"] == "Done: HELLO WORKSPACE!!"
        assert out["agent"] == "scribe"
        assert [(t["tool_name"], t["success"]) for t in out["tool_results"]] == [
            ("shout_marker", True)]
        check_requests(server.requests, ws)


def test_sdk_ask_full_with_workspace_agent(tmp_path: Path) -> None:
    from jarvis import Jarvis

    with FakeOpenAIServer(script()) as server:
        ws = make_workspace(tmp_path / "ws", server.base_url)
        with Jarvis(config_path=ws / "config.toml") as j:
            out = j.ask_full("Shout hello workspace", agent="scribe")
        assert out["content"] == "Done: HELLO WORKSPACE!!"
        assert out["tool_results"][0]["content"] == "HELLO WORKSPACE!!"
        check_requests(server.requests, ws)


def test_cli_ask_with_broken_agent_file_is_one_line_error(tmp_path: Path,
                                                         cli_env: dict[str, str]) -> None:
    ws = make_workspace(tmp_path / "ws", "http://127.0.0.1:9/v1")
    (ws / "agents" / "scribe.toml").write_text(AGENT.replace("max_turns", "max_turn"))
    result = subprocess.run(
        [sys.executable, "-m", "jarvis.cli", "ask", "--agent", "scribe", "hi"],
        env={**cli_env, "OPENAI_API_KEY": "test-key"}, cwd=ws, capture_output=True, text=True,
        timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "scribe.toml" in result.stderr and "unknown key 'max_turn'" in result.stderr


def test_example_daily_briefing_agent_runs_with_example_tools(tmp_path: Path,
                                                              cli_env: dict[str, str]) -> None:
    """The shipped agents/daily_briefing.toml with the shipped tools/clock.py."""
    import shutil

    repo = Path(__file__).resolve().parent.parent
    with FakeOpenAIServer([reply(tool_calls=[tool_call("current_time", {"timezone": "UTC"})]),
                           "- Nothing urgent today."]) as server:
        ws = tmp_path / "ws"
        shutil.copytree(repo / "agents", ws / "agents")
        shutil.copytree(repo / "tools", ws / "tools", ignore=shutil.ignore_patterns("__pycache__"))
        (ws / "config.toml").write_text(textwrap.dedent(f'''
            [engine]
            default = "openai"
            model = "test-model"
            [engine.hosts]
            openai = "{server.base_url}"
        '''))
        result = subprocess.run(
            [sys.executable, "-m", "jarvis.cli", "ask", "--agent", "daily_briefing", "--json",
             "Brief me for today."],
            env={**cli_env, "OPENAI_API_KEY": "test-key"}, cwd=ws, capture_output=True,
            text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["content"] == "- Nothing urgent today."
        (current,) = out["tool_results"]
        assert current["tool_name"] == "current_time" and current["success"]
        sent = server.requests[0]
        assert {t["function"]["name"] for t in sent["tools"]} == {
            "current_time", "date_diff", "memory_search"}
        assert "morning briefing" in sent["messages"][0]["content"]
