"""`jarvis ask` on a terminal (a pseudo-terminal, issue 25, item 8): stdout holds only the
answer, a stderr line never shares a line with streamed text, the waiting line shows the
elapsed time, colour on a terminal only and never with NO_COLOR."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from jarvis.testing import FakeOpenAIServer, reply, tool_call

COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def slow(seconds: float, item):
    """A script item answered after `seconds` (the model thinking)."""
    def answer(request):
        time.sleep(seconds)
        return item
    return answer


def script():
    return [reply("Let me check.", tool_calls=[tool_call("calculator", {"expression": "0.15*340"})]),
            slow(1.6, "15% of 340 is 51.")]


def run_in_pty(env: dict[str, str], cwd: Path, *args: str) -> str:
    child = pexpect.spawn(sys.executable, ["-m", "jarvis.cli", *args], env=env, cwd=str(cwd),
                          encoding="utf-8", timeout=60, dimensions=(40, 200))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before


@pytest.fixture
def engine_env(cli_env):
    def make(items):
        server = FakeOpenAIServer(items)
        server.start()
        servers.append(server)
        return dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=server.url, JARVIS_MODEL="test-model")

    servers: list[FakeOpenAIServer] = []
    yield make
    for server in servers:
        server.stop()


def test_on_a_terminal_lines_do_not_collide_and_colour_is_used(engine_env, tmp_path) -> None:
    env = engine_env(script())
    env.pop("NO_COLOR", None)
    env["TERM"] = "xterm-256color"
    out = run_in_pty(env, tmp_path, "ask", "--tools", "calculator", "What is 15% of 340?")
    plain = COLOUR.sub("", out)
    # The streamed "Let me check." is ended before the tool line, on the terminal.
    assert re.search(r"Let me check\.\r?\n\[tool\] calculator", plain), repr(plain)
    assert "Let me check.[tool]" not in plain
    assert "\x1b[36m[tool]\x1b[0m" in out  # colour on a terminal
    # The waiting line counts the seconds of the slow second reply.
    assert re.search(r"… waiting for test-model  1s", plain), repr(plain)
    assert "15% of 340 is 51." in plain


def test_no_color_turns_colour_off(engine_env, tmp_path) -> None:
    env = engine_env(script())
    env.update(NO_COLOR="1", TERM="xterm-256color")
    out = run_in_pty(env, tmp_path, "ask", "--tools", "calculator", "What is 15% of 340?")
    assert not COLOUR.search(out), repr(out)
    assert "[tool] calculator" in out and "15% of 340 is 51." in out


def test_piped_stdout_holds_only_the_answer_and_stderr_no_escapes(engine_env, tmp_path) -> None:
    env = engine_env(script())
    env.pop("NO_COLOR", None)
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", "--tools", "calculator",
                          "What is 15% of 340?"], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Let me check.\n\n15% of 340 is 51.\n"
    assert "\x1b" not in out.stderr and "waiting" not in out.stderr


def test_a_warning_starts_on_its_own_line(engine_env, tmp_path) -> None:
    env = engine_env(["The answer streams without a newline"])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env["JARVIS_RUNS_DB"] = str(blocker / "runs.db")  # cannot be created: the run is not logged
    out = COLOUR.sub("", run_in_pty(env, tmp_path, "ask", "hello there"))
    assert re.search(r"The answer streams without a newline\r?\njarvis: warning: the run was "
                     r"not recorded", out), repr(out)


def test_error_lines_are_red_on_a_terminal_only(cli_env, tmp_path) -> None:
    env = dict(cli_env, TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    child = pexpect.spawn(sys.executable, ["-m", "jarvis.cli", "tools", "run", "calculator",
                                           "expression=1/0"], env=env, cwd=str(tmp_path),
                          encoding="utf-8", timeout=60)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert "\x1b[31;1mError (execution):\x1b[0m division by zero" in child.before
    piped = subprocess.run([sys.executable, "-m", "jarvis.cli", "tools", "run", "calculator",
                            "expression=1/0"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert piped.stderr == "Error (execution): division by zero\n"


