"""JARVIS_HOME is private to its user: every folder jarvis makes there is 0700, every file
(memory, scheduler and run log databases with their -wal and -shm, MCP logs and caches) 0600,
whatever the umask; what an older jarvis (or a person) left open is tightened when jarvis
opens it, and `jarvis doctor` lists what is still open. Through the CLI, as real processes."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.testing import FakeOpenAIServer

TOOLBOX = Path(__file__).parent / "mcp_servers" / "toolbox.py"


def sh(env: dict[str, str], command: str, cwd: Path, umask: str = "000"
       ) -> subprocess.CompletedProcess:
    """`jarvis ...` under `umask` in a shell, as a person would run it."""
    script = f'umask {umask}; jarvis() {{ {shlex.quote(sys.executable)} -m jarvis.cli "$@"; }}\n'
    return subprocess.run(["/bin/sh", "-c", script + command], env=env, cwd=cwd, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def modes(root: Path) -> dict[str, str]:
    out = {}
    for path in [root, *root.rglob("*")]:
        info = os.lstat(path)
        out[str(path.relative_to(root.parent))] = f"{stat.S_IMODE(info.st_mode):04o}"
    return out


def test_everything_jarvis_makes_is_private_under_umask_000(tmp_path: Path, cli_env):
    home = tmp_path / "state" / "deep" / "jarvis"  # neither it nor its parents exist
    work = tmp_path / "work"
    (work / "notes").mkdir(parents=True)
    (work / "notes" / "a.md").write_text("milk and eggs\n")
    (work / "config.toml").write_text(
        f'[mcp.servers.box]\ncommand = {json.dumps(sys.executable)}\n'
        f'args = [{json.dumps(str(TOOLBOX))}]\n')
    env = dict(cli_env, JARVIS_HOME=str(home), JARVIS_ENGINE="vllm", JARVIS_MODEL="m")
    with FakeOpenAIServer(["Hello."] * 5) as model:
        env["VLLM_HOST"] = model.url
        steps = ["jarvis memory index notes",
                 "jarvis ask hi",
                 "jarvis schedule add 'check the build' --every 3600",
                 "jarvis mcp list",
                 "jarvis serve --print-token"]
        for step in steps:
            out = sh(env, step, work)
            assert out.returncode == 0, (step, out.stderr)
            assert "warning" not in out.stderr.lower(), (step, out.stderr)
    seen = modes(home)
    names = {Path(p).name for p in seen}
    # The state really is there: every store, the WAL files and the MCP server's log.
    for name in ("memory.db", "runs.db", "scheduler.db", "box.log", "serve.token"):
        assert name in names, (name, sorted(names))
    assert any(n.startswith("tools-box-") for n in names), sorted(names)
    for path, mode in seen.items():
        kind = "0700" if (home.parent / path).is_dir() else "0600"
        assert mode == kind, (path, mode)
    # The folders above it that jarvis had to make are not writable by others either.
    for parent in (tmp_path / "state", tmp_path / "state" / "deep"):
        assert stat.S_IMODE(parent.stat().st_mode) == 0o755


def test_what_was_left_open_is_tightened_when_jarvis_opens_it(tmp_path: Path, cli_env):
    """A home and databases from an older jarvis (0755 / 0644, WAL files 0666): the next
    command makes them private and says so once on stderr."""
    home = Path(cli_env["JARVIS_HOME"])
    first = sh(cli_env, "jarvis memory index notes", _notes(tmp_path))
    assert first.returncode == 0, first.stderr
    os.chmod(home, 0o755)
    for path in home.iterdir():
        os.chmod(path, 0o666 if path.name.endswith(("-wal", "-shm")) else 0o644)
    again = sh(cli_env, "jarvis memory index notes", tmp_path, umask="022")
    assert again.returncode == 0, again.stderr
    assert f"{home} was open to other users (mode 0755)" in again.stderr, again.stderr
    assert "memory.db was open to other users (mode 0644)" in again.stderr
    assert all(mode in ("0700", "0600") for mode in modes(home).values()), modes(home)
    quiet = sh(cli_env, "jarvis memory index notes", tmp_path)
    assert quiet.returncode == 0 and "warning" not in quiet.stderr.lower(), quiet.stderr


def _notes(tmp_path: Path) -> Path:
    (tmp_path / "notes").mkdir(exist_ok=True)
    (tmp_path / "notes" / "a.md").write_text("milk\n")
    return tmp_path


def test_doctor_lists_what_is_open_to_others(tmp_path: Path, cli_env):
    home = Path(cli_env["JARVIS_HOME"])
    ok = sh(cli_env, "jarvis doctor --json", tmp_path)
    state = json.loads(ok.stdout)["state"]
    assert state == {"home": str(home), "exists": True, "exposed": []}
    assert "is private to you" in sh(cli_env, "jarvis doctor", tmp_path).stdout
    (home / "config.toml").write_text("")
    os.chmod(home / "config.toml", 0o644)
    foreign = home / "left-by-someone"
    foreign.write_text("x")
    os.chmod(foreign, 0o666)
    os.chown(foreign, 65534, 65534)
    report = json.loads(sh(cli_env, "jarvis doctor --json", tmp_path).stdout)["state"]
    assert {(Path(e["path"]).name, e["mode"], e["owned"]) for e in report["exposed"]} == {
        ("config.toml", "0644", True), ("left-by-someone", "0666", False)}
    text = sh(cli_env, "jarvis doctor", tmp_path).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("state: "))
    assert "WARNING: 2 path(s)" in line and "left-by-someone (0666, not yours)" in line
    assert f"chmod -R go= {home}" in line


def test_a_database_owned_by_someone_else_is_reported_not_changed(tmp_path: Path, cli_env):
    """jarvis cannot (and must not) chmod another user's file: it says so."""
    if os.geteuid() != 0:
        pytest.fail("this test gives a file to another uid and needs root (the suite runs "
                    "as root)")
    home = Path(cli_env["JARVIS_HOME"])
    db = home / "memory.db"
    first = sh(cli_env, "jarvis memory index notes", _notes(tmp_path))
    assert first.returncode == 0, first.stderr
    os.chmod(db, 0o644)
    os.chown(db, 65534, 65534)
    out = sh(cli_env, "jarvis memory stats", tmp_path)
    assert f"{db} is owned by another user (uid 65534)" in out.stderr, out.stderr
    assert stat.S_IMODE(db.stat().st_mode) == 0o644


