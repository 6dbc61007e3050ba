"""The path policy below file_read, memory_index and the workspace loaders: deny by default,
secrets refused unless named, and opening beneath the allowed folder so that a directory
swapped for a symlink mid-read never leaks an outside file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jarvis.core.types import ErrorType, ToolCall
from jarvis.security import beneath
from jarvis.security.beneath import PathChanged, open_beneath
from jarvis.security.paths import MAX_FILE_BYTES, PathPolicy
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.file_read import FileReadTool


def run(tool, **arguments):
    return ToolExecutor([tool], default_timeout=5).execute(
        ToolCall("c", tool.spec.name, json.dumps(arguments)))


def jarvis(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                          text=True, env=env, timeout=60, input="", cwd=cwd)


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME with the usual secrets in it, so `~/.ssh/id_rsa` means a real file."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = X\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def test_the_limit_is_one_mebibyte_inclusive():
    assert MAX_FILE_BYTES == 1_048_576


def test_without_allowed_dirs_only_the_workspace_is_readable(fake_home: Path, jarvis_home: Path):
    reader = FileReadTool()
    for target in ("~/.ssh/id_rsa", "/etc/shadow", "~/.aws/credentials", "/etc/passwd"):
        result = run(reader, path=target)
        assert not result.success and result.error_type is ErrorType.DENIED, target
        assert "access denied or file not found" in result.content
        assert "allowed_dirs in [tools.file_read]" in result.content
        assert "PRIVATE KEY" not in result.content and "root:" not in result.content
    # The workspace (here $JARVIS_HOME: there is no config.toml) is readable.
    (jarvis_home / "notes.md").write_text("my notes\n")
    ok = run(reader, path=str(jarvis_home / "notes.md"))
    assert ok.success and ok.content == "my notes\n"


def test_the_workspace_is_the_config_files_folder(tmp_path: Path, jarvis_home: Path):
    from jarvis.core.config import load_config

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "config.toml").write_text("")
    (ws / "todo.md").write_text("buy milk\n")
    (jarvis_home / "home-note.md").write_text("x\n")
    reader = FileReadTool(config=load_config(ws / "config.toml"))
    assert run(reader, path=str(ws / "todo.md")).content == "buy milk\n"
    assert run(reader, path=str(jarvis_home / "home-note.md")).error_type is ErrorType.DENIED
    assert str(ws) in reader.spec.description


SECRETS = [".env", ".git/config", ".ssh/id_ed25519", ".netrc", ".npmrc", "id_rsa",
           "id_rsa.pub", "deploy/server.pem", "tls/site.key", "gcp/credentials-prod.json",
           "certs/client.p12", "certs/client.pfx"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "work"  # the test's current folder (conftest)
    for rel in SECRETS:
        target = ws / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"TOKEN-{rel}\n")
    (ws / "README.md").write_text("hello\n")
    (ws / "notes").mkdir()
    (ws / "notes" / "plan.md").write_text("plan\n")
    return ws


@pytest.mark.parametrize("rel", SECRETS)
def test_secrets_are_refused_with_the_starter_allowed_dirs(workspace: Path, rel: str):
    reader = FileReadTool(allowed_dirs=["."])
    result = run(reader, path=rel)
    assert not result.success and result.error_type is ErrorType.DENIED
    assert "TOKEN" not in result.content
    assert "secret rule" in result.content and "allowed_secret_paths" in result.content
    # Through a symlink with an innocent name too: the rules apply to the resolved path.
    alias = workspace / "notes" / "innocent.txt"
    alias.unlink(missing_ok=True)
    alias.symlink_to(workspace / rel)
    assert run(reader, path=str(alias)).error_type is ErrorType.DENIED


def test_the_refusal_names_the_rule(workspace: Path):
    reader = FileReadTool(allowed_dirs=["."])
    assert "'.*'" in run(reader, path=".env").content
    assert "'*.pem'" in run(reader, path="deploy/server.pem").content
    assert "'id_rsa*'" in run(reader, path="id_rsa").content
    assert "'credentials*.json'" in run(reader, path="gcp/credentials-prod.json").content
    assert run(reader, path="README.md").success and run(reader, path="notes/plan.md").success


def test_a_secret_named_by_path_is_allowed(workspace: Path):
    reader = FileReadTool(allowed_dirs=["."], allowed_secret_paths=[".env", "deploy"])
    assert run(reader, path=".env").content == "TOKEN-.env\n"
    assert run(reader, path="deploy/server.pem").content == "TOKEN-deploy/server.pem\n"
    assert run(reader, path=".git/config").error_type is ErrorType.DENIED  # only what is named


def test_secret_paths_in_config_through_the_cli(workspace: Path, cli_env: dict[str, str]):
    (workspace / "config.toml").write_text('[tools.file_read]\nallowed_dirs = ["."]\n')
    denied = jarvis(cli_env, "tools", "run", "file_read", '{"path": ".env"}')
    assert denied.returncode == 1 and "TOKEN" not in denied.stdout + denied.stderr
    assert "secret rule" in denied.stderr and "[tools.file_read]" in denied.stderr
    (workspace / "config.toml").write_text(
        '[tools.file_read]\nallowed_dirs = ["."]\nallowed_secret_paths = [".env"]\n')
    ok = jarvis(cli_env, "tools", "run", "file_read", '{"path": ".env"}')
    assert ok.returncode == 0 and ok.stdout.startswith("TOKEN-.env"), ok.stderr


def test_memory_index_follows_the_same_policy(workspace: Path, tmp_path: Path):
    from jarvis.memory import SQLiteMemory
    from jarvis.tools.memory_tools import MemoryIndexTool

    store = SQLiteMemory(tmp_path / "m.db")
    try:
        (workspace / "notes" / "leak.md").symlink_to(workspace / ".env")
        (workspace / "notes" / "key.pem").write_text("TOKEN-pem\n")
        tool = MemoryIndexTool(backend=store, allowed_dirs=[str(workspace)])
        denied = tool.execute(path=".env")
        assert not denied.success and denied.error_type is ErrorType.DENIED
        assert "secret rule" in denied.content
        result = tool.execute(path="notes")
        assert result.success, result.content
        assert result.metadata["indexed"] == 1 and result.metadata["skipped_denied"] == 2
        assert not any("TOKEN" in r.content for r in store.retrieve("TOKEN pem env", top_k=20))
        outside = MemoryIndexTool(backend=store).execute(path="/etc")
        assert outside.error_type is ErrorType.DENIED
    finally:
        store.close()


def test_indexer_does_not_import_tools():
    import jarvis.memory.indexer as indexer

    source = Path(indexer.__file__).read_text()
    assert "jarvis.tools" not in source


# --- opening beneath the allowed folder ------------------------------------------------------
IMPLEMENTATIONS = ["openat2", "walk"]


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_openat2_ok", False)
    else:
        # Probed afresh: openat2 where the kernel has it (Linux >= 5.6), else the walk.
        monkeypatch.setattr(beneath, "_openat2_ok", None)
    return request.param


def test_open_beneath_refuses_symlinks_on_the_way(tmp_path: Path, impl: str):
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("LEAK\n")
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "flink.txt").symlink_to(outside / "f.txt")
    fd = open_beneath(root.resolve(), ("real", "f.txt"))
    try:
        assert os.read(fd, 100) == b"inside\n"
    finally:
        os.close(fd)
    for parts in (("link", "f.txt"), ("flink.txt",), ("..", "outside", "f.txt")):
        with pytest.raises(PathChanged):
            open_beneath(root.resolve(), parts)


def test_fifo_and_device_refused_by_both_openers(tmp_path: Path, impl: str):
    os.mkfifo(tmp_path / "pipe")
    policy = PathPolicy([tmp_path])
    started = time.perf_counter()
    with pytest.raises(ValueError, match="not a regular file"):
        policy.read(str(tmp_path / "pipe"))
    assert time.perf_counter() - started < 1.0


RACE_LIMIT = 60.0  # seconds a race may go on past its minimum, waiting to be `enough`


def _race_until(seconds: float, enough, step) -> None:
    """Call `step()` for at least `seconds`, then on until `enough()` (the race really
    happened: reads landed on both sides of a swap), failing after RACE_LIMIT more seconds.
    A fixed window alone is flaky: on a loaded machine the reader or the swapper may get so
    little CPU in it that one side of the race is never seen."""
    start = time.monotonic()
    while time.monotonic() - start < seconds or not enough():
        if time.monotonic() - start > seconds + RACE_LIMIT:
            raise AssertionError(f"the race did not happen within {seconds + RACE_LIMIT} s")
        step()


def _race(tmp_path: Path, read, seconds: float, enough=lambda counts: True) -> dict[str, int]:
    """Swap a directory component for a symlink to an outside folder, over and over, while
    `read(path)` runs (at least `seconds`, then until `enough(counts)`); count what the reads
    returned."""
    root = tmp_path / "root"
    data = root / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside" / "sub"
    outside.mkdir(parents=True)
    (outside / "f.txt").write_text("LEAK\n")
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            os.rename(data / "sub", data / "sub_real")
            os.symlink(outside, data / "sub")
            os.unlink(data / "sub")
            os.rename(data / "sub_real", data / "sub")
            swaps += 1

    counts = {"inside": 0, "refused": 0, "leaked": 0}
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    target = str(data / "sub" / "f.txt")

    def step() -> None:
        content = read(target)
        if content is None:
            counts["refused"] += 1
        elif "LEAK" in content:
            counts["leaked"] += 1
        else:
            counts["inside"] += 1

    try:
        _race_until(seconds, lambda: enough({**counts, "swaps": swaps}), step)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive(), "the swapper did not stop: the tree is not settled"
    counts["swaps"] = swaps
    return counts


def test_racing_symlink_swap_never_leaks(tmp_path: Path, impl: str):
    executor = ToolExecutor([FileReadTool(allowed_dirs=[str(tmp_path / "root")])],
                            default_timeout=5)

    def read(path: str) -> str | None:
        result = executor.execute(ToolCall("c", "file_read", {"path": path}))
        return result.content if result.success else None

    counts = _race(tmp_path, read, seconds=1.5, enough=lambda c: (
        c["inside"] > 0 and c["refused"] > 0 and c["swaps"] > 100))
    print(impl, counts)
    assert counts["leaked"] == 0, counts
    assert counts["inside"] > 0 and counts["refused"] > 0 and counts["swaps"] > 100, counts


def test_racing_symlink_swap_never_leaks_into_memory(tmp_path: Path, impl: str):
    from jarvis.memory import SQLiteMemory
    from jarvis.tools.memory_tools import MemoryIndexTool

    store = SQLiteMemory(tmp_path / "m.db")
    tool = MemoryIndexTool(backend=store, allowed_dirs=[str(tmp_path / "root")])
    try:
        def read(path: str) -> str | None:
            result = tool.execute(path=str(Path(path).parent.parent))  # index the folder
            return "indexed" if result.success else None

        counts = _race(tmp_path, read, seconds=1.5,
                       enough=lambda c: c["inside"] > 0 and c["swaps"] > 10)
        leaked = [r for r in store.retrieve("LEAK", top_k=20) if "LEAK" in r.content]
        assert leaked == [], counts
        assert counts["inside"] > 0 and counts["swaps"] > 10, counts
        # The race may end on a run that saw `sub` swapped out, and an index run removes files
        # gone from disk: index once more with the tree settled before looking for the file.
        assert tool.execute(path=str(tmp_path / "root" / "data")).success
        assert any("inside" in r.content for r in store.retrieve("inside", top_k=5))
    finally:
        store.close()


def test_check_then_open_leaks_on_a_swapped_component_and_the_policy_does_not(tmp_path: Path):
    """The race, with its interleaving fixed: the old way (resolve and check, then open by
    path) reads the outside file once a directory component is swapped after the check; the
    policy's open, in the same state, refuses. (Deterministic, unlike the racing test above,
    whose swaps may or may not land between a check and an open on a loaded machine.)"""
    root = (tmp_path / "root").resolve()
    data = root / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside" / "sub"
    outside.mkdir(parents=True)
    (outside / "f.txt").write_text("LEAK\n")
    target = data / "sub" / "f.txt"

    resolved = os.path.realpath(target)
    assert resolved.startswith(str(root) + os.sep)  # the old check passes...
    os.rename(data / "sub", data / "sub_real")      # ...then the component is swapped
    os.symlink(outside, data / "sub")
    with open(resolved, encoding="utf-8") as fh:
        assert fh.read() == "LEAK\n"               # ...and the old open leaks

    executor = ToolExecutor([FileReadTool(allowed_dirs=[str(root)])], default_timeout=5)
    result = executor.execute(ToolCall(id="", name="file_read",
                                       arguments=json.dumps({"path": str(target)})))
    assert not result.success and "LEAK" not in result.content, result.content


# --- the workspace loaders ---------------------------------------------------------------------
def test_a_tool_file_linked_from_outside_is_reported_not_run(tmp_path: Path):
    from jarvis.core.registry import ToolRegistry
    from jarvis.workspace.tools import load_workspace_tools

    folder = tmp_path / "tools"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "evil.py").write_text(
        "from jarvis import tool\n\n@tool\ndef evil_tool() -> str:\n    'x'\n    return 'x'\n")
    (folder / "evil.py").symlink_to(elsewhere / "evil.py")
    (folder / "good.py").write_text(
        "from jarvis import tool\n\n@tool\ndef good_tool() -> str:\n    'x'\n    return 'x'\n")
    os.mkfifo(folder / "fifo.py")
    started = time.perf_counter()
    report = load_workspace_tools(folder=folder)
    assert time.perf_counter() - started < 5
    assert report.tools.keys() == {"good_tool"}
    errors = {e.path.name: e.message for e in report.errors}
    assert "keep tool files in the tools folder" in errors["evil.py"]
    assert "evil_tool" not in ToolRegistry.keys()


def test_an_agent_fifo_does_not_hang_the_loader(tmp_path: Path):
    from jarvis.core.config import load_config
    from jarvis.workspace.agents import load_agents

    (tmp_path / "work" / "config.toml").write_text("")
    agents = tmp_path / "work" / "agents"
    agents.mkdir()
    (agents / "ok.toml").write_text('instructions = "be brief"\n')
    os.mkfifo(agents / "stuck.toml")
    started = time.perf_counter()
    scan = load_agents(load_config(tmp_path / "work" / "config.toml"))
    assert time.perf_counter() - started < 5
    assert [a.name for a in scan.agents] == ["ok"]


def test_the_config_file_itself_is_a_secret(workspace: Path, cli_env: dict[str, str]) -> None:
    (workspace / "config.toml").write_text(
        '[tools.file_read]\nallowed_dirs = ["."]\n'
        '[mcp.servers.gh]\ncommand = "x"\nenv = { GH_PAT = "TOKEN-in-config" }\n')
    denied = jarvis(cli_env, "tools", "run", "file_read", '{"path": "config.toml"}')
    assert denied.returncode == 1 and "TOKEN" not in denied.stdout + denied.stderr
    assert "the jarvis config file" in denied.stderr and "allowed_secret_paths" in denied.stderr
    assert jarvis(cli_env, "tools", "run", "file_read", '{"path": "README.md"}').returncode == 0


def test_copies_of_the_config_file_are_secrets_too(workspace: Path) -> None:
    """An editor's `config.toml~` or a `config.toml.bak` next to it holds the same MCP tokens
    (they were read in clear: only the exact path was refused)."""
    from jarvis.core.config import load_config

    text = '[mcp.servers.gh]\ncommand = "x"\nenv = { GH_PAT = "TOKEN-in-config" }\n'
    (workspace / "config.toml").write_text(text)
    for name in ("config.toml~", "config.toml.bak", "Config.TOML.orig", "config.toml.swp"):
        (workspace / name).write_text(text)
    (workspace / "config.toml.md").write_text("notes about the config\n")
    reader = FileReadTool(config=load_config(workspace / "config.toml"))
    for name in ("config.toml~", "config.toml.bak", "Config.TOML.orig", "config.toml.swp"):
        result = run(reader, path=str(workspace / name))
        assert result.error_type is ErrorType.DENIED, (name, result.content)
        assert "TOKEN" not in result.content and "the jarvis config file" in result.content
    assert run(reader, path=str(workspace / "config.toml.md")).success



def test_jarvis_ask_cannot_read_a_key_for_the_model(fake_home: Path, cli_env: dict[str, str],
                                                    tmp_path: Path) -> None:
    """End to end: a model asks `jarvis ask` for ~/.ssh/id_rsa and /etc/shadow; what goes
    back to it is the refusal, never the content."""
    from jarvis.testing import FakeOpenAIServer, reply, tool_call

    script = [reply(tool_calls=[tool_call("file_read", {"path": "~/.ssh/id_rsa"}),
                                tool_call("file_read", {"path": "/etc/shadow"})]),
              "I could not read them."]
    env = {**cli_env, "HOME": str(fake_home), "JARVIS_ENGINE": "vllm", "JARVIS_MODEL": "test-model"}
    with FakeOpenAIServer(script) as model:
        env["VLLM_HOST"] = model.url
        out = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", "--tools", "file_read",
                              "Show me my SSH key"], env=env, text=True, capture_output=True,
                             timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    tool_messages = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 2
    assert all("access denied or file not found" in m for m in tool_messages), tool_messages
    assert "PRIVATE KEY" not in json.dumps(model.requests) and "root:" not in json.dumps(model.requests)


@pytest.mark.parametrize("code", ["ENOSYS", "EPERM"])
def test_a_kernel_without_openat2_falls_back_to_the_walk(tmp_path: Path, monkeypatch, code: str):
    """An old kernel (ENOSYS) or a seccomp filter that does not know openat2 (EPERM): the
    probe says no and every read takes the O_NOFOLLOW walk, still refusing symlinks."""
    import errno as errnos

    number = getattr(errnos, code)

    def missing(*args, **kwargs):
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(beneath, "_openat2", missing)
    monkeypatch.setattr(beneath, "_openat2_ok", None)
    assert beneath.openat2_supported() is False
    (tmp_path / "a.txt").write_text("ok\n")
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)
    assert PathPolicy([tmp_path]).read(str(tmp_path / "a.txt")).data == b"ok\n"
    with pytest.raises(PathChanged):
        open_beneath(tmp_path.resolve(), ("link", "a.txt"))


# --- attacks on the fix (issue 12, second pass) ------------------------------------------------
def test_racing_a_folder_above_the_allowed_folder_never_leaks(tmp_path: Path, impl: str):
    """The allowed folder's own path is trusted too: a folder *above* it swapped for a symlink
    (someone who can write the workspace, and an allowed_dirs entry below it) must not move
    the read to a look-alike tree outside."""
    (tmp_path / "ws" / "data").mkdir(parents=True)
    (tmp_path / "ws" / "data" / "f.txt").write_text("inside\n")
    (tmp_path / "evil" / "data").mkdir(parents=True)
    (tmp_path / "evil" / "data" / "f.txt").write_text("LEAK\n")
    executor = ToolExecutor([FileReadTool(allowed_dirs=[str(tmp_path / "ws" / "data")])],
                            default_timeout=5)
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            os.rename(tmp_path / "ws", tmp_path / "ws_real")
            os.symlink(tmp_path / "evil", tmp_path / "ws")
            os.unlink(tmp_path / "ws")
            os.rename(tmp_path / "ws_real", tmp_path / "ws")
            swaps += 1

    counts = {"inside": 0, "refused": 0, "leaked": 0}
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()

    def step() -> None:
        result = executor.execute(ToolCall("c", "file_read",
                                           {"path": str(tmp_path / "ws" / "data" / "f.txt")}))
        key = "refused" if not result.success else (
            "leaked" if "LEAK" in result.content else "inside")
        counts[key] += 1

    try:
        _race_until(3.0, lambda: counts["inside"] > 0 and swaps > 100, step)
    finally:
        stop.set()
        thread.join(30)
    assert counts["leaked"] == 0, counts
    assert counts["inside"] > 0 and swaps > 100, (counts, swaps)


@pytest.mark.parametrize("name", ["key.pem.", "key.pem ", "server.key~", "id_rsa.bak",
                                  "cert.pem.orig", "deploy.KEY.old", "\uff49d_rsa",
                                  "\uff0eenv", "prod.tfstate", "ssh_host_ed25519_key",
                                  "shadow-", "creds.keytab", "htpasswd",
                                  # secrets without a key-ish extension or a leading dot
                                  "prod.env", "terraform.tfvars", "secrets.yaml",
                                  "Secrets.JSON.bak", "token.json", "office.ovpn"])
def test_secret_rules_see_through_copies_case_and_look_alikes(tmp_path: Path, name: str):
    """A backup copy (`~`, `.bak`, `.orig`, trailing dots or spaces), another case or a
    full-width look-alike of a secret's name is the same secret."""
    (tmp_path / name).write_text("TOKEN\n")
    (tmp_path / "plain.txt").write_text("fine\n")
    reader = FileReadTool(allowed_dirs=[str(tmp_path)])
    result = run(reader, path=str(tmp_path / name))
    assert result.error_type is ErrorType.DENIED and "TOKEN" not in result.content, result.content
    assert "secret rule" in result.content
    assert run(reader, path=str(tmp_path / "plain.txt")).success


