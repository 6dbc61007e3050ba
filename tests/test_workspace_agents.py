"""Workspace agents/*.toml: validation, lookup, and `jarvis agents list/show`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.core.config import load_config
from jarvis.errors import ConfigError
from jarvis.workspace.agents import (
    AgentSpec,
    find_agent,
    list_agents,
    load_agents,
    parse_agent_file,
    scheduled_agents,
)

REPO = Path(__file__).resolve().parent.parent

HELPER = '''
name = "helper"
description = "Does sums."
base = "orchestrator"
model = "small-model"
instructions = "You add numbers."
tools = ["calculator", "think"]
max_turns = 3
'''

TYPO = '''
name = "typo"
instructionz = "misspelled key"
'''


def make_workspace(root: Path, agents: dict[str, str]) -> Path:
    (root / "agents").mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text("")
    for name, text in agents.items():
        (root / "agents" / name).write_text(text)
    return root


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_agent_file_is_read_and_found(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"helper.toml": HELPER})
    config = load_config(ws / "config.toml")
    spec = find_agent(config, "helper")
    assert isinstance(spec, AgentSpec)
    assert (spec.base, spec.model, spec.tools, spec.max_turns) == (
        "orchestrator", "small-model", ["calculator", "think"], 3)
    assert spec.instructions == "You add numbers."
    assert spec.source == (ws / "agents" / "helper.toml").resolve()
    assert find_agent(config, "nobody") is None
    assert [a.name for a in list_agents(config)] == ["helper"]


def test_name_defaults_to_file_name_and_defaults_apply(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"plain.toml": 'instructions = "hi"\n'})
    spec = find_agent(load_config(ws / "config.toml"), "plain")
    assert spec is not None
    assert (spec.name, spec.base, spec.model, spec.tools, spec.max_turns, spec.schedule) == (
        "plain", "react", None, [], 10, None)


def test_typo_key_is_config_error_naming_file_and_key(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"typo.toml": TYPO, "helper.toml": HELPER})
    config = load_config(ws / "config.toml")
    with pytest.raises(ConfigError) as info:
        find_agent(config, "typo")
    message = str(info.value)
    assert str(ws / "agents" / "typo.toml") in message
    assert "unknown key 'instructionz'" in message and "instructions" in message
    with pytest.raises(ConfigError, match="instructionz"):
        list_agents(config)
    # the good one is still usable, and load_agents keeps both sides
    assert find_agent(config, "helper") is not None
    scan = load_agents(config)
    assert [a.name for a in scan.agents] == ["helper"]
    assert [e.path.name for e in scan.errors] == ["typo.toml"]


@pytest.mark.parametrize(("text", "expected"), [
    ('max_turns = "ten"\n', "max_turns: Input should be a valid integer"),
    ('base = "swarm"\n', "base: Input should be 'react' or 'orchestrator'"),
    ('tools = "calculator"\n', "tools: Input should be a valid list"),
    ('tools = ["calculator", "calculator"]\n', "lists calculator more than once"),
    ('schedule = "every morning"\n', "is not a cron expression"),
    ('max_turns = 0\n', "max_turns: Input should be greater than or equal to 1"),
    ('name = "../etc"\n', "name: must be 1-64 letters"),
    ('instructions = """never closed\n', "is not valid TOML"),
    ('[tool]\ncode = "import os"\n', "unknown key 'tool'"),
])
def test_invalid_agent_files(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        parse_agent_file(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_broken_file_declaring_the_name_is_reported(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"file.toml": 'name = "custom"\nmax_turns = "x"\n'})
    with pytest.raises(ConfigError, match="file.toml"):
        find_agent(load_config(ws / "config.toml"), "custom")


def test_duplicate_names_are_an_error(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"a.toml": 'name = "same"\n', "b.toml": 'name = "same"\n'})
    scan = load_agents(load_config(ws / "config.toml"))
    assert [a.name for a in scan.agents] == ["same"]
    (error,) = scan.errors
    assert "already used by" in error.message and "a.toml" in error.message


def test_scheduled_agents_and_no_folder(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"helper.toml": HELPER,
                                          "daily.toml": 'schedule = "0 7 * * *"\n'})
    config = load_config(ws / "config.toml")
    assert [a.name for a in scheduled_agents(config)] == ["daily"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.toml").write_text("")
    assert list_agents(load_config(empty / "config.toml")) == []


def test_repository_example_agents_are_valid() -> None:
    config = load_config(REPO / "config.toml", use_env=False)
    agents = {a.name: a for a in list_agents(config)}
    assert set(agents) == {"researcher", "daily_briefing"}
    assert agents["daily_briefing"].schedule == "0 7 * * *"
    assert "memory_search" in agents["researcher"].tools


def test_cli_agents_list_shows_good_and_broken(tmp_path: Path, cli_env: dict[str, str]) -> None:
    ws = make_workspace(tmp_path / "ws", {"helper.toml": HELPER, "typo.toml": TYPO})
    result = run_cli("agents", "list", env=cli_env, cwd=ws)
    assert result.returncode == 1
    assert result.stdout.startswith("helper")
    assert "orchestrator" in result.stdout and "calculator,think" in result.stdout
    assert "typo.toml" in result.stderr and "instructionz" in result.stderr
    assert "Traceback" not in result.stderr

    as_json = run_cli("agents", "list", "--json", env=cli_env, cwd=ws)
    data = json.loads(as_json.stdout)
    assert [a["name"] for a in data["agents"]] == ["helper"]
    assert data["agents"][0]["source"] == str((ws / "agents" / "helper.toml").resolve())
    assert data["errors"][0]["file"].endswith("typo.toml")


def test_cli_agents_show(tmp_path: Path, cli_env: dict[str, str]) -> None:
    ws = make_workspace(tmp_path / "ws", {"helper.toml": HELPER, "typo.toml": TYPO})
    shown = run_cli("agents", "show", "helper", env=cli_env, cwd=ws)
    assert shown.returncode == 0, shown.stderr
    assert "You add numbers." in shown.stdout and "small-model" in shown.stdout
    as_json = json.loads(run_cli("agents", "show", "helper", "--json", env=cli_env,
                                 cwd=ws).stdout)
    assert as_json["tools"] == ["calculator", "think"]

    unknown = run_cli("agents", "show", "nobody", env=cli_env, cwd=ws)
    assert unknown.returncode == 2
    assert "unknown agent 'nobody'; valid agent names: helper" in unknown.stderr

    broken = run_cli("agents", "show", "typo", env=cli_env, cwd=ws)
    assert broken.returncode == 2
    assert "instructionz" in broken.stderr and "Traceback" not in broken.stderr


def test_repository_example_agents_name_registered_tools() -> None:
    from jarvis.core.registry import ToolRegistry
    from jarvis.extensions import load_extensions

    config = load_config(REPO / "config.toml", use_env=False)
    load_extensions(config)
    for agent in list_agents(config):
        for name in agent.tools:
            assert ToolRegistry.contains(name), f"{agent.name} names unknown tool {name}"
