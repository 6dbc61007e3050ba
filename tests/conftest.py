"""Shared fixtures: every test gets its own JARVIS_HOME and leaves the registries as it found them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jarvis.core.registry import AgentRegistry, EngineRegistry, ToolRegistry

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def jarvis_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "jarvis-home"
    home.mkdir()
    monkeypatch.setenv("JARVIS_HOME", str(home))
    monkeypatch.setenv("JARVIS_LOAD_PLUGINS", "")
    for var in ("JARVIS_CONFIG", "JARVIS_ENGINE", "JARVIS_MODEL", "OPENAI_BASE_URL",
                "OPENAI_API_KEY", "OLLAMA_HOST", "VLLM_HOST", "LLAMACPP_HOST", "LMSTUDIO_HOST",
                "SGLANG_HOST", "JARVIS_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    # Tests run from a folder without config.toml unless they make one.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return home


@pytest.fixture(autouse=True)
def isolated_registries():
    snaps = [(reg, reg.snapshot()) for reg in (ToolRegistry, AgentRegistry, EngineRegistry)]
    yield
    for reg, snap in snaps:
        reg.restore(snap)


@pytest.fixture
def cli_env(jarvis_home: Path) -> dict[str, str]:
    """Environment for running `jarvis` as a real subprocess."""
    env = dict(os.environ)
    env["JARVIS_HOME"] = str(jarvis_home)
    return env
