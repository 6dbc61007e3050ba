"""Shared fixtures: every test gets its own JARVIS_HOME and leaves the registries as it found them."""

from __future__ import annotations

import os
from pathlib import Path

# The SDK's stdio_client takes `errlog=sys.stderr` as a default bound when mcp.client.stdio is
# first imported: were that first import inside click's CliRunner (an in-process jarvis
# command), every later SDK stdio client in the process would get CliRunner's stream, which
# has no file descriptor. Import it here, with the real stderr.
import mcp.client.stdio  # noqa: F401
import pytest

from jarvis.core.registry import AgentRegistry, EngineRegistry, ToolRegistry

REPO = Path(__file__).resolve().parent.parent


# --- no test touches the real home ------------------------------------------------------------
def _real_jarvis_home() -> Path:
    """~/.jarvis of the user running the suite (from the password database: tests change
    HOME and JARVIS_HOME)."""
    import pwd

    if os.environ.get("JARVIS_TEST_REAL_HOME"):  # the guard's own test points it elsewhere
        return Path(os.environ["JARVIS_TEST_REAL_HOME"])
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".jarvis"


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    if folder.is_dir():
        for path in folder.rglob("*"):
            try:
                info = path.stat()
            except OSError:
                continue
            found[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns)
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config._real_home_files = _files(_real_jarvis_home())  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run fails when the real ~/.jarvis changed during it: every test (and every process
    it starts: a `jarvis mcp serve` child gets only HOME, PATH, ... unless its config's `env`
    passes JARVIS_HOME) must keep its state in the JARVIS_HOME the jarvis_home fixture gives.
    Judged once, by the process that ran or controlled the whole session (not xdist workers)."""
    if hasattr(session.config, "workerinput"):
        return
    before = getattr(session.config, "_real_home_files", {})
    after = _files(_real_jarvis_home())
    changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"the test run changed the real {_real_jarvis_home()}: {', '.join(changed)}; "
                   f"a test (or a process it started without JARVIS_HOME) wrote there")
        if reporter is not None:
            reporter.write_line(f"ERROR: {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


# --- the order tests run in -------------------------------------------------------------------
UNPRIVILEGED_RUN = "tests/test_sandbox_unprivileged.py::"

# The longest tests (node id prefix -> seconds in a quiet full run on a 2-core machine, as
# relative weights; why each takes its time: README's "The slowest tests"). They start first,
# spread over the shares of the collection that `--dist worksteal` gives the test processes,
# so that none starts late and runs on alone at the end (a process that runs out of
# tests steals from the end of the other's queue).
SLOWEST: dict[str, float] = {
    UNPRIVILEGED_RUN: 166,
    "tests/test_scheduler_celery_chaos.py::test_kill_9_workers_and_daemons": 36,
    "tests/test_scheduler_namespaces.py::test_kill_9_chaos_across_pid_namespaces": 23,
    "tests/test_every_tool_everywhere.py::test_jarvis_mcp_serve": 23,
    "tests/test_scheduler_namespaces.py::test_a_daemon_killed_in_either_namespace": 21,
    "tests/test_incomplete_runs.py::test_a_scheduled_run_that_stops_is_incomplete": 19,
    "tests/test_every_tool_everywhere.py::test_jarvis_ask_with_tools": 13,
    "tests/test_every_tool_everywhere.py::test_jarvis_tools_run": 13,
    "tests/test_serve_guard.py::test_300_half_open_requests_do_not_stop_health": 12,
    "tests/test_mcp_defects.py::test_failed_server_says_why_and_is_remembered": 12,
    "tests/test_scheduler_namespaces.py::test_live_daemons_in_two_pid_namespaces": 11,
    "tests/test_mcp_sandbox.py::test_unsandboxed_servers_are_named_in_mcp_list": 10,
    "tests/test_scheduler_fencing_celery.py::test_kill_9_between_a_send_and_its_record": 8,
    "tests/test_import_race.py::test_runs_starting_together_in_a_fresh_process": 8,
    "tests/test_scheduler_celery.py::test_a_run_past_its_timeout_ends_with_its_process": 8,
    "tests/test_sandbox_host_resources.py::test_doctor_says_how_kernel_memory_is_bounded": 7,
    "tests/test_mcp_beyond_tools.py::test_resources_read_and_prompts_on_the_cli": 7,
    "tests/test_mcp_beyond_tools.py::test_progress_cannot_stretch_a_call": 7,
    "tests/test_scheduler_notify_shutdown.py::test_a_delivery_that_cannot_finish_in_time": 7,
    "tests/test_scheduler_daemon.py::test_a_timed_out_attempt_holds_its_worker": 6,
}


def _expected(item: pytest.Item) -> float:
    return next((s for prefix, s in SLOWEST.items() if item.nodeid.startswith(prefix)), 0.0)


def slowest_first(items: list[pytest.Item], parts: int = 2) -> list[pytest.Item]:
    """`items` reordered for `parts` test processes (`--dist worksteal` gives each a
    contiguous share of the list): the slowest start each share (the longest first, each put
    in the share with less slow time so far); the others keep their order."""
    slow = sorted((item for item in items if _expected(item)), key=_expected, reverse=True)
    if not slow:
        return items
    parts = max(1, parts)
    chosen = set(map(id, slow))
    rest = [item for item in items if id(item) not in chosen]
    shares: list[list[pytest.Item]] = [[] for _ in range(parts)]
    for item in slow:
        min(shares, key=lambda share: sum(map(_expected, share))).append(item)
    out: list[pytest.Item] = []
    size = -(-len(items) // parts)  # each process's share of the whole list
    for share in shares:
        cut = max(0, size - len(share))
        out += share + rest[:cut]
        rest = rest[cut:]
    return out + rest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked root_only (jarvis run as root, or set up as root) test what does not exist
    when the suite runs as a normal user: deselected then, never skipped (see
    tests/test_sandbox_unprivileged.py, which runs the sandbox modules as both). The slowest
    tests (SLOWEST; the run as another user is the longest) go first: started late, one ran
    minutes past everything else."""
    if os.geteuid() != 0:
        dropped = [item for item in items if item.get_closest_marker("root_only")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if not item.get_closest_marker("root_only")]
    workers = getattr(config.option, "numprocesses", None)
    items[:] = slowest_first(items, workers if isinstance(workers, int) and workers > 0 else 1)


# --- the code sandbox's tests (test_sandbox*.py) ---------------------------------------------
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
