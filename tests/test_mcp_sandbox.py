"""Stdio MCP servers run in the sandbox by default (issue 23 item 3).

A hostile server (tests/mcp_servers/hostile_host.py, official SDK) tries what a third-party
server could do with the person's rights; real servers from PyPI (the test extra) and npm
(tests/mcp_servers/npm: package.json and its lockfile, installed with `npm ci`) keep working
inside. Both namespace mechanisms, through the real MCP client.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_support import write_config
from sandbox_support import descendants, give_to_sandbox, new_descendants, wait_until_gone

from jarvis.core.config import load_config
from jarvis.core.registry import ToolRegistry
from jarvis.mcp.manager import McpManager
from jarvis.tools.executor import ToolExecutor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

HOSTILE = Path(__file__).resolve().parent / "mcp_servers" / "hostile_host.py"
NPM = Path(__file__).resolve().parent / "mcp_servers" / "npm"


def manager_for(folder: Path, servers: dict, mechanism: str) -> McpManager:
    extra = f'[sandbox]\nisolation = "{mechanism}"\n'
    # What is tested is what a server reaches, not how fast it starts on a loaded machine (the
    # unprivileged run starts these beside the whole suite): a generous connect bound.
    servers = {name: {"connect_timeout": 60, **table} for name, table in servers.items()}
    return McpManager(load_config(write_config(folder, servers, extra=extra)))


def call(manager: McpManager, name: str, arguments: dict) -> str:
    manager.register_known()
    # Tools of a server not marked trusted ask first (docs/trust.md): the test approves.
    result = ToolExecutor([ToolRegistry.get(name)], approver=lambda *_: True).execute(
        {"name": name, "arguments": arguments})
    assert result.success, result.content
    return result.content


def test_a_hostile_server_reaches_nothing_of_the_host(mechanism: str, tmp_path: Path,
                                                       jarvis_home: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Started with the person's rights it read their keys, saw jarvis's environment, reached
    # loopback services and the cloud metadata address, could kill jarvis and fork-bomb the
    # host. Sandboxed, none of it: and jarvis goes on.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-in-jarvis-env")
    (jarvis_home / "config.toml").write_text("# canary-jarvis-home\n")
    (Path.cwd() / ".env").write_text("API_KEY=canary-dotenv\n")
    private = tmp_path / "private"
    (private / ".ssh").mkdir(parents=True)
    (private / ".ssh" / "id_ed25519").write_text("canary-ssh-key")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    before = descendants()
    manager = manager_for(tmp_path, {"evil": {"command": sys.executable, "args": [str(HOSTILE)],
                                              "env": {"GIVEN": "by-config"}}}, mechanism)
    try:
        assert manager.refresh() == {"evil": None}
        for path in (private / ".ssh" / "id_ed25519", private, jarvis_home / "config.toml",
                     Path.cwd() / ".env", Path.home(), "/etc/shadow"):
            assert call(manager, "evil__read", {"path": str(path)}).startswith("refused"), path
        # (a path under /tmp may be written: in the sandbox's own /tmp, never the host's)
        for target in (tmp_path / "x", Path.cwd() / "x", jarvis_home / "x"):
            call(manager, "evil__write", {"path": str(target)})
            assert not target.exists(), target
        env = call(manager, "evil__environment", {})
        assert "GIVEN=by-config" in env and "canary" not in env and "OPENAI" not in env, env
        for host, to in (("127.0.0.1", port), ("169.254.169.254", 80)):
            assert call(manager, "evil__connect", {"host": host, "port": to}).startswith(
                "refused"), host
        with pytest.raises(TimeoutError):
            listener.accept()
        assert call(manager, "evil__signal_process", {"pid": os.getpid()}).startswith("refused")
        started, refused = call(manager, "evil__fork_bomb", {"seconds": 25.0}).split(", ")
        assert int(started.split()[0]) < 256 and int(refused.split()[0]) > 0, (started, refused)
        assert call(manager, "evil__environment", {})  # still answering
    finally:
        manager.close()
        listener.close()
    assert not wait_until_gone(new_descendants(before), timeout=10)  # the bomb went with it


def test_a_server_sees_the_paths_listed_for_it(mechanism: str, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("readable")
    out = tmp_path / "out"
    out.mkdir()
    give_to_sandbox(out)
    other = tmp_path / "other"
    other.mkdir()
    (other / "secret.txt").write_text("not listed")
    manager = manager_for(tmp_path, {"evil": {
        "command": sys.executable, "args": [str(HOSTILE)], "read_only_paths": [str(shared)],
        "writable_paths": [str(out)]}}, mechanism)
    try:
        assert manager.refresh() == {"evil": None}
        assert call(manager, "evil__read", {"path": str(shared / "notes.txt")}) == "read: readable"
        assert call(manager, "evil__write", {"path": str(shared / "x")}).startswith("refused")
        assert call(manager, "evil__write", {"path": str(out / "x")}) == "wrote"
        assert call(manager, "evil__read", {"path": str(other / "secret.txt")}).startswith(
            "refused")
    finally:
        manager.close()
    assert (out / "x").read_text() == "written by the server"


@pytest.mark.same_for_every_uid
def test_unsandboxed_servers_are_named_in_mcp_list_and_doctor(tmp_path: Path, cli_env) -> None:
    # A loaded machine (the unprivileged re-run beside the suite) starts them slowly.
    write_config(tmp_path, {"boxed": {"command": sys.executable, "args": [str(HOSTILE)],
                                      "connect_timeout": 60},
                            "trusted": {"command": sys.executable, "args": [str(HOSTILE)],
                                        "sandbox": False, "connect_timeout": 60}})

    def jarvis(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=cli_env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)

    rows = {row["name"]: row for row in json.loads(jarvis("mcp", "list", "--json").stdout)}
    assert rows["boxed"]["sandbox"] is True and rows["trusted"]["sandbox"] is False, rows
    text = jarvis("mcp", "list").stdout
    assert "trusted  [connected]  stdio (not sandboxed: sandbox = false):" in text, text
    assert "boxed  [connected]  stdio:" in text, text
    doctor = jarvis("doctor")
    assert "\nMCP servers not sandboxed (sandbox = false): trusted\n" in doctor.stdout, doctor
    assert json.loads(jarvis("doctor", "--json").stdout)["mcp_unsandboxed"] == ["trusted"]


# --- real servers ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def npm_servers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The npm servers of tests/mcp_servers/npm, installed from its lockfile (npm ci)."""
    npm = shutil.which("npm")
    assert npm, "npm is needed (README's install command installs nodejs and npm)"
    folder = tmp_path_factory.mktemp("npm-servers")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(NPM / name, folder / name)
    done = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                          cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    folder.chmod(0o755)
    return folder


