"""The memory tools (retrieval, memory_store/retrieve/search/index) and context injection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.core.types import ErrorType, ToolCall
from jarvis.memory.context import memory_context
from jarvis.memory.sqlite import SQLiteMemory
from jarvis.tools.catalog import build_tools
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.memory_tools import (
    MAX_STORE_CHARS,
    MemoryIndexTool,
    MemoryRetrieveTool,
    MemorySearchTool,
    MemoryStoreTool,
)
from jarvis.tools.retrieval import RetrievalTool


@pytest.fixture
def mem(tmp_path: Path):
    store = SQLiteMemory(tmp_path / "memory.db")
    yield store
    store.close()


def run(tool, approver=None, **arguments):
    executor = ToolExecutor([tool], approver=approver)
    return executor.execute(ToolCall(id="t1", name=tool.spec.name, arguments=json.dumps(arguments)))


def test_retrieval_formats_results_with_source_and_position(mem: SQLiteMemory):
    mem.store("Backups run nightly at 02:00 to the NAS.", source="ops/backup.md")
    mem.store("The cat likes tuna.", source="pets.md")
    result = run(RetrievalTool(backend=mem), query="when do backups run", top_k=3)
    assert result.success, result.content
    assert result.content.startswith("Found 1 result for 'when do backups run':")
    # Stored by the person (a direct store): the real source and who wrote it.
    assert "[1] ops/backup.md (chunk 1, line 1) [your note]\nBackups run nightly" in result.content
    assert result.labels == {"private"}
    assert result.metadata["scores"][0] > 0
    assert "Backups run nightly" in result.content
    assert result.metadata["sources"] == ["ops/backup.md"]
    assert result.metadata["citations"] == ["ops/backup.md (chunk 1, line 1)"]


def test_empty_store_says_so_plainly(mem: SQLiteMemory):
    result = run(RetrievalTool(backend=mem), query="anything")
    assert result.success
    assert "Memory is empty" in result.content
    mem.store("something else entirely", source="s")
    result = run(RetrievalTool(backend=mem), query="zebra")
    assert result.success and result.content == "No stored memory matches 'zebra'."


def test_no_backend_fails_clearly():
    result = RetrievalTool().execute(query="machine learning")
    assert not result.success and result.error_type is ErrorType.EXECUTION
    assert "no memory backend configured" in result.content
    result = MemoryStoreTool().execute(content="x")
    assert "no memory backend configured" in result.content


@pytest.mark.parametrize("arguments, fragment", [
    ({"query": ""}, "no words"),
    ({"query": "((( *** )))"}, "no words"),
    ({"query": "x" * 1001}, "1000"),
    ({"query": "ok", "top_k": 0}, "top_k"),
    ({"query": "ok", "top_k": 21}, "top_k"),
    ({"query": "ok", "top_k": True}, "top_k"),
    ({"query": 42}, "string"),
    ({}, "query"),
])
def test_retrieval_rejects_bad_arguments(mem: SQLiteMemory, arguments, fragment):
    direct = RetrievalTool(backend=mem).execute(**arguments)
    assert not direct.success and direct.error_type is ErrorType.INVALID_ARGS
    via_executor = run(RetrievalTool(backend=mem), **arguments)
    assert not via_executor.success and via_executor.error_type is ErrorType.INVALID_ARGS
    assert fragment in direct.content or fragment in via_executor.content


def test_integral_float_top_k_is_accepted(mem: SQLiteMemory):
    mem.store("Machine learning notes.", source="ml.md")
    result = run(RetrievalTool(backend=mem), query="machine", top_k=2.0)
    assert result.success and "ml.md" in result.content
    assert not RetrievalTool(backend=mem).execute(query="machine", top_k=2.5).success


def test_hostile_queries_through_the_tool(mem: SQLiteMemory):
    mem.store("Machine learning notes.", source="ml.md")
    tool = RetrievalTool(backend=mem)
    for query in ['"machine', "NEAR(machine", "content:machine", "machine*", "machine\x00)"]:
        result = run(tool, query=query)
        assert result.success, (query, result.content)
        assert "ml.md" in result.content


def test_memory_store_then_search_and_retrieve(mem: SQLiteMemory):
    stored = run(MemoryStoreTool(backend=mem), content="Anna's birthday is on 3 May.",
                 source="conversation", metadata={"person": "Anna"})
    assert stored.success and stored.metadata["doc_id"]
    assert "Stored 28 characters from 'conversation'" in stored.content
    run(MemoryStoreTool(backend=mem), content="Birthday cake recipe: flour, eggs.", source="recipes")
    found = run(MemorySearchTool(backend=mem), query="birthday")
    assert found.success and found.content.startswith("2 matches for 'birthday':")
    # Stored by a model (through the executor): its source is the label the model chose,
    # shown as such, never as if it were a real file (docs/trust.md).
    assert ("] model-written note labelled 'conversation' (chunk 1, line 1) [written by a "
            "model]") in found.content  # (an executor without a run id: no run to name)
    assert found.content.endswith("Anna's birthday is on 3 May.")
    assert found.labels == {"private", "untrusted"}  # a model wrote them: reading taints
    only = run(MemorySearchTool(backend=mem), query="birthday", source="recipes")
    assert [m["source"] for m in only.metadata["matches"]] == ["recipes"]
    retrieved = run(MemoryRetrieveTool(backend=mem), query="Anna birthday")
    assert retrieved.success and "labelled 'conversation' (chunk 1, line 1)" in retrieved.content
    assert MemoryRetrieveTool(backend=mem).spec.name == "memory_retrieve"


@pytest.mark.parametrize("arguments, fragment", [
    ({"content": ""}, "non-empty"),
    ({"content": "x" * (MAX_STORE_CHARS + 1)}, "limit"),
    ({"content": "x", "metadata": {"k": "v" * 5000}}, "limit"),
    ({"content": "x", "source": "s" * 501}, "source"),
    ({"content": "x", "metadata": "not an object"}, "metadata"),
    ({"content": "x", "metadata": __import__("functools").reduce(lambda d, _: {"k": d},
                                                                   range(5000), {})}, "nested"),
])
def test_memory_store_bounds(mem: SQLiteMemory, arguments, fragment):
    result = MemoryStoreTool(backend=mem).execute(**arguments)
    assert not result.success and result.error_type is ErrorType.INVALID_ARGS
    assert fragment in result.content
    assert mem.count() == 0


def test_memory_index_requires_confirmation(mem: SQLiteMemory, tmp_path: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("Quarterly planning happens in March.\n")
    denied = run(MemoryIndexTool(backend=mem, allowed_dirs=[str(tmp_path)]), path=str(folder))
    assert not denied.success and denied.error_type is ErrorType.DENIED
    assert mem.count() == 0
    approved = run(MemoryIndexTool(backend=mem, allowed_dirs=[str(tmp_path)]),
                   approver=lambda spec, args: True,
                   path=str(folder))
    assert approved.success, approved.content
    assert approved.content.startswith("Indexed 1 file (1 chunk)")
    assert mem.retrieve("planning")[0].source == str((folder / "a.md").resolve())


def test_memory_index_respects_allowed_dirs(mem: SQLiteMemory, tmp_path: Path):
    allowed = tmp_path / "allowed"
    secret = tmp_path / "secret"
    allowed.mkdir()
    secret.mkdir()
    (allowed / "ok.md").write_text("public walrus facts\n")
    (secret / "key.txt").write_text("private walrus password\n")
    os.symlink(secret / "key.txt", allowed / "link.txt")
    (tools,) = build_tools(["memory_index"], services={"memory": mem},
                           settings={"memory_index": {"allowed_dirs": [str(allowed)]}})
    assert str(allowed) in tools.spec.description
    outside = tools.execute(path=str(secret))
    assert not outside.success and outside.error_type is ErrorType.DENIED
    missing = tools.execute(path=str(allowed / "nope"))
    assert not missing.success and "not found" in missing.content
    inside = tools.execute(path=str(allowed))
    assert inside.success, inside.content
    assert inside.metadata["skipped_denied"] == 1  # the symlink out of the allowed folder
    assert [r.source for r in mem.retrieve("walrus", top_k=5)] == [str(allowed / "ok.md")]


def test_memory_index_falls_back_to_file_read_allowed_dirs(cli_env: dict[str, str],
                                                           jarvis_home: Path, tmp_path: Path):
    # file_read restricted to one folder: indexing another folder and searching it would read
    # its files all the same, so memory_index is held to file_read's folders unless it has
    # its own list. Through `jarvis tools run`, which builds tools like `jarvis ask`.
    allowed, secret = tmp_path / "allowed", tmp_path / "secret"
    allowed.mkdir()
    secret.mkdir()
    (allowed / "ok.md").write_text("public walrus facts\n")
    (secret / "key.txt").write_text("private walrus password\n")
    config = jarvis_home / "config.toml"

    def index(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jarvis.cli", "tools", "run", "--yes",
                               "memory_index", json.dumps({"path": str(path)})],
                              env=cli_env, capture_output=True, text=True, timeout=60)

    config.write_text(f'[tools.file_read]\nallowed_dirs = ["{allowed}"]\n')
    denied = index(secret)
    assert denied.returncode == 1 and "denied" in denied.stderr, denied.stderr
    assert index(allowed).returncode == 0
    # Its own list wins over file_read's.
    config.write_text(f'[tools.file_read]\nallowed_dirs = ["{allowed}"]\n'
                      f'[tools.memory_index]\nallowed_dirs = ["{secret}"]\n')
    assert index(secret).returncode == 0
    assert index(allowed).returncode == 1


def test_tools_built_from_config_open_the_default_store(jarvis_home: Path):
    from jarvis.core.config import load_config

    config = load_config()
    (retrieval, store) = build_tools(["retrieval", "memory_store"],
                                     services={"config": config})
    assert not (jarvis_home / "memory.db").exists()  # nothing is opened until a call
    assert store.execute(content="The spare key is under the blue pot.").success
    result = retrieval.execute(query="spare key")
    assert result.success and "blue pot" in result.content
    assert (jarvis_home / "memory.db").exists()
    retrieval.backend.close()
    store.backend.close()


def test_memory_tools_are_registered_and_cheap_to_import():
    code = ("import sys, jarvis.tools; from jarvis.core.registry import ToolRegistry; "
            "names = {'retrieval','memory_store','memory_retrieve','memory_search','memory_index'}; "
            "assert names <= set(ToolRegistry.keys()), ToolRegistry.keys(); "
            "assert 'sqlite_utils' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_memory_context_cites_sources(mem: SQLiteMemory):
    assert memory_context(mem, "anything at all", 3) == ("", [])  # empty store
    mem.store("The wifi password is hunter2.", source="home/wifi.md")
    mem.store("Router admin page: 192.168.1.1", source="home/router.md")
    text, sources = memory_context(mem, "What is the wifi password?", 3)
    assert sources == ["home/wifi.md"]
    assert "[1] home/wifi.md (chunk 1, line 1)" in text
    assert "hunter2" in text
    assert memory_context(mem, "unrelated question about volcanoes", 3) == ("", [])
    assert memory_context(mem, "", 3) == ("", [])
    assert memory_context(mem, "What is it? 1 2 3", 3) == ("", [])  # stop words only
    # A long prompt (over the query limit) still works: the first words are used.
    text, sources = memory_context(mem, "wifi password " + "filler words " * 2000, 3)
    assert sources == ["home/wifi.md"]


def test_jarvis_ask_full_injects_memory_and_runs_the_retrieval_tool(jarvis_home: Path):
    """The SDK wiring end to end, offline: context injection on by default, off with
    context=False, and the retrieval tool getting the SDK's store."""
    from jarvis.sdk import Jarvis
    from jarvis.testing import ScriptedEngine, reply, tool_call

    store = SQLiteMemory(jarvis_home / "memory.db")
    store.store("The wifi password is hunter2.", source="home/wifi.md")
    store.close()

    engine = ScriptedEngine(["It is hunter2 [1].", "No context used.",
                             reply("", tool_calls=[tool_call("retrieval",
                                                             {"query": "wifi password"})]),
                             "Found it."])
    jarvis = Jarvis(engine=engine)
    try:
        out = jarvis.ask_full("What is the wifi password?", agent="simple")
        assert out["context_sources"] == ["home/wifi.md"]
        system = engine.calls[0]["messages"][0]
        assert system["role"] == "system" and "[1] home/wifi.md (chunk 1, line 1)" in system["content"]

        jarvis.ask_full("What is the wifi password?", agent="simple", context=False)
        assert all("hunter2" not in str(m.get("content")) for m in engine.calls[1]["messages"])

        out = jarvis.ask_full("Look it up", agent="orchestrator", tools=["retrieval"],
                              context=False)
        (used,) = out["tool_results"]
        assert used["tool_name"] == "retrieval" and used["success"]
        assert "hunter2" in used["content"] and "home/wifi.md" in used["content"]
    finally:
        jarvis.close()


