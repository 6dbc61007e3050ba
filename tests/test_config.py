"""config.toml: lookup order, validation errors, env overrides, provenance, `jarvis config`
and `jarvis init` (real files and real subprocesses)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from jarvis.core.config import ENV_OVERRIDES, JarvisConfig, load_config
from jarvis.errors import ConfigError
from jarvis.workspace.starter import STARTER_CONFIG

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


# --- lookup order -------------------------------------------------------------------------

def test_lookup_order_explicit_then_cwd_then_home(tmp_path: Path, jarvis_home: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (jarvis_home / "config.toml").write_text('[engine]\nmodel = "from-home"\n')
    assert load_config().engine.model == "from-home"

    Path("config.toml").write_text('[engine]\nmodel = "from-cwd"\n')
    assert load_config().engine.model == "from-cwd"

    explicit = tmp_path / "elsewhere.toml"
    explicit.write_text('[engine]\nmodel = "from-explicit"\n')
    monkeypatch.setenv("JARVIS_CONFIG", str(explicit))
    config = load_config()
    assert config.engine.model == "from-explicit"
    assert config.source == explicit.resolve()
    assert load_config(Path("config.toml")).engine.model == "from-cwd"


def test_missing_explicit_config_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JARVIS_CONFIG", "/nonexistent/jarvis.toml")
    with pytest.raises(ConfigError, match="/nonexistent/jarvis.toml does not exist"):
        load_config()


def test_no_config_file_means_defaults() -> None:
    config = load_config()
    assert config.source is None
    assert config.model_dump() == JarvisConfig().model_dump()
    assert config.source_of("engine.model") == "default"


# --- validation ---------------------------------------------------------------------------

def test_wrong_type_names_key_and_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[agent]\nmax_turns = "many"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path.resolve()) in message
    assert "agent.max_turns" in message and "integer" in message


def test_unknown_key_names_key_file_and_valid_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[engine]\ntemprature = 0.1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path.resolve()) in message
    assert "engine.temprature: unknown key" in message
    assert "temperature" in message.split("valid keys", 1)[1]


def test_unknown_section_and_bad_tool_table(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[enigne]\nmodel = 'x'\n")
    with pytest.raises(ConfigError, match=r"enigne: unknown key; valid tables: engine"):
        load_config(path)
    path.write_text("[tools]\nfile_read = 3\n")
    with pytest.raises(ConfigError, match=r"tools.file_read must be a table"):
        load_config(path)


def test_invalid_toml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[engine]\nmodel = "unterminated\n')
    with pytest.raises(ConfigError, match=r"config.toml is not valid TOML: .*line 2"):
        load_config(path)


# --- environment overrides -----------------------------------------------------------------

def test_env_override_beats_file_and_is_typed(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[engine]\nmodel = "file-model"\n[agent]\nmax_turns = 4\n')
    monkeypatch.setenv("JARVIS_MODEL", "env-model")
    monkeypatch.setenv("JARVIS_MAX_TURNS", "7")
    config = load_config(path)
    assert config.engine.model == "env-model"
    assert config.agent.max_turns == 7
    assert config.source_of("engine.model") == "JARVIS_MODEL"
    assert config.source_of("agent.max_turns") == "JARVIS_MAX_TURNS"
    assert config.source_of("engine.temperature") == "default"
    assert load_config(path, use_env=False).engine.model == "file-model"


def test_bad_env_override_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JARVIS_MAX_TURNS", "lots")
    with pytest.raises(ConfigError, match=r"agent.max_turns \(from environment variable "
                                          r"JARVIS_MAX_TURNS\)"):
        load_config()


def test_every_env_override_points_at_a_real_key() -> None:
    fields = JarvisConfig().model_dump()
    for var, dotted in ENV_OVERRIDES.items():
        node = fields
        for part in dotted.split("."):
            assert part in node, f"{var} -> {dotted}: no such key"
            node = node[part]


# --- paths are relative to the config file ----------------------------------------------------

def test_relative_tool_paths_resolve_against_config_folder(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    path = workspace / "config.toml"
    path.write_text('[tools.file_read]\nallowed_dirs = ["notes"]\n[memory]\ndb_path = "m.db"\n')

    config = load_config(path)  # the cwd is another folder (tests run in tmp/work)
    assert config.tools.settings["file_read"]["allowed_dirs"] == [str(workspace / "notes")]
    assert config.memory.db_path == str(workspace / "m.db")

    from jarvis.tools.catalog import build_tool

    tool = build_tool("file_read", settings=config.tools.settings["file_read"])
    assert tool.execute(path="notes/a.txt").success is False  # relative to cwd: not there
    assert tool.execute(path=str(workspace / "notes" / "a.txt")).content == "inside"
    denied = tool.execute(path=str(tmp_path / "secret.txt"))
    assert not denied.success and denied.error_type.value == "denied"


# --- the starter config ------------------------------------------------------------------------

def test_repository_config_is_the_starter_and_loads() -> None:
    assert (REPO / "config.toml").read_text(encoding="utf-8") == STARTER_CONFIG
    config = load_config(REPO / "config.toml", use_env=False)
    assert config.tools.settings["file_read"]["allowed_dirs"] == [str(REPO)]


def _uncommented(text: str) -> str:
    """The starter with every commented `# key = value` line and `# [table]` made live."""
    lines = []
    for line in text.splitlines():
        match = re.match(r"^# ?((\[[a-z_.]+\])|([a-z_]+ = .+))$", line)
        lines.append(match.group(1) if match else line)
    return "\n".join(lines) + "\n"


def test_starter_comments_are_valid_keys_with_true_defaults(tmp_path: Path) -> None:
    live = _uncommented(STARTER_CONFIG)
    assert live.count("\n# ") < STARTER_CONFIG.count("\n# ")  # something was uncommented
    path = tmp_path / "config.toml"
    path.write_text(live)
    config = load_config(path, use_env=False)  # every commented key is a real key
    defaults = JarvisConfig().model_dump()
    data = tomllib.loads(live)
    for section, table in data.items():
        if section in ("mcp", "tools", "channels"):
            continue  # examples, not defaults
        for key, value in table.items():
            expected = defaults[section][key]
            if isinstance(value, dict):
                for sub, sub_value in value.items():
                    assert sub_value == expected[sub], f"{section}.{key}.{sub}"
            else:
                assert value == expected, f"{section}.{key}: comment says {value!r}"
    assert "files" in config.mcp.servers


# --- CLI: config show / path ----------------------------------------------------------------

def test_config_show_reports_provenance(tmp_path: Path, cli_env: dict[str, str]) -> None:
    work = tmp_path / "proj"
    work.mkdir()
    (work / "config.toml").write_text('[engine]\ntemperature = 0.2\n[mcp.servers.x]\n'
                                      'command = "srv"\nheaders = { Authorization = "Bearer s3" }\n')
    env = {**cli_env, "JARVIS_MODEL": "env-model"}
    result = run_cli("config", "show", "--json", env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    cfg = str((work / "config.toml").resolve())
    assert data["config_file"] == cfg
    values = data["values"]
    assert values["engine.temperature"] == {"value": 0.2, "source": cfg}
    assert values["engine.model"] == {"value": "env-model", "source": "JARVIS_MODEL"}
    assert values["engine.timeout"]["source"] == "default"
    assert values["mcp.servers.x.headers.Authorization"]["value"] == "***"
    assert "s3" not in result.stdout

    text = run_cli("config", "show", env=env, cwd=work)
    assert text.returncode == 0, text.stderr
    assert "[engine]" in text.stdout
    assert 'model = "env-model"  # JARVIS_MODEL' in text.stdout
    assert f"temperature = 0.2  # {cfg}" in text.stdout

    path = run_cli("config", "path", env=env, cwd=work)
    assert path.stdout.strip() == cfg


def test_config_show_invalid_file_is_one_line_error(tmp_path: Path,
                                                    cli_env: dict[str, str]) -> None:
    (tmp_path / "config.toml").write_text("[agent]\nmax_turns = 0\n")
    result = run_cli("config", "show", env=cli_env, cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("Error: invalid config in ")
    assert "agent.max_turns" in result.stderr


# --- CLI: init --------------------------------------------------------------------------------

def test_init_writes_workspace_and_refuses_to_overwrite(tmp_path: Path,
                                                        cli_env: dict[str, str]) -> None:
    work = tmp_path / "new"
    work.mkdir()
    first = run_cli("init", env=cli_env, cwd=work)
    assert first.returncode == 0, first.stderr
    assert (work / "config.toml").read_text() == STARTER_CONFIG
    assert (work / "tools").is_dir() and not any((work / "tools").iterdir())
    assert (work / "agents").is_dir() and not any((work / "agents").iterdir())

    (work / "config.toml").write_text("# mine\n")
    again = run_cli("init", env=cli_env, cwd=work)
    assert again.returncode == 2
    assert "already exists" in again.stderr and "--force" in again.stderr
    assert (work / "config.toml").read_text() == "# mine\n"

    forced = run_cli("init", "--force", env=cli_env, cwd=work)
    assert forced.returncode == 0, forced.stderr
    assert (work / "config.toml").read_text() == STARTER_CONFIG

    shown = run_cli("config", "show", "--json", env=cli_env, cwd=work)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["config_file"] == str((work / "config.toml").resolve())


def test_docs_list_every_environment_override() -> None:
    docs = (REPO / "docs" / "workspace.md").read_text(encoding="utf-8")
    for var, dotted in ENV_OVERRIDES.items():
        assert f"| `{var}` | `{dotted}` |" in docs, var
    for section in JarvisConfig.model_fields:
        assert f"`{section}." in docs, section


def test_global_config_option_selects_the_file(tmp_path: Path, cli_env: dict[str, str]) -> None:
    chosen = tmp_path / "elsewhere" / "my.toml"
    chosen.parent.mkdir()
    chosen.write_text('[engine]\nmodel = "chosen"\n')
    (tmp_path / "config.toml").write_text('[engine]\nmodel = "local"\n')
    result = run_cli("--config", str(chosen), "config", "show", "--json", env=cli_env,
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["config_file"] == str(chosen.resolve())
    assert data["values"]["engine.model"] == {"value": "chosen", "source": str(chosen.resolve())}


def test_env_state_paths_are_relative_to_the_current_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "config.toml").write_text('[scheduler]\ndb_path = "sched.db"\n')
    monkeypatch.setenv("JARVIS_MEMORY_DB", "here/mem.db")
    config = load_config(ws / "config.toml")
    assert config.memory.db_path == str(Path.cwd() / "here" / "mem.db")
    assert config.scheduler.db_path == str(ws / "sched.db")
    assert config.source_of("memory.db_path") == "JARVIS_MEMORY_DB"
