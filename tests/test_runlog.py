"""The run log: SQLite under JARVIS_HOME, WAL, one transaction per run."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from jarvis.errors import UserError
from jarvis.runlog import MAX_STORED_CHARS, RunLog


def _run(i: int, **extra) -> dict:
    return {"id": f"run{i:04d}", "created_at": 1000.0 + i, "source": "sdk", "query": f"q{i}",
            "agent": "simple", "model": "m", "engine": "scripted", "status": "ok",
            "content": f"a{i}", "turns": 1,
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            "messages": [{"role": "user", "content": f"q{i}"}], **extra}


def test_record_list_and_show(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    assert log.list() == []
    log.record(_run(1), [{"call_id": "c1", "tool_name": "calculator",
                          "arguments": {"expression": "1+1"}, "content": "2", "success": True,
                          "latency_seconds": 0.001, "cost_usd": 0.0}])
    log.record(_run(2, source="scheduler", status="error", error="EngineError: down"), [])
    rows = log.list()
    assert [r["id"] for r in rows] == ["run0002", "run0001"]  # newest first
    assert rows[1]["tool_calls"] == 1 and rows[0]["status"] == "error"
    assert [r["id"] for r in log.list(source="scheduler")] == ["run0002"]
    run = log.get("run0001")
    assert run["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert run["messages"] == [{"role": "user", "content": "q1"}]
    assert run["tool_calls"][0]["arguments"] == {"expression": "1+1"}
    assert run["tool_calls"][0]["success"] is True
    log.close()
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_id_prefixes(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    log.record(_run(11), [])
    log.record(_run(12), [])
    assert log.get("run0011")["query"] == "q11"
    with pytest.raises(UserError, match="ambiguous"):
        log.get("run001")
    with pytest.raises(UserError, match="no run"):
        log.get("nothing")
    with pytest.raises(UserError, match="no run"):
        log.get("%")  # LIKE wildcards are not patterns here
    with pytest.raises(UserError, match="give a run id"):
        log.get("")  # an empty prefix must not quietly mean "the newest run"


def test_big_fields_are_cut(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    log.record(_run(1, content="x" * (MAX_STORED_CHARS + 10)), [])
    assert log.get("run0001")["content"].endswith("10 characters cut]")


def test_concurrent_writers_from_threads_and_two_logs(tmp_path):
    path = tmp_path / "runs.db"
    logs = [RunLog(path), RunLog(path)]
    errors: list[BaseException] = []

    def write(k: int) -> None:
        try:
            for i in range(20):
                logs[k % 2].record(_run(k * 100 + i), [{"tool_name": "t", "success": True}])
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(RunLog(path).list(limit=1000)) == 80


def test_commits_do_not_sync_and_odd_values_are_stored_as_json(tmp_path):
    """The run log's connection follows the other stores (WAL, synchronous = NORMAL: a commit
    is not an fsync, so a served request does not wait on the disk); a tool result whose
    fields are not text is kept as JSON text rather than failing the whole record."""
    log = RunLog(tmp_path / "runs.db")
    log.record(_run(1), [{"call_id": "c1", "tool_name": "t", "arguments": None,
                          "content": {"rows": [1, 2]}, "success": True,
                          "error_type": ("odd",), "latency_seconds": 0.5}])
    assert log._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL (FULL is 2)
    call = log.get("run0001")["tool_calls"][0]
    assert call["content"] == '{"rows": [1, 2]}' and call["error_type"] == '["odd"]'
    assert call["arguments"] is None and call["latency_seconds"] == 0.5
    # Recording a run again (same id) replaces it and its tool calls.
    log.record(_run(1, content="again"), [])
    run = log.get("run0001")
    assert run["content"] == "again" and run["tool_calls"] == []
    log.close()