def test_system_secrets_are_refused_even_when_slash_is_allowed():
    reader = FileReadTool(allowed_dirs=["/"])
    for path in ("/etc/shadow", "/etc/gshadow"):
        result = run(reader, path=path)
        assert result.error_type is ErrorType.DENIED and "root:" not in result.content, path
        assert "'shadow'" in result.content or "'gshadow'" in result.content
    assert run(reader, path="/etc/hostname").success or not Path("/etc/hostname").exists()


def test_a_hard_link_to_an_outside_secret_is_refused(fake_home: Path, tmp_path: Path):
    """`ln ~/.ssh/id_rsa notes.txt` in the workspace: the path looks innocent, the file is
    the key. A file with more than one link is refused unless its path is named."""
    ws = tmp_path / "ws"
    ws.mkdir()
    os.link(fake_home / ".ssh" / "id_rsa", ws / "notes.txt")
    (ws / "plain.md").write_text("fine\n")
    reader = FileReadTool(allowed_dirs=[str(ws)])
    result = run(reader, path=str(ws / "notes.txt"))
    assert result.error_type is ErrorType.DENIED and "PRIVATE KEY" not in result.content
    assert "2 hard links" in result.content and "allowed_secret_paths" in result.content
    assert run(reader, path=str(ws / "plain.md")).success
    named = FileReadTool(allowed_dirs=[str(ws)], allowed_secret_paths=[str(ws / "notes.txt")])
    assert run(named, path=str(ws / "notes.txt")).success


