"""docs/engines-agents.md runs as written, against the loopback OpenAI-compatible server of
`jarvis.testing` standing in for ollama: only endpoints change (OLLAMA_HOST, PATH), never the
examples. Not run: `ollama serve &` and `ollama pull qwen3:8b` (they need the ollama binary and
a model download; the fake server plays the ollama that those two lines start)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.testing import FakeOpenAIServer, reply, tool_call

DOC = (Path(__file__).resolve().parent.parent / "docs" / "engines-agents.md").read_text("utf-8")
BIN = str(Path(sys.executable).parent)  # where pip put the `jarvis` script beside python


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.S)


def printed_by(source: str, name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, f"docs/engines-agents.md ({name})", "exec"), {"__name__": name})
    return out.getvalue()


def ollama_like(body: dict):
    """A model that uses the tools it is offered: native tool calls when the request carries
    tools, the ReAct text format when the tools are only described in the prompt."""
    messages = body.get("messages", [])
    question = next(m["content"] for m in messages if m.get("role") == "user")
    if "2x + 5 = 13" in question:  # the react agent: tools in the prompt, answers in text
        if any("Observation" in str(m.get("content")) for m in messages[1:]
               if m.get("role") == "user") or len(messages) > 2:
            return "Thought: 2x = 8.\nFinal Answer: x = 4"
        return ('Thought: subtract 5, divide by 2.\nAction: calculator\n'
                'Action Input: {"expression": "(13 - 5) / 2"}')
    results = [m.get("content") for m in messages if m.get("role") == "tool"]
    if results:
        return f"The answer is {results[-1]}."
    names = [t["function"]["name"] for t in body.get("tools") or []]
    if "calculator" in names and "15%" in question:
        return reply(tool_calls=[tool_call("calculator", {"expression": "0.15 * 340"})])
    if "calculator" in names and "radius 7" in question:
        return reply(tool_calls=[tool_call("calculator", {"expression": "3.14159 * 7 ** 2"})])
    return "Paris."


@pytest.fixture
def ollama(monkeypatch):
    """The fake server where ollama would be; OLLAMA_HOST points there (the doc's 'host
    variable'), nothing else names an engine: jarvis finds it as it would find ollama."""
    with FakeOpenAIServer(default=ollama_like, models=["qwen3:8b"]) as server:
        for name in ("JARVIS_ENGINE", "JARVIS_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                     "JARVIS_CONFIG"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        monkeypatch.setenv("PATH", BIN + os.pathsep + os.environ.get("PATH", ""))
        yield server


def run(command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    args = shlex.split(command)
    assert args[0] == "jarvis", command
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args[1:]], capture_output=True,
                          text=True, env=dict(os.environ), timeout=60, input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def test_quick_start_commands(ollama, cli_env):
    (block,) = [b for b in blocks("bash") if "ollama pull" in b]
    commands = [line.split("  #")[0].strip() for line in block.splitlines()
                if line.startswith("jarvis ")]
    assert len(commands) == 3
    answers = [run(c) for c in commands]
    for command, out in zip(commands, answers, strict=True):
        assert out.returncode == 0, (command, out.stderr)
    assert answers[0].stdout == "Paris.\n"
    assert answers[1].stdout == "The answer is 51.0.\n"
    assert "[tool] calculator" in answers[1].stderr
    assert answers[2].stdout.strip() == "x = 4"
    assert "[tool] calculator" in answers[2].stderr  # the react agent really used the tool
    assert {r["model"] for r in ollama.requests} == {"qwen3:8b"}  # the model ollama lists


def test_sdk_quick_start(ollama, cli_env):
    (block,) = [b for b in blocks("python") if "with Jarvis() as j" in b]
    lines = printed_by(block, "doc_sdk").splitlines()
    assert lines[0].startswith("  calculator: 153.93") and lines[0].endswith("(success=True)")
    answer, rest = lines[-1].split(" {", 1)
    assert answer.startswith("The answer is 153.93") and "'total_tokens'" in rest
    run_id = rest.rsplit("} ", 1)[1]
    shown = run(f"jarvis runs show {run_id} --json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["agent"] == "orchestrator"


def test_message_parts_example_prints_what_it_says():
    (block,) = [b for b in blocks("python") if "ImageBlock" in b]
    expected = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    assert printed_by(block, "doc_parts").splitlines() == expected


def test_scripted_engine_example():
    (block,) = [b for b in blocks("python") if "OrchestratorAgent(engine" in b]
    assert printed_by(block, "doc_scripted").startswith("It is 42. 2 ")


def test_testing_kit_example_runs_the_installed_jarvis_command(ollama):
    # It runs `jarvis` by name: PATH (set by the fixture) finds the script pip installed.
    (block,) = [b for b in blocks("python") if "subprocess.run([\"jarvis\"" in b]
    printed_by(block, "doc_kit")  # its own asserts are the test


def test_ask_synopsis_options_exist_and_stdin_and_models_work(ollama, cli_env):
    synopsis = re.search(r"```\n(jarvis ask QUERY.*?)```", DOC, flags=re.S).group(1)
    ask_help = run("jarvis ask --help").stdout
    models_help = run("jarvis models --help").stdout
    for line in synopsis.splitlines():
        usage = line.split("#")[0]
        helptext = models_help if "jarvis models" in usage else ask_help
        for option in re.findall(r"--?[a-z][a-z-]*", usage):
            assert re.search(rf"(^|[\s,/]){re.escape(option)}\b", helptext), (option, line)
    # `echo QUERY | jarvis ask [OPTIONS]`, `jarvis ask - [OPTIONS]` and `jarvis models`:
    piped = run("jarvis ask --no-stream", stdin="What is the capital of France?\n")
    dash = run("jarvis ask - --json", stdin="What is the capital of France?\n")
    models = run(f"jarvis models -e ollama --host {ollama.url} --json")
    assert piped.returncode == 0 and piped.stdout == "Paris.\n", piped.stderr
    assert dash.returncode == 0 and json.loads(dash.stdout)["content"] == "Paris."
    assert models.returncode == 0, models.stderr
    assert "qwen3:8b" in models.stdout


def test_run_log_commands(ollama, cli_env):
    assert run('jarvis ask "What is the capital of France?"').returncode == 0
    (block,) = [b for b in blocks("bash") if "jarvis runs list" in b]
    commands = [re.sub(r"[\[\]]", "", line.split("  #")[0]).strip()
                for line in block.splitlines()]
    assert commands == ["jarvis runs list -n 20 --source cli --json", "jarvis runs show ID --json"]
    listed = run(commands[0])
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)
    prefix = entry["id"][:8]  # "an unambiguous id prefix is enough"
    shown = run(commands[1].replace("ID", prefix))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["content"] == "Paris."
