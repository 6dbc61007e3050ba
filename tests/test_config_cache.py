"""The validated-config cache (jarvis.core.config_cache): a configuration validated once with
pydantic is read back later as a view, without pydantic, with the same values and behaviour."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from jarvis.core import config_cache
from jarvis.core.config import (
    ChannelConfig,
    EngineConfig,
    JarvisConfig,
    KeepRuns,
    McpServerConfig,
    ToolsConfig,
    load_config,
)
from jarvis.errors import ConfigError

RICH = """
[engine]
model = "m1"
timeout = 60
vision_models = { "llava*" = true }

[agent]
tools = ["calculator", "think"]

[tools]
enabled = ["calculator", "file_read"]

[tools.file_read]
allowed_dirs = ["data", "/abs"]

[memory]
db_path = "state/memory.db"

[scheduler]
keep_runs = "30d"

[channels.me]
url = "ntfy://example.com/topic"

[mcp.servers.fs]
command = "echo"
args = ["hi"]
tool_timeouts = { slow = 5 }

[sandbox]
read_only_paths = ["ro"]
"""


def _write(folder: Path, text: str = RICH) -> Path:
    path = folder / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _is_view(config: object) -> bool:
    return isinstance(config, config_cache._Node) and type(config) is not JarvisConfig


def _cache_files(home: Path) -> list[Path]:
    return sorted((home / "cache" / "config").glob("*.json"))


def test_the_second_load_is_a_view_with_the_same_values(tmp_path: Path, jarvis_home: Path):
    path = _write(tmp_path)
    first = load_config(path)
    assert type(first) is JarvisConfig
    second = load_config(path)
    assert _is_view(second)
    assert second.model_dump() == first.model_dump()
    assert second.engine.model == "m1" and second.engine.timeout == 60.0
    assert isinstance(second.engine.timeout, float)
    assert second.tools.settings == first.tools.settings
    assert second.tools.settings["file_read"]["allowed_dirs"] == [str(tmp_path / "data"), "/abs"]
    assert second.tools.file_read == first.tools.file_read  # extra tables as attributes
    assert second.memory.db_path == str(tmp_path / "state" / "memory.db")
    assert second.scheduler.keep_runs.describe() == "30 days"
    assert second.channels["me"].url == "ntfy://example.com/topic"
    assert second.mcp.servers["fs"].args == ["hi"]
    assert second.mcp.servers["fs"].tool_timeouts == {"slow": 5.0}
    assert second.source == first.source == path.resolve()
    assert second.source_of("engine.model") == str(path.resolve())
    assert second.source_of("engine.temperature") == "default"
    assert second.base_dir == first.base_dir
    assert second.resolve_path("x") == first.resolve_path("x")
    # the view is still "a JarvisConfig" for isinstance, section by section
    assert isinstance(second, JarvisConfig) and isinstance(second.tools, ToolsConfig)
    assert isinstance(second.engine, EngineConfig) and not isinstance(second.engine, ToolsConfig)
    assert isinstance(second.scheduler.keep_runs, KeepRuns)
    assert isinstance(second.channels["me"], ChannelConfig)
    assert isinstance(second.mcp.servers["fs"], McpServerConfig)
    assert not isinstance(second, dict)
    with pytest.raises(AttributeError, match="'EngineConfig' object has no attribute 'nope'"):
        second.engine.nope  # noqa: B018


def test_a_load_without_a_cache_entry_validates_and_a_view_loads_without_pydantic(
        tmp_path: Path, jarvis_home: Path):
    path = _write(tmp_path)
    env = dict(os.environ, JARVIS_HOME=str(jarvis_home))
    probe = ("import sys; from jarvis.core.config import load_config; c = load_config(sys.argv[1]);"
             " print(type(c).__name__, 'pydantic' in sys.modules, c.engine.model,"
             " c.scheduler.keep_runs.describe())")
    runs = [subprocess.run([sys.executable, "-c", probe, str(path)], env=env, capture_output=True,
                           text=True, check=True, timeout=120).stdout.split() for _ in range(2)]
    assert runs[0] == ["JarvisConfig", "True", "m1", "30", "days"]
    assert runs[1] == ["JarvisConfigView", "False", "m1", "30", "days"]


def test_the_cache_file_is_private_and_a_tampered_one_is_ignored(tmp_path: Path,
                                                                 jarvis_home: Path):
    path = _write(tmp_path)
    load_config(path)
    (entry,) = _cache_files(jarvis_home)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o700
    assert _is_view(load_config(path))
    entry.chmod(0o620)  # writable by others: never trusted as validated
    assert type(load_config(path)) is JarvisConfig
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    (jarvis_home / "cache").chmod(0o755)  # left open (an older jarvis, a umask): tightened
    assert _is_view(load_config(path))
    assert stat.S_IMODE((jarvis_home / "cache").stat().st_mode) == 0o700
    entry.chmod(0o600)
    entry.write_text("{not json", encoding="utf-8")
    assert type(load_config(path)) is JarvisConfig  # unreadable: validated again, rewritten
    assert _is_view(load_config(path))


def test_changes_to_the_file_env_or_schema_validate_again(tmp_path: Path, jarvis_home: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    path = _write(tmp_path)
    load_config(path)
    assert _is_view(load_config(path))
    path.write_text(RICH.replace('model = "m1"', 'model = "m2"'), encoding="utf-8")
    config = load_config(path)
    assert type(config) is JarvisConfig and config.engine.model == "m2"
    monkeypatch.setenv("JARVIS_MODEL", "from-env")
    config = load_config(path)
    assert type(config) is JarvisConfig and config.engine.model == "from-env"
    assert load_config(path).source_of("engine.model") == "JARVIS_MODEL"
    monkeypatch.setenv("JARVIS_MAX_TURNS", "0")  # invalid: never cached, the same error twice
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"agent.max_turns \(from environment variable "
                                              r"JARVIS_MAX_TURNS\)"):
            load_config(path)
    monkeypatch.delenv("JARVIS_MAX_TURNS")
    assert _is_view(load_config(path))
    monkeypatch.setattr(config_cache, "_schema_digest", "another schema")
    assert type(load_config(path)) is JarvisConfig
    assert type(load_config(path, overrides={"engine.model": "x"})) is JarvisConfig


def test_an_invalid_file_is_never_cached_and_gives_the_same_error(tmp_path: Path,
                                                                  jarvis_home: Path):
    path = _write(tmp_path, "[engine]\nmax_retries = 99\n")
    messages = []
    for _ in range(2):
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "engine.max_retries" in messages[0]
    assert _cache_files(jarvis_home) == []


def test_state_paths_from_the_environment_follow_the_working_folder(
        tmp_path: Path, jarvis_home: Path, monkeypatch: pytest.MonkeyPatch):
    path = _write(tmp_path)
    monkeypatch.setenv("JARVIS_RUNS_DB", "runs.db")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    load_config(path)
    assert load_config(path).runs.db_path == str(tmp_path / "a" / "runs.db")
    monkeypatch.chdir(tmp_path / "b")
    assert load_config(path).runs.db_path == str(tmp_path / "b" / "runs.db")


def test_writing_to_a_view_validates_through_the_real_model(tmp_path: Path, jarvis_home: Path):
    path = _write(tmp_path)
    reference = load_config(path)
    view = load_config(path)
    assert _is_view(view)
    tools = view.agent.tools
    engine = view.engine
    with pytest.raises(ValidationError) as from_view:
        engine.max_retries = 99
    with pytest.raises(ValidationError) as from_model:
        reference.engine.max_retries = 99
    assert str(from_view.value) == str(from_model.value)
    engine.model = "changed"
    assert view.engine.model == "changed" and engine.model == "changed"
    tools.append("more")  # a list handed out before stays the model's list
    assert view.agent.tools is tools and view.model_dump()["agent"]["tools"][-1] == "more"
    assert repr(view.sandbox) == repr(reference.sandbox)
    assert view.mcp.servers["fs"] == reference.mcp.servers["fs"]
    assert view.model_dump(exclude={"engine", "agent"}) == reference.model_dump(
        exclude={"engine", "agent"})


def test_the_cache_keeps_only_the_newest_files(tmp_path: Path, jarvis_home: Path):
    path = _write(tmp_path, "")
    for n in range(config_cache.KEEP_FILES + 3):
        path.write_text(f"[engine]\nmodel = \"m{n}\"\n", encoding="utf-8")
        load_config(path)
    files = _cache_files(jarvis_home)
    assert len(files) == config_cache.KEEP_FILES
    newest = json.loads(max(files, key=lambda p: p.stat().st_mtime_ns).read_text())
    assert json.loads(newest["inputs"])["engine"]["model"] == f"m{config_cache.KEEP_FILES + 2}"


def test_the_sections_known_without_pydantic_are_the_models_fields():
    from jarvis.core.config_base import SECTIONS

    assert SECTIONS == tuple(JarvisConfig.model_fields)