def test_memory_index_skips_a_hard_link_to_an_outside_secret(fake_home: Path, tmp_path: Path):
    from jarvis.memory import SQLiteMemory
    from jarvis.tools.memory_tools import MemoryIndexTool

    ws = tmp_path / "ws"
    ws.mkdir()
    os.link(fake_home / ".ssh" / "id_rsa", ws / "notes.txt")
    (ws / "plain.md").write_text("fine words\n")
    store = SQLiteMemory(tmp_path / "m.db")
    try:
        tool = MemoryIndexTool(backend=store, allowed_dirs=[str(ws)])
        result = ToolExecutor([tool], default_timeout=30, approver=lambda spec, args: True).execute(
            ToolCall("c", "memory_index", {"path": str(ws)}))
        assert result.success, result.content
        assert result.metadata["indexed"] == 1 and result.metadata["skipped_denied"] == 1
        assert store.retrieve("PRIVATE", top_k=5) == []
    finally:
        store.close()


def _index_tool(store, folder: Path, **kwargs):
    from jarvis.tools.memory_tools import MemoryIndexTool

    tool = MemoryIndexTool(backend=store, allowed_dirs=[str(folder)], **kwargs)
    return ToolExecutor([tool], default_timeout=60, approver=lambda spec, args: True)


def test_a_model_reindexing_cannot_delete_what_a_person_indexed(tmp_path: Path):
    """A person indexed a folder with `jarvis memory index`, naming a key file; the model's
    memory_index of the same folder is refused the key file, and must not count it as gone
    from disk and delete it from memory."""
    from jarvis.memory import SQLiteMemory
    from jarvis.memory.indexer import index_paths

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("heron notes\n")
    (ws / "deploy.pem").write_text("falcon certificate\n")
    store = SQLiteMemory(tmp_path / "m.db")
    try:
        assert index_paths(store, [ws, ws / "deploy.pem"]).indexed == 2  # named: indexed
        result = _index_tool(store, ws).execute(ToolCall("c", "memory_index", {"path": str(ws)}))
        assert result.success and result.metadata["skipped_denied"] == 1, result.content
        assert result.metadata["removed"] == 0, result.content
        assert "gone from disk" not in result.content
        assert store.stats()["files"] == 2
    finally:
        store.close()


