"""docs/scheduler.md's examples run as written: no tools that do not exist (`shell`), no
private attributes (`tool._scheduler`), no undefined names (`jarvis_system`)."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

from scheduler_support import future_at

DOC = (Path(__file__).resolve().parent.parent / "docs" / "scheduler.md").read_text("utf-8")


def test_the_tool_example_runs_and_prints_what_the_doc_says():
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", DOC, flags=re.S)
                if "ScheduleTaskTool" in b]
    assert "._" not in block and "jarvis_system" not in block
    expected = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "docs/scheduler.md", "exec"), {"__name__": "doc_scheduler"})
    assert out.getvalue().splitlines() == expected


def test_the_approved_tools_command_runs(cli_env):
    (command,) = re.findall(r"`(jarvis schedule add [^`]*--approve-tools[^`]*)`", DOC)
    args = re.findall(r'"[^"]*"|\S+', command)[1:]
    args = [a.strip('"') for a in args]
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=cli_env, text=True,
                         capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert "unknown tool" not in out.stderr


def test_the_first_add_commands_run(cli_env):
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", DOC, flags=re.S)
                if "jarvis schedule add" in b and "scheduler start" in b]
    assert "--at " in block  # the once example is still there (and gets a future time)
    for line in block.splitlines():
        if not line.startswith("jarvis schedule add"):
            continue
        args = future_at([a.strip('"') for a in re.findall(r'"[^"]*"|\S+', line.split("#")[0])[1:]])
        out = subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=cli_env, text=True,
                             capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, (line, out.stderr)
        assert "unknown tool" not in out.stderr, line
