"""docs/tools.md must really work: its Python blocks run and print what the comments say, and
its `jarvis tools` commands behave as shown."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "tools.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def expected_output(source: str) -> list[str]:
    """Comment lines that directly follow a code line are the output that code prints."""
    out: list[str] = []
    previous = ""
    in_output = False
    for line in source.splitlines():
        if line.startswith("# "):
            if in_output or (previous.strip() and not previous.startswith("#")):
                out.append(line[2:])
                in_output = True
        else:
            in_output = False
        previous = line
    return out


def matches(expected: str, actual: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


PYTHON_BLOCKS = blocks("python")


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_examples_print_what_the_doc_says(index):
    source = PYTHON_BLOCKS[index]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, f"docs/tools.md block {index}", "exec"), {"__name__": f"doc{index}"})
    got = printed.getvalue().splitlines()
    want = expected_output(source)
    assert len(got) == len(want), (got, want)
    for w, g in zip(want, got, strict=True):
        assert matches(w, g), (w, g)


def jarvis(env: dict[str, str], command: str) -> subprocess.CompletedProcess:
    args = shlex.split(command)
    assert args[0] == "jarvis"
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args[1:]], capture_output=True,
                          text=True, env=env, timeout=60)


def test_quick_commands_work(cli_env):
    commands = [line.split("#")[0].strip() for line in blocks("bash")[0].splitlines()
                if line.startswith("jarvis ")]
    assert len(commands) == 3
    for command in commands:
        proc = jarvis(cli_env, command)
        assert proc.returncode == 0, (command, proc.stderr)
    assert jarvis(cli_env, commands[2]).stdout == "21.0\n"


def test_cli_transcript(cli_env):
    transcript = [b for b in blocks("text") if b.startswith("$ jarvis tools run")][0]
    lines = transcript.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("$ "):
            proc = jarvis(cli_env, line[2:])
            expected = lines[i + 1]
            assert proc.returncode != 0 and proc.stdout == ""
            assert matches(expected, proc.stderr.strip()), (expected, proc.stderr)