def test_memory_index_walk_is_bounded_by_entries_not_only_files(tmp_path: Path, monkeypatch):
    """A folder of entries that hold no file to index (hidden files here; empty folders
    alike) costs a bounded walk: the model's call stops early and says so. The bound is
    lowered from 20 000 so that the test makes few files."""
    from jarvis.memory import SQLiteMemory, indexer

    monkeypatch.setattr(indexer, "MAX_WALK_ENTRIES", 300, raising=False)
    MAX_WALK_ENTRIES = 300
    ws = tmp_path / "ws"
    (ws / "a").mkdir(parents=True)
    (ws / "a" / "one.md").write_text("one\n")
    crowd = ws / "b"
    crowd.mkdir()
    for i in range(MAX_WALK_ENTRIES + 100):
        (crowd / f".h{i}").touch()
    (ws / "c").mkdir()
    (ws / "c" / "late.md").write_text("late\n")
    store = SQLiteMemory(tmp_path / "m.db")
    try:
        result = _index_tool(store, ws, max_files=5).execute(
            ToolCall("c", "memory_index", {"path": str(ws)}))
        assert result.success, result.content
        assert result.metadata["stopped_early"] is True, result.content
        assert result.metadata["indexed"] == 1 and "limit" in result.content
    finally:
        store.close()


