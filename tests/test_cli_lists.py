"""Listings (issue 25, item 9): a header, aligned columns, lines fitted to the terminal (whole
lines in a pipe), costs only when a tool states one, memory search hits as snippets with the
match highlighted on a terminal (--full for whole chunks)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pexpect

COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def jarvis(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def in_pty(env: dict[str, str], cwd: Path, *args: str, columns: int = 80) -> list[str]:
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "NO_COLOR")}
    child = pexpect.spawn(sys.executable, ["-m", "jarvis.cli", *args], env=env, cwd=str(cwd),
                          encoding="utf-8", timeout=60, dimensions=(50, columns))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before.replace("\r\n", "\n").splitlines()


def test_tools_list_has_a_header_no_empty_costs_and_fits_the_terminal(cli_env, tmp_path):
    piped = jarvis(cli_env, tmp_path, "tools", "list")
    lines = piped.stdout.splitlines()
    assert lines[0].split() == ["NAME", "CATEGORY", "LATENCY", "CONFIRM", "DESCRIPTION"]
    assert "$0.0000" not in piped.stdout
    calc = next(line for line in lines if line.startswith("calculator "))
    assert lines[0].index("CATEGORY") == calc.index("math")  # aligned under its header
    assert any(len(line) > 80 for line in lines)  # a pipe gets whole lines
    shown = [COLOUR.sub("", line) for line in in_pty(cli_env, tmp_path, "tools", "list")]
    assert shown[0].startswith("NAME ")
    assert max(len(line) for line in shown) <= 80 and any(line.endswith("…") for line in shown)


def test_schedule_list_columns(cli_env, tmp_path):
    for prompt, cron in (("Water the plants", "0 9 * * *"),
                         ("Summarize the week's notes", "30 17 * * 5")):
        assert jarvis(cli_env, tmp_path, "schedule", "add", prompt, "--cron", cron).returncode == 0
    lines = jarvis(cli_env, tmp_path, "schedule", "list").stdout.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "NEXT", "RUN", "LAST", "SCHEDULE", "PROMPT"]
    column = lines[0].index("PROMPT")
    assert [line[column:] for line in lines[1:]] == ["Water the plants",
                                                     "Summarize the week's notes"]


def test_memory_search_shows_snippets_with_the_match(cli_env, tmp_path):
    notes = tmp_path / "notes.md"
    filler = " ".join(f"word{i}" for i in range(150))
    notes.write_text(f"{filler} The walrus sleeps on the ice floe. {filler}\n")
    assert jarvis(cli_env, tmp_path, "memory", "index", str(notes)).returncode == 0
    out = jarvis(cli_env, tmp_path, "memory", "search", "walrus")
    hit = out.stdout.splitlines()[1]
    assert "The walrus sleeps on the ice floe." in hit
    assert hit.startswith("    …") and hit.endswith("…") and len(hit) < 300
    assert "\x1b" not in out.stdout  # no colour in a pipe
    full = jarvis(cli_env, tmp_path, "memory", "search", "walrus", "--full").stdout
    assert "word0 word1" in full and len(full) > 1000
    shown = "\n".join(in_pty(cli_env, tmp_path, "memory", "search", "walrus"))
    assert "\x1b[1;33mwalrus\x1b[0m sleeps" in shown
