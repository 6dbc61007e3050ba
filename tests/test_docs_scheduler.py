"""docs/scheduler.md's examples run as written: no tools that do not exist (`shell`), no
private attributes (`tool._scheduler`), no undefined names (`jarvis_system`)."""

from __future__ import annotations

import contextlib
import io
import json
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


def _add_commands() -> list[str]:
    """Every `jarvis schedule add` command of the doc: lines of its bash blocks (pipes
    included) and inline ones. The command table's synopsis (`jarvis schedule add PROMPT
    (--cron EXPR ...`) is a grammar, not a command, and is left out."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", DOC, flags=re.S):
        found += [line for line in block.splitlines() if "jarvis schedule add" in line]
    found += [c for c in re.findall(r"`(jarvis schedule add [^`]*)`", DOC) if "PROMPT" not in c]
    return found


def test_every_add_command_of_the_doc_runs(cli_env, tmp_path):
    commands = _add_commands()
    # The ones known today; a new example is picked up by itself (this only guards the regex).
    assert len(commands) >= 7, commands
    assert any("--notify phone" in c for c in commands)
    # What the examples need: the doc's own [channels.phone] table (its ${NTFY_TOPIC} from the
    # environment) and the prompt file of `--prompt-file weekly-report.txt`.
    (channel,) = [b for b in re.findall(r"```toml\n(.*?)```", DOC, flags=re.S)
                  if "[channels.phone]" in b]
    work = tmp_path / "docs"
    work.mkdir()
    (work / "config.toml").write_text(f'[scheduler]\ndb_path = "{tmp_path / "s.db"}"\n\n'
                                      + channel, encoding="utf-8")
    (work / "weekly-report.txt").write_text("Write the weekly report from notes/week.md\n")
    env = dict(cli_env, NTFY_TOPIC="jarvis-docs-test", JARVIS_PY=sys.executable)
    env.pop("JARVIS_CONFIG", None)
    for command in commands:
        # `jarvis` as the shell would find it, so pipes and quotes work as written.
        # The doc's fixed `--at` date moved a year ahead (it would one day be in the past).
        runnable = re.sub(r"--at (\S+)", lambda m: "--at " + future_at(["--at", m[1]])[1],
                          command.split(" # ")[0])
        script = 'jarvis() { "$JARVIS_PY" -m jarvis.cli "$@"; }\n' + runnable
        out = subprocess.run(["bash", "-c", script], cwd=work, env=env, text=True,
                             capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, (command, out.stderr)
        assert "unknown" not in out.stderr and "warning" not in out.stderr.lower(), (
            command, out.stderr)
    listed = subprocess.run([sys.executable, "-m", "jarvis.cli", "schedule", "list", "--json"],
                            cwd=work, env=env, text=True, capture_output=True, timeout=60)
    tasks = json.loads(listed.stdout)
    assert len(tasks) == len(commands)
    assert [t for t in tasks if t.get("notify") == "phone"]
    assert {t["prompt"] for t in tasks} >= {"Summarize the news",
                                           "Write the weekly report from notes/week.md",
                                           "Summarize the top news about open-source AI"}
