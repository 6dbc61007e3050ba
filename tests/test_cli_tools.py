"""`jarvis --help` and `jarvis tools list/show/run`: in process (click's CliRunner,
tests/cli_support.py), and as real subprocesses for --help, a run end to end and a run that
asks for confirmation without a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import run_in_process

from jarvis.cli import COMMANDS


def jarvis(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_in_process(args, env=env, input="")


def jarvis_process(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                          text=True, env=env, timeout=60, input="")


def assert_one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_help_lists_every_command(cli_env):
    proc = jarvis_process(cli_env, "--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("Usage: jarvis")
    # One command a line ("  name  description"); a description too long for the terminal
    # goes on under it, indented further.
    listed = {line.split()[0] for line in proc.stdout.split("Commands:")[1].splitlines()
              if line.strip() and not line.startswith("   ")}
    assert listed == set(COMMANDS)
    assert "tools" in proc.stdout and "List, inspect and run tools." in proc.stdout


def test_version(cli_env):
    proc = jarvis(cli_env, "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("jarvis ")


def test_tools_list_shows_the_builtins(cli_env):
    proc = jarvis(cli_env, "tools", "list")
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    for name in ("calculator", "think", "file_read"):
        assert name in lines
    assert "math" in lines["calculator"] and "Evaluate a mathematical expression" in lines["calculator"]


def test_tools_list_json(cli_env):
    proc = jarvis(cli_env, "tools", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    calc = rows["calculator"]
    assert calc == {"name": "calculator", "category": "math",
                    "description": "Evaluate a mathematical expression safely.",
                    "cost_estimate": 0.0, "latency_estimate": calc["latency_estimate"],
                    "requires_confirmation": False}
    assert rows["think"]["category"] == "reasoning"
    assert rows["file_read"]["requires_confirmation"] is False


def test_tools_show(cli_env):
    proc = jarvis(cli_env, "tools", "show", "calculator")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("calculator  (math)\nEvaluate a mathematical expression safely.")
    assert "requires confirmation: no" in proc.stdout
    schema = json.loads(proc.stdout.split("parameters (JSON schema):\n", 1)[1])
    assert schema["required"] == ["expression"]
    as_json = json.loads(jarvis(cli_env, "tools", "show", "file_read", "--json").stdout)
    assert as_json["name"] == "file_read" and "max_lines" in as_json["parameters"]["properties"]
    assert as_json["timeout_seconds"] == 10.0


def test_tools_run_success(cli_env):
    proc = jarvis_process(cli_env, "tools", "run", "calculator", '{"expression": "sqrt(144) + 3**2"}')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "21.0\n" and proc.stderr == ""


def test_tools_run_json_output(cli_env):
    proc = jarvis(cli_env, "tools", "run", "think", '{"thought": "hmm"}', "--json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["content"] == "hmm" and data["success"] is True and data["call_id"] == "cli"


@pytest.mark.parametrize("arguments, words", [
    ('{"expression": "1/0"}', "Error (execution): division by zero"),  # one "Error"
    ('{"expression": "9**9**9"}', "Error (execution): result is too large"),
    ('{"expression": ', "Error (invalid_args): arguments for calculator are not valid JSON"),
    ('{"expr": "1"}', "Error (invalid_args): invalid arguments for calculator: missing required "
                      "argument 'expression'"),
    ('[1]', "must be a JSON object"),
])
def test_tools_run_failure_exits_non_zero_with_the_error_on_stderr(cli_env, arguments, words):
    proc = jarvis(cli_env, "tools", "run", "calculator", arguments)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert words in assert_one_line_error(proc)


@pytest.mark.parametrize("args", [("tools", "run", "calcuator", "{}"), ("tools", "show", "nope")])
def test_unknown_tool_is_one_line_listing_valid_names(cli_env, args):
    proc = jarvis(cli_env, *args)
    assert proc.returncode == 2
    line = assert_one_line_error(proc)
    close = " (did you mean 'calculator'?)" if args[2] == "calcuator" else ""
    assert line.startswith(f"Error: unknown tool {args[2]!r}{close}; valid tool names:")
    for name in ("calculator", "file_read", "think"):
        assert name in line


def test_file_read_settings_come_from_config(cli_env):
    work = Path.cwd()
    data = work / "data"
    data.mkdir()
    (data / "notes.txt").write_text("hello\n", encoding="utf-8")
    elsewhere = work.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("secret\n", encoding="utf-8")
    (work / "config.toml").write_text('[tools.file_read]\nallowed_dirs = ["data"]\n',
                                      encoding="utf-8")
    ok = jarvis(cli_env, "tools", "run", "file_read", json.dumps({"path": str(data / "notes.txt")}))
    assert ok.returncode == 0 and ok.stdout == "hello\n"  # the file as it is, like cat
    denied = jarvis(cli_env, "tools", "run", "file_read", json.dumps({"path": str(elsewhere / "secret.txt")}))
    assert denied.returncode == 1 and "Error (denied): access denied or file not found" in denied.stderr
    assert "secret\n" not in denied.stdout


def test_confirmation_is_denied_without_a_terminal_and_approved_with_yes(cli_env):
    work = Path.cwd()
    (work / "config.toml").write_text("", encoding="utf-8")
    (work / "tools").mkdir()
    (work / "tools" / "danger.py").write_text(
        "from jarvis import tool\n\n\n"
        "@tool(requires_confirmation=True)\n"
        "def wipe(target: str) -> str:\n"
        '    """Pretend to wipe a target.\n\n    Args:\n        target: What to wipe.\n    """\n'
        '    return f"wiped {target}"\n', encoding="utf-8")
    denied = jarvis_process(cli_env, "tools", "run", "wipe", '{"target": "disk"}')
    assert denied.returncode == 1 and denied.stdout == ""
    assert "Error (denied):" in assert_one_line_error(denied)
    approved = jarvis_process(cli_env, "tools", "run", "wipe", '{"target": "disk"}', "--yes")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == "wiped disk\n"
