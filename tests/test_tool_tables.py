"""Every [tools.NAME] table is checked when the config loads (issue 25, item 7): a typo is one
line naming the file, the table and the fix, from any command (config show included), with a
did-you-mean, and the keys jarvis fills in itself (config, the memory store, ...) are never
listed as valid settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def jarvis(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def workspace(tmp_path: Path, cli_env: dict[str, str]) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert jarvis(ws, cli_env, "init").returncode == 0
    return ws


def set_table(ws: Path, old: str, new: str) -> None:
    path = ws / "config.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("command", [("config", "show"), ("tools", "list"), ("ask", "hello")])
def test_a_misspelt_setting_is_found_by_every_command(workspace: Path, cli_env, command) -> None:
    set_table(workspace, 'allowed_dirs = ["."]', 'allowed_dir = ["."]')
    out = jarvis(workspace, cli_env, *command)
    assert out.returncode == 2, out.stdout + out.stderr
    line = f"Error: invalid config in {workspace / 'config.toml'}: unknown setting(s) allowed_dir"
    assert out.stderr.startswith(line), out.stderr
    assert "(did you mean 'allowed_dirs'?)" in out.stderr
    assert out.stderr.rstrip().endswith("valid: allowed_dirs, allowed_secret_paths, max_bytes")
    assert "config" not in out.stderr.rpartition("valid:")[2]  # jarvis fills that one in
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1


def test_a_table_naming_no_tool_gets_a_did_you_mean(workspace: Path, cli_env) -> None:
    with (workspace / "config.toml").open("a") as fh:
        fh.write('\n[tools.web_serch]\nbackend = "searxng"\n')
    out = jarvis(workspace, cli_env, "config", "show")
    assert out.returncode == 2
    assert "[tools.web_serch] names no tool (did you mean 'web_search'" in out.stderr
    assert "tools with settings: " in out.stderr and "calculator" not in out.stderr


def test_services_are_not_settings(workspace: Path, cli_env) -> None:
    with (workspace / "config.toml").open("a") as fh:
        fh.write('\n[tools.retrieval]\nbackend = "elsewhere"\n')
    out = jarvis(workspace, cli_env, "tools", "list")
    assert out.returncode == 2
    assert "unknown setting(s) backend in [tools.retrieval]; valid: top_k" in out.stderr


def test_a_wrong_type_names_the_key(workspace: Path, cli_env) -> None:
    with (workspace / "config.toml").open("a") as fh:
        fh.write('\n[tools.web_search]\nmax_results = "five"\n')
    out = jarvis(workspace, cli_env, "config", "show")
    assert out.returncode == 2
    assert "tools.web_search.max_results: Input should be a valid integer" in out.stderr


def test_a_workspace_tool_table_is_checked_too(workspace: Path, cli_env) -> None:
    (workspace / "tools" / "greeter.py").write_text(
        "from jarvis import BaseTool\n"
        "from jarvis.core.registry import ToolRegistry\n\n\n"
        "@ToolRegistry.register('greeter')\n"
        "class Greeter(BaseTool):\n"
        "    '''Greet someone.'''\n\n"
        "    def __init__(self, greeting: str = 'Hello', backend: str = 'plain') -> None:\n"
        "        self.greeting, self.backend = greeting, backend\n\n"
        "    def call(self, name: str) -> str:\n"
        "        '''Greet.\n\n        Args:\n            name: Who.\n        '''\n"
        "        return f'{self.greeting}, {name} ({self.backend})'\n")
    with (workspace / "config.toml").open("a") as fh:
        fh.write('\n[tools.greeter]\ngreting = "Hi"\n')
    out = jarvis(workspace, cli_env, "config", "show")
    assert out.returncode == 2
    assert "greting (did you mean 'greeting'?) in [tools.greeter]; valid: backend, greeting" \
        in out.stderr
    set_table(workspace, 'greting = "Hi"', 'greeting = "Hi"\nbackend = "fancy"')
    out = jarvis(workspace, cli_env, "tools", "run", "greeter", '{"name": "Ada"}')
    # `backend` is the tool's own setting: the memory store is never handed to it.
    assert out.returncode == 0 and out.stdout == "Hi, Ada (fancy)\n", out.stderr