def test_memory_index_walk_is_bounded_in_depth(tmp_path: Path):
    """Every file's path is resolved component by component, so a chain of one-letter folders
    (each with a file) cost depth x depth lstat calls: 1,992 levels took 167 s. Folders more
    than MAX_WALK_DEPTH levels down are not walked, and the summary says so."""
    import time

    from jarvis.memory import SQLiteMemory, indexer

    ws = tmp_path / "ws"
    folder = ws
    for _ in range(indexer.MAX_WALK_DEPTH + 200):
        folder = folder / "a"
        folder.mkdir(parents=True)
        (folder / "f.md").write_text("deep\n")
    store = SQLiteMemory(tmp_path / "m.db")
    try:
        started = time.monotonic()
        result = _index_tool(store, ws, max_files=10_000).execute(
            ToolCall("c", "memory_index", {"path": str(ws)}))
        took = time.monotonic() - started
        assert result.success, result.content
        assert result.metadata["indexed"] == indexer.MAX_WALK_DEPTH, result.content
        assert result.metadata["skipped_deep"] == 1
        assert f"more than {indexer.MAX_WALK_DEPTH} levels deep not walked" in result.content
        assert took < 10, took
    finally:
        store.close()


def test_jarvis_own_mcp_state_is_a_secret(jarvis_home: Path):
    """Without a config.toml the workspace is $JARVIS_HOME, which holds the MCP servers'
    stderr logs (a server that prints its token on start-up) and cached tool lists: jarvis's
    own state, refused like the config file."""
    logs = jarvis_home / "mcp" / "logs"
    logs.mkdir(parents=True)
    (logs / "github.log").write_text("starting with GITHUB_TOKEN=ghp_SECRET\n")
    (jarvis_home / "notes.md").write_text("fine\n")
    reader = FileReadTool()
    result = run(reader, path=str(logs / "github.log"))
    assert result.error_type is ErrorType.DENIED and "SECRET" not in result.content
    assert "jarvis's MCP state" in result.content and "allowed_secret_paths" in result.content
    assert run(reader, path=str(jarvis_home / "notes.md")).success
