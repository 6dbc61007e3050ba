"""`jarvis memory`: index, re-index, search, stats, forget, progress. In process (click's
CliRunner, tests/cli_support.py), but an index job other processes search while it writes and
an index run without root's capabilities (real subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_in_process

from jarvis.memory.sqlite import SQLiteMemory


def jarvis(env: dict[str, str], *args: str, cwd: Path | None = None,
           preexec_fn: Any = None) -> subprocess.CompletedProcess[str]:
    """`jarvis memory ARGS` in process; with `preexec_fn` a real subprocess that runs it."""
    if preexec_fn is None:
        return run_in_process(["memory", *args], env=env, cwd=cwd)
    return subprocess.run([sys.executable, "-m", "jarvis.cli", "memory", *args], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=60,
                          preexec_fn=preexec_fn)


def permissions_apply_to_root() -> Any:
    """A preexec_fn under which file permissions bind the child even when it runs as root
    (CI does): the child loses CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, the capabilities
    that let root read a chmod 0 file. Dropped from the bounding set, they are gone after
    exec. None when not root (permissions bind already)."""
    if os.geteuid() != 0:
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)  # loaded here, not in the forked child
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2

    def drop() -> None:
        for cap in (cap_dac_override, cap_dac_read_search):
            if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed: the test "
                              "needs CAP_SETPCAP to run the CLI as root without DAC override")

    return drop


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    (root / "code").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "node_modules" / "pkg").mkdir(parents=True)
    (root / "plans.md").write_text("# Plans\n\nQuarterly planning happens in March.\n"
                                   "The offsite is in Lisbon.\n")
    (root / "code" / "train.py").write_text("def train(model):\n"
                                            "    \"\"\"Fit the model with gradient descent.\"\"\"\n"
                                            "    return model\n")
    (root / "diary.txt").write_text("Saw a heron by the canal today.\n")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (root / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (root / ".git" / "config").write_text("planning secret in git\n")
    (root / "node_modules" / "pkg" / "index.js").write_text("// planning dependency\n")
    return root


def test_index_search_stats_forget(cli_env: dict[str, str], notes: Path, jarvis_home: Path):
    first = jarvis(cli_env, "index", str(notes))
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip().startswith(
        "Indexed 3 files (3 chunks); 2 binary or non-UTF-8 skipped in")
    assert (jarvis_home / "memory.db").exists()

    found = jarvis(cli_env, "search", "quarterly planning", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert [h["source"] for h in hits] == [str(notes.resolve() / "plans.md")]
    assert hits[0]["position"] == "chunk 1, lines 1-4" and hits[0]["score"] > 0

    text = jarvis(cli_env, "search", "gradient descent", "-k", "1")
    assert text.returncode == 0
    assert text.stdout.startswith(f"[1] {notes.resolve() / 'code' / 'train.py'} (chunk 1, "
                                  f"lines 1-3)  [indexed file]  score ")
    assert "Fit the model" in text.stdout

    stats = json.loads(jarvis(cli_env, "stats", "--json").stdout)
    assert stats["files"] == 3 and stats["chunks"] == 3

    forget = jarvis(cli_env, "forget", str(notes / "diary.txt"))
    assert forget.returncode == 0 and forget.stdout.strip().startswith("Forgot 1 document")
    assert json.loads(jarvis(cli_env, "search", "heron", "--json").stdout) == []

    unknown = jarvis(cli_env, "forget", "no-such-source")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("Error: nothing in memory comes from 'no-such-source'")
    assert "Traceback" not in unknown.stderr

    folder = jarvis(cli_env, "forget", str(notes))
    assert folder.returncode == 0 and "Forgot 2 documents" in folder.stdout


def test_reindex_only_changes(cli_env: dict[str, str], notes: Path):
    assert jarvis(cli_env, "index", str(notes)).returncode == 0
    again = json.loads(jarvis(cli_env, "index", str(notes), "--json").stdout)
    assert (again["indexed"], again["unchanged"], again["removed"]) == (0, 3, 0)

    (notes / "plans.md").write_text("# Plans\n\nPlanning moved to April.\n")
    (notes / "diary.txt").unlink()
    (notes / "new.md").write_text("A brand new note about otters.\n")
    changed = json.loads(jarvis(cli_env, "index", str(notes), "--json").stdout)
    assert (changed["indexed"], changed["unchanged"], changed["removed"]) == (2, 1, 1)

    hits = json.loads(jarvis(cli_env, "search", "planning", "--json").stdout)
    assert len(hits) == 1 and "April" in hits[0]["content"]  # the old chunk is gone
    assert json.loads(jarvis(cli_env, "search", "heron", "--json").stdout) == []
    assert json.loads(jarvis(cli_env, "search", "otters", "--json").stdout)


def test_search_messages_and_hostile_queries(cli_env: dict[str, str], notes: Path):
    empty = jarvis(cli_env, "search", "anything")
    assert empty.returncode == 0
    assert empty.stdout.strip() == "Memory is empty: index files with `jarvis memory index PATH`."
    jarvis(cli_env, "index", str(notes))
    for query in ['"quarterly', "NEAR(planning", "content:planning", "planning*", "((("]:
        result = jarvis(cli_env, "search", query, "--json")
        assert result.returncode in (0, 2), result.stderr
        assert "Traceback" not in result.stderr
        if result.returncode == 0 and query != "(((":
            assert json.loads(result.stdout), query
    nothing = jarvis(cli_env, "search", "((( *** )))")
    assert nothing.returncode == 2 and "no words to search for" in nothing.stderr
    none = jarvis(cli_env, "search", "volcano")
    assert none.returncode == 0 and none.stdout.strip() == "No matches for 'volcano'."


def test_missing_path_and_help(cli_env: dict[str, str], tmp_path: Path):
    missing = jarvis(cli_env, "index", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"Error: path not found: {tmp_path / 'nope'}"
    for command in ([], ["index"], ["search"], ["stats"], ["forget"]):
        shown = jarvis(cli_env, *command, "--help")
        assert shown.returncode == 0 and "Usage:" in shown.stdout


def test_progress_bar_on_stderr(cli_env: dict[str, str], tmp_path: Path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(40):
        (folder / f"n{i:02d}.md").write_text(f"note {i} about topic{i}\n")
    result = jarvis(cli_env, "index", str(folder), "--progress")
    assert result.returncode == 0
    assert "40/40 files" in result.stderr and "[####" in result.stderr
    assert "files" not in result.stdout.split("Indexed")[0]  # the bar never goes to stdout
    quiet = jarvis(cli_env, "index", str(folder))
    assert quiet.stderr == ""  # not a terminal: no bar


def test_config_db_path_and_db_option(cli_env: dict[str, str], notes: Path, tmp_path: Path):
    work = tmp_path / "ws"
    work.mkdir()
    (work / "config.toml").write_text('[memory]\ndb_path = "state/mem.db"\n')
    assert jarvis(cli_env, "index", str(notes), cwd=work).returncode == 0
    assert (work / "state" / "mem.db").exists()
    explicit = tmp_path / "explicit.db"
    assert jarvis(cli_env, "--db", str(explicit), "index", str(notes / "plans.md")).returncode == 0
    stats = json.loads(jarvis(cli_env, "--db", str(explicit), "stats", "--json").stdout)
    assert stats["files"] == 1


def test_searches_keep_working_while_an_index_job_writes(cli_env: dict[str, str],
                                                         tmp_path: Path, jarvis_home: Path):
    folder = tmp_path / "big"
    folder.mkdir()
    para = "Lorem ipsum walrus dolor sit amet, consectetur adipiscing elit. " * 15
    for i in range(200):
        (folder / f"doc{i:03d}.md").write_text(f"# Doc {i}\n\n" + (para + "\n\n") * 25)
    store = SQLiteMemory(jarvis_home / "memory.db")  # creates the schema first
    writer = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "memory", "index", str(folder)],
                              env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    searches = partial = 0
    seen_counts = []
    deadline = time.monotonic() + 120
    while writer.poll() is None and time.monotonic() < deadline:
        results = store.retrieve("walrus", top_k=3)  # must never raise "database is locked"
        searches += 1
        files = store.stats()["files"]
        seen_counts.append(files)
        if results and 0 < files < 200:
            partial += 1
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert out.startswith("Indexed 200 files")
    assert searches > 0 and partial > 0, (searches, seen_counts[-5:])
    assert seen_counts == sorted(seen_counts)  # readers see whole committed batches, in order
    assert store.stats()["files"] == 200
    store.close()


def test_unreadable_file_is_counted_and_kept(cli_env: dict[str, str], notes: Path):
    assert jarvis(cli_env, "index", str(notes)).returncode == 0
    (notes / "diary.txt").chmod(0)
    try:
        result = jarvis(cli_env, "index", str(notes), "--json",
                        preexec_fn=permissions_apply_to_root())
    finally:
        (notes / "diary.txt").chmod(0o644)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["error_count"] == 1 and summary["removed"] == 0
    assert json.loads(jarvis(cli_env, "search", "heron", "--json").stdout)


def test_indexing_a_folder_leaves_its_secrets_out_of_memory(cli_env: dict[str, str],
                                                             tmp_path: Path):
    """What a person indexes, a model can later find with memory_search: keys and secrets
    met while walking a folder (by name, a symlink to ~/.ssh, a hard link to an outside key)
    are left out and counted; a secret file named on the command line is indexed."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY walrus\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "plan.md").write_text("the plan mentions a walrus\n")
    (notes / "server.pem").write_text("CERT walrus\n")
    (notes / "ssh-key.txt").symlink_to(home / ".ssh" / "id_rsa")
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "id_ed25519").write_text("HARDLINK walrus\n")
    os.link(tmp_path / "vault" / "id_ed25519", notes / "backup.txt")
    result = jarvis(cli_env, "index", str(notes), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["indexed"] == 1 and summary["skipped_denied"] == 3, summary
    hits = json.loads(jarvis(cli_env, "search", "walrus", "--json").stdout)
    assert [h["content"].strip() for h in hits] == ["the plan mentions a walrus"]
    named = jarvis(cli_env, "index", str(notes / "server.pem"), "--json")
    assert json.loads(named.stdout)["indexed"] == 1


def test_indexing_the_workspace_leaves_the_config_file_out(cli_env: dict[str, str],
                                                           tmp_path: Path):
    """`jarvis memory index .` in the workspace indexed config.toml, and a model's
    memory_search then read its MCP tokens, which file_read refuses. Named on the command
    line, the config file is indexed (the person asked for it)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "config.toml").write_text(
        '[mcp.servers.gh]\ncommand = "x"\nenv = { GH_PAT = "ghp_walrusTOKEN" }\n')
    (ws / "config.toml.bak").write_text('GH_PAT = "ghp_walrusTOKEN"\n')
    (ws / "notes.md").write_text("a note about the walrus\n")
    result = jarvis(cli_env, "index", ".", "--json", cwd=ws)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["indexed"] == 1 and summary["skipped_denied"] == 2, summary
    hits = json.loads(jarvis(cli_env, "search", "walrus", "--json", cwd=ws).stdout)
    assert [h["content"].strip() for h in hits] == ["a note about the walrus"]
    named = jarvis(cli_env, "index", "config.toml", "--json", cwd=ws)
    assert json.loads(named.stdout)["indexed"] == 1