@pytest.mark.parametrize("path, error_type", [
    ("", ErrorType.INVALID_ARGS), ("bad\x00path", ErrorType.INVALID_ARGS),
    ("x" * 5000, ErrorType.INVALID_ARGS), ("/proc/self", ErrorType.DENIED),
    ("/dev", ErrorType.DENIED),
])
def test_memory_index_rejects_hostile_paths(mem: SQLiteMemory, path, error_type):
    result = MemoryIndexTool(backend=mem).execute(path=path)
    assert not result.success and result.error_type is error_type
    assert mem.count() == 0


def test_memory_index_stops_at_the_file_limit(mem: SQLiteMemory, tmp_path: Path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(12):
        (folder / f"n{i:02d}.md").write_text(f"note {i}\n")
    result = MemoryIndexTool(backend=mem, max_files=5, allowed_dirs=[str(tmp_path)]).execute(path=str(folder))
    assert result.success and result.metadata["indexed"] == 5
    assert "Stopped at the file limit" in result.content
    assert mem.count() == 5


def test_docs_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import re

    monkeypatch.chdir(tmp_path)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "memory.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        namespace: dict = {}
        exec(compile(block, "docs/memory.md", "exec"), namespace)  # noqa: S102
        for value in namespace.values():
            if isinstance(value, SQLiteMemory):
                value.close()
    assert (tmp_path / "memory.db").exists()


def test_index_counts_failures_and_goes_on(mem: SQLiteMemory, tmp_path: Path):
    from jarvis.memory.indexer import index_paths

    folder = tmp_path / "loop"
    folder.mkdir()
    (folder / "ok.md").write_text("a readable note about kestrels\n")
    os.symlink(folder / "b", folder / "a")  # a -> b -> a: reading either fails
    os.symlink(folder / "a", folder / "b")
    summary = index_paths(mem, [folder])
    assert (summary.indexed, summary.error_count) == (1, 2)
    assert all("a" in e or "b" in e for e in summary.errors)
    assert "2 failed" in summary.describe()
    assert mem.retrieve("kestrels")[0].source == str(folder.resolve() / "ok.md")
