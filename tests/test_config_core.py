"""load_config basics: lookup order, defaults, overrides, loud errors (config UX is tested in
test_config.py by its owner)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jarvis.core.config import JarvisConfig, load_config
from jarvis.errors import ConfigError


def test_defaults_apply_without_a_file():
    config = load_config()
    assert isinstance(config, JarvisConfig)
    assert config.source is None
    assert config.tools.enabled is None and config.tools.default_timeout == 30.0
    assert config.tools.max_output_chars == 100_000 and config.tools.settings == {}


def test_config_toml_in_the_working_directory_is_found(tmp_path: Path):
    (Path.cwd() / "config.toml").write_text(
        '[tools]\nenabled = ["calculator"]\ndefault_timeout = 5\n', encoding="utf-8")
    config = load_config()
    assert config.source == (Path.cwd() / "config.toml").resolve()
    assert config.tools.enabled == ["calculator"] and config.tools.default_timeout == 5.0


def test_jarvis_home_config_is_the_fallback(jarvis_home: Path):
    (jarvis_home / "config.toml").write_text("[tools]\nmax_output_chars = 10\n", encoding="utf-8")
    assert load_config().tools.max_output_chars == 10
    (Path.cwd() / "config.toml").write_text("[tools]\nmax_output_chars = 20\n", encoding="utf-8")
    assert load_config().tools.max_output_chars == 20  # ./config.toml wins


def test_explicit_path_and_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    target = tmp_path / "elsewhere.toml"
    target.write_text("[tools]\ndefault_timeout = 7\n", encoding="utf-8")
    assert load_config(target).tools.default_timeout == 7.0
    monkeypatch.setenv("JARVIS_CONFIG", str(target))
    assert load_config().tools.default_timeout == 7.0


def test_missing_explicit_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_tool_settings_tables(tmp_path: Path):
    (Path.cwd() / "config.toml").write_text(
        '[tools.file_read]\nallowed_dirs = ["/srv/data"]\n', encoding="utf-8")
    assert load_config().tools.settings["file_read"]["allowed_dirs"] == ["/srv/data"]


@pytest.mark.parametrize("text, words", [
    ("[tools]\ndefault_timeout = -1\n", "default_timeout"),
    ("[tools]\ndefault_timeout = 'soon'\n", "default_timeout"),
    ("[nonsense]\nx = 1\n", "nonsense"),
    ("[tools\n", "not valid TOML"),
    ("[tools]\nfile_read = 3\n", "file_read"),
])
def test_invalid_files_raise_config_error_naming_the_key(text: str, words: str):
    (Path.cwd() / "config.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=words):
        load_config()


def test_overrides_and_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("JARVIS_MODEL", "qwen3:8b")
    config = load_config(overrides={"tools.default_timeout": 3})
    assert config.engine.model == "qwen3:8b" and config.tools.default_timeout == 3.0
    assert load_config(use_env=False).engine.model == ""


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path):
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "config.toml").write_text("", encoding="utf-8")
    config = load_config(folder / "config.toml")
    assert config.resolve_path("data/x.db") == folder.resolve() / "data" / "x.db"
    assert config.resolve_path("/abs/x.db") == Path("/abs/x.db")