def test_real_servers_work_in_the_sandbox(mechanism: str, tmp_path: Path,
                                          npm_servers: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "hello.txt").write_text("hello from the host")
    memory = tmp_path / "memory"
    memory.mkdir()
    give_to_sandbox(memory)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    servers = {  # the PyPI ones through the venv they are installed in
        "time": {"command": sys.executable,
                 "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "git": {"command": sys.executable,
                "args": ["-m", "mcp_server_git", "--repository", str(repo)],
                "read_only_paths": [str(repo)]},
        "fs": {"command": "npx", "args": ["--no-install", "@modelcontextprotocol/server-filesystem",
                                          str(files)],
               "cwd": str(npm_servers), "read_only_paths": [str(files)]},
        "everything": {"command": "npx", "args": ["@modelcontextprotocol/server-everything"],
                       "cwd": str(npm_servers)},
        "memory": {"command": "npx", "args": ["@modelcontextprotocol/server-memory"],
                   "cwd": str(npm_servers), "writable_paths": [str(memory)],
                   "env": {"MEMORY_FILE_PATH": str(memory / "memory.jsonl")}},
    }
    for table in servers.values():  # five servers starting at once on a loaded machine
        table["connect_timeout"] = 60
    manager = manager_for(tmp_path, servers, mechanism)
    try:
        assert manager.refresh() == dict.fromkeys(servers), manager.status()
        assert "UTC" in call(manager, "time__get_current_time", {"timezone": "UTC"})
        assert "On branch" in call(manager, "git__git_status", {"repo_path": str(repo)})
        assert "hello from the host" in call(manager, "fs__read_text_file",
                                             {"path": str(files / "hello.txt")})
        assert "sandboxed" in call(manager, "everything__echo", {"message": "sandboxed"})
        call(manager, "memory__create_entities", {"entities": [
            {"name": "jarvis", "entityType": "agent", "observations": ["runs sandboxed"]}]})
        assert "runs sandboxed" in (memory / "memory.jsonl").read_text()
    finally:
        manager.close()


# --- a PyPI server through uvx, offline ------------------------------------------------------------
@pytest.fixture(scope="session")
def uvx_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    """uvx, a folder of wheels of mcp-server-time and what it needs (packed from what the
    test extra installed: tests/local_index.py) and a uv cache shared by the tests."""
    from local_index import wheels_of
    from uv import find_uv_bin

    uvx = Path(find_uv_bin()).with_name("uvx")
    assert uvx.is_file(), f"uvx is not beside {find_uv_bin()} (the test extra installs uv)"
    folder = tmp_path_factory.mktemp("uvx")
    wheels_of("mcp-server-time", folder / "wheels")
    return str(uvx), folder / "wheels", folder / "cache"


def test_a_uvx_server_runs_in_the_sandbox(mechanism: str, tmp_path: Path, uvx_index) -> None:
    # uvx makes the tool's environment outside the sandbox (here from local wheels, offline,
    # into the cache the server's env names), and its console script runs inside.
    uvx, wheels, cache = uvx_index
    offline = ["--offline", "--no-index", "--find-links", str(wheels)]
    manager = manager_for(tmp_path, {
        "time": {"command": uvx, "args": [*offline, "mcp-server-time", "--local-timezone", "UTC"],
                 "env": {"UV_CACHE_DIR": str(cache)}, "connect_timeout": 120},
        "missing": {"command": uvx, "args": [*offline, "mcp-server-nowhere"],
                    "env": {"UV_CACHE_DIR": str(cache)}, "connect_timeout": 120}}, mechanism)
    try:
        status = manager.refresh()
        assert status["time"] is None, status
        assert "uvx could not prepare 'mcp-server-nowhere' outside the sandbox" in status[
            "missing"] and "UV_CACHE_DIR" in status["missing"], status["missing"]
        assert "UTC" in call(manager, "time__get_current_time", {"timezone": "UTC"})
    finally:
        manager.close()