WHILE_OPEN = """
import os, stat, sys
from jarvis.memory.sqlite import SQLiteMemory
from jarvis.runlog import RunLog
from jarvis.scheduler.store import SchedulerStore
home = sys.argv[1]
memory = SQLiteMemory(os.path.join(home, "m2.db"))
memory.store("a note", source="x")
log = RunLog(os.path.join(home, "sub", "r2.db"))
log.record({"query": "q"}, [])
store = SchedulerStore(os.path.join(home, "s2.db"))
for name in sorted(os.listdir(home)) + ["sub/" + n for n in os.listdir(os.path.join(home, "sub"))]:
    print(name, oct(stat.S_IMODE(os.lstat(os.path.join(home, name)).st_mode)))
"""


def test_wal_and_shm_files_are_private_while_a_database_is_open(tmp_path: Path, cli_env):
    """The -wal and -shm files exist only while a connection is open (the last one to close
    removes them): looked at from inside a process that holds memory, run log and scheduler
    databases open, under umask 000."""
    home = tmp_path / "fresh-home"
    out = sh(cli_env, f"{shlex.quote(sys.executable)} -c {shlex.quote(WHILE_OPEN)} "
                      f"{shlex.quote(str(home))}", tmp_path)
    assert out.returncode == 0, out.stderr
    listed = dict(line.split() for line in out.stdout.splitlines())
    for name in ("m2.db-wal", "m2.db-shm", "sub/r2.db-wal", "sub/r2.db-shm", "s2.db-wal"):
        assert listed.get(name) == "0o600", (name, listed)
    assert listed["sub"] == "0o700"
