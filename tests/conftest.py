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
    home.mkdir(mode=0o700)  # as jarvis makes it: private to its user
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


# --- real servers for the scale-out tests (see tests/servers.py) -----------------------------
@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server per test process; each test takes a fresh database from it."""
    from servers import start_postgres

    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture
def pg_url(postgres_server, request) -> str:
    """A fresh, empty database on the session's PostgreSQL server."""
    import re

    from servers import new_database

    name = "t_" + re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40] + "_" + os.urandom(3).hex()
    return new_database(postgres_server, name)


@pytest.fixture
def redis_server():
    """A Redis server of this test's own (empty), stopped afterwards."""
    from servers import start_redis

    server = start_redis()
    yield server
    server.stop()


# --- the code sandbox's tests (test_sandbox*.py) ---------------------------------------------
UNPRIVILEGED_RUN = "tests/test_sandbox_unprivileged.py::"

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked root_only (jarvis run as root, or set up as root) test what does not exist
    when the suite runs as a normal user: deselected then, never skipped (see
    tests/test_sandbox_unprivileged.py, which runs the sandbox modules as both). That test,
    the suite's longest, goes first: started late it ran minutes past everything else."""
    first = [item for item in items if item.nodeid.startswith(UNPRIVILEGED_RUN)]
    if first:
        items[:] = first + [item for item in items if item not in first]
    if os.geteuid() == 0:
        return
    dropped = [item for item in items if item.get_closest_marker("root_only")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("root_only")]



@pytest.fixture(params=["bwrap", "namespaces"])
def mechanism(request: pytest.FixtureRequest) -> str:
    """Each sandbox mechanism in turn: bubblewrap and jarvis's own launcher."""
    return request.param


@pytest.fixture
def nothing_left_behind(request: pytest.FixtureRequest):
    """Every process a test's sandboxes started is gone when the test ends, and the test took
    at most its module's MAX_TEST_SECONDS (if it sets one). A sandbox test module uses it on
    every test (pytestmark usefixtures)."""
    import time

    from sandbox_support import descendants, new_descendants, wait_until_gone

    limit = getattr(request.module, "MAX_TEST_SECONDS", None)
    before = descendants()
    started = time.monotonic()
    yield
    left = wait_until_gone(new_descendants(before), timeout=10)
    assert not left, f"processes left behind: {sorted(left)}"
    if limit is not None:
        assert time.monotonic() - started < limit, "the test was not bounded in time"
