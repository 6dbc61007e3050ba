"""docs/serve.md runs as written: its Python blocks, and its console transcripts run in bash
(`$ ` lines are commands, the lines after them what they print; `...` stands for anything).

Only endpoints are adapted, never the examples: the engine is the loopback server of
`jarvis.testing` (found through OLLAMA_HOST, as ollama would be), `jarvis serve` takes a free
port from `[serve] port = 0` in the workspace's config.toml, and the port 8765 of the
transcripts and client examples is replaced by that port (tests never bind fixed ports).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jarvis.testing import FakeOpenAIServer, reply, tool_call

DOC = (Path(__file__).resolve().parent.parent / "docs" / "serve.md").read_text("utf-8")
BASH = "/bin/bash"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.S)


def transcript(containing: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of the console block holding `containing`; a line
    ending in a backslash continues the command."""
    (block,) = [b for b in blocks("console") if containing in b]
    steps: list[tuple[str, list[str]]] = []
    lines = iter(block.splitlines())
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + next(lines).strip()
            steps.append((command, []))
        else:
            steps[-1][1].append(line)
    return steps


def matches(expected: str, actual: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


def run_in_bash(commands: list[str], env: dict[str, str], cwd: Path,
                timeout: float = 120) -> list[subprocess.CompletedProcess]:
    """Run the commands one by one in ONE bash (variables such as $SID carry over), with
    `jarvis` being this Python's jarvis; each one's stdout and stderr apart."""
    marker = "@@doc-step@@"
    script = ['jarvis() { "$JARVIS_PY" -m jarvis.cli "$@"; }']
    for command in commands:
        script += [command, f'echo "{marker} $?"; echo "{marker}" >&2']
    proc = subprocess.run([BASH, "-c", "\n".join(script)], env=dict(env, JARVIS_PY=sys.executable),
                          cwd=cwd, text=True, capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    outs = proc.stdout.split(marker)
    errs = proc.stderr.split(marker + "\n")
    results = []
    for i, command in enumerate(commands):
        code_and_next = outs[i + 1].lstrip(" ")
        code = int(code_and_next.split("\n", 1)[0])
        stdout = outs[i] if i == 0 else outs[i].split("\n", 1)[1]
        results.append(subprocess.CompletedProcess(command, code, stdout, errs[i]))
    return results


def model(body: dict):
    """The engine: uses the tools it is offered, then answers with what they gave."""
    messages = body.get("messages", [])
    question = [m for m in messages if m.get("role") == "user"][-1]["content"]
    results = [m.get("content") for m in messages if m.get("role") == "tool"]
    if results:
        return f"It is {results[-1].strip()}."
    names = [t["function"]["name"] for t in body.get("tools") or []]
    if "Fibonacci" in question and "repl" in names:
        code = "a, b = 0, 1\nfor _ in range(40):\n    a, b = b, a + b\na"
        return reply(tool_calls=[tool_call("repl", {"code": code})])
    if "15%" in question and "calculator" in names:
        return reply(tool_calls=[tool_call("calculator", {"expression": "0.15 * 340"})])
    return "Hello!"


@pytest.fixture
def env(cli_env, tmp_path) -> Iterator[dict[str, str]]:
    with FakeOpenAIServer(default=model, models=["qwen3:8b"]) as server:
        environment = dict(cli_env, OLLAMA_HOST=server.url)
        for name in ("JARVIS_ENGINE", "JARVIS_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                     "JARVIS_CONFIG", "JARVIS_SANDBOX", "JARVIS_API_KEY"):
            environment.pop(name, None)
        environment["FAKE_ENGINE_URL"] = server.url
        yield environment


def test_the_resource_example_defines_a_tool_that_keeps_its_pad():
    (block,) = [b for b in blocks("python") if "ResourceSpec(" in b]
    namespace: dict = {"__name__": "doc_serve_resources"}
    exec(compile(block, "docs/serve.md (resources)", "exec"), namespace)
    from jarvis.core.types import ToolCall
    from jarvis.tools.executor import ToolExecutor

    note = namespace["note"]
    result = ToolExecutor([note]).execute(ToolCall(id="1", name="note",
                                                   arguments={"text": "first line"}))
    assert result.success and result.content == "first line", result.content


def test_repl_transcript(env, tmp_path):
    steps = transcript('jarvis tools run repl')
    outs = run_in_bash([c for c, _ in steps], env, tmp_path)
    for (command, expected), out in zip(steps, outs, strict=True):
        assert out.returncode == 0, (command, out.stderr)
        if expected:
            assert out.stdout.splitlines() == expected, (command, out.stdout)
    assert outs[1].stdout.strip() == "It is 102334155."  # the repl really computed fib(40)
    assert "[tool] repl" in outs[1].stderr


def test_doctor_transcript(env, tmp_path):
    ((command, expected),) = transcript("$ jarvis doctor")
    (out,) = run_in_bash([command], env, tmp_path)
    assert out.returncode == 0, out.stderr
    got = out.stdout.splitlines()[:len(expected)]  # the other checks follow (docs/workspace.md)
    # The same report; the figures are this machine's (the doc's machine has Landlock ABI 7).
    assert [line.split(":")[0] for line in got] == [line.split(":")[0] for line in expected]
    assert got[0].startswith("sandbox: ") and got[1] == expected[1]


def test_no_sandbox_transcript(env, tmp_path):
    ((command, expected),) = transcript("JARVIS_SANDBOX=bwrap")
    # "When no mechanism works": a PATH where bubblewrap cannot be found.
    empty = tmp_path / "bin"
    empty.mkdir()
    no_bwrap = dict(env, PATH=str(empty))  # jarvis itself is run by its full path
    (out,) = run_in_bash([command], no_bwrap, tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.splitlines() == expected


@contextlib.contextmanager
def serving(env: dict[str, str], work: Path) -> Iterator[tuple[int, list[str]]]:
    """`jarvis serve --tools think,calculator,repl --yes` exactly as the doc starts it, on the
    free port `[serve] port = 0` gives; yields (port, the lines it printed on stderr)."""
    ((command, expected),) = transcript("$ jarvis serve")
    (work / "config.toml").write_text("[serve]\nport = 0\n", encoding="utf-8")
    proc = subprocess.Popen([BASH, "-c", f'exec "$JARVIS_PY" -m jarvis.cli {command[7:]}'],
                            env=dict(env, JARVIS_PY=sys.executable), cwd=work, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if len(lines) >= len(expected):
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(30), f"jarvis serve did not start: {lines}"
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", lines[0])
        assert found, lines
        port = int(found.group(1))
        assert lines[: len(expected)] == [e.replace("8765", str(port)) for e in expected]
        yield port, lines
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        reader.join(10)  # it reads to the end of the stream, which comes with the exit
        proc.stderr.close()


def test_serve_ors_curl_and_client_examples(env, tmp_path):
    work = tmp_path / "serve"
    work.mkdir()
    with serving(env, work) as (port, _):
        steps = transcript("curl -s localhost:8765/jarvis/tools")
        commands = [c.replace("8765", str(port)) for c, _ in steps]
        outs = run_in_bash(commands, env, work)
        for (command, expected), out in zip(steps, outs, strict=True):
            assert out.returncode == 0, (command, out.stderr)
            if expected:
                got = out.stdout.rstrip("\n").splitlines()  # SSE ends with a blank line
                assert len(got) == len(expected), (command, got, expected)
                for want, line in zip(expected, got, strict=True):
                    # ids and timings differ from run to run
                    want = re.sub(r"\b[0-9a-f]{32}\b", "...", want)
                    want = re.sub(r'"seconds": [0-9.]+', '"seconds": ...', want)
                    assert matches(want, line), (command, want, line)
        tools = json.loads(outs[1].stdout)["tools"]
        assert [t["name"] for t in tools] == ["think", "calculator", "repl"]
        # Without the owner's token: refused (another user of this machine has none).
        assert json.loads(outs[-1].stdout)["detail"].startswith("this server answers only")

        (client,) = [b for b in blocks("python") if "from ors.client import" in b]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(client.replace("8765", str(port)), "docs/serve.md (ors)", "exec"),
                 {"__name__": "doc_serve_ors"})
        assert printed.getvalue().splitlines() == ["['think', 'calculator', 'repl']", "42", ""]


def test_serve_openai_curl_and_client_examples(env, tmp_path):
    work = tmp_path / "serve"
    work.mkdir()
    with serving(env, work) as (port, _):
        steps = transcript("localhost:8765/v1/models")
        outs = run_in_bash([c.replace("8765", str(port)) for c, _ in steps], env, work)
        for (command, expected), out in zip(steps, outs, strict=True):
            assert out.returncode == 0, (command, out.stderr)
            if expected:
                assert [matches(w, g) for w, g in zip(expected, out.stdout.splitlines(),
                                                       strict=True)] == [True] * len(expected)
        answer = json.loads(outs[1].stdout)
        assert answer["choices"][0]["message"]["content"] == "It is 51.0."
        assert answer["jarvis"]["agent"] == "orchestrator"

        (client,) = [b for b in blocks("python") if "from openai import OpenAI" in b]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(client.replace("8765", str(port)), "docs/serve.md (openai)", "exec"),
                 {"__name__": "doc_serve_openai"})
        assert printed.getvalue() == "It is 51.0.\nHello!"


def test_every_block_of_the_doc_is_run_here():
    # Python and console blocks: each is picked by a test above (toml blocks are config shown
    # for reading; tests/test_sandbox.py and tests/test_serve_*.py cover their settings).
    assert len(blocks("python")) == 3
    assert len(blocks("console")) == 6
