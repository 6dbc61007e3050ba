"""End to end through the real SDK path: daemon subprocess -> Jarvis.ask_full -> a loopback
OpenAI-compatible server; answers are recorded with the run log id of the ask."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from scheduler_support import Daemon, daemon_env, jarvis, query
from waiting import wait_for

from jarvis.scheduler.schedules import iso
from jarvis.testing import FakeOpenAIServer, reply, tool_call

DANGER_TOOL = '''
from pathlib import Path

from jarvis.tools.base import tool


@tool(requires_confirmation=True)
def danger(path: str) -> str:
    """Write a marker file (needs confirmation).

    Args:
        path: the file to write
    """
    Path(path).write_text("written")
    return "wrote " + path
'''


def answer_from_request(body: dict):
    """Call `danger` on the path named in the prompt, then report what the tool said."""
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return f"tool said: {messages[-1].get('content')}"
    prompt = next(m["content"] for m in messages if m.get("role") == "user")
    return reply(tool_calls=[tool_call("danger", {"path": prompt.split()[-1]})])


@pytest.fixture
def workspace(tmp_path) -> Path:
    """The daemon's working folder: config.toml (engine retries off) and a workspace tool."""
    work = Path.cwd()  # conftest chdir'ed into a fresh folder
    (work / "tools").mkdir()
    (work / "tools" / "danger.py").write_text(DANGER_TOOL)
    return work


def test_daemon_runs_prompts_like_jarvis_ask_and_records_the_run_log_id(cli_env, tmp_path, workspace):
    db = tmp_path / "scheduler.db"
    with FakeOpenAIServer(["The news is good."]) as server:
        (workspace / "config.toml").write_text(
            f'[engine]\ndefault = "openai"\nmodel = "test-model"\nmax_retries = 0\n'
            f'[engine.hosts]\nopenai = "{server.base_url}"\n')
        env = daemon_env(cli_env, db, tmp_path / "unused.log")
        env["OPENAI_API_KEY"] = "test"
        added = jarvis(env, "schedule", "add", "Summarize the news", "--every", "1", "--json")
        assert added.returncode == 0, added.stderr
        task_id = json.loads(added.stdout)["task_id"]
        daemon = Daemon(env, "--poll", "0.2", runner=None, cwd=str(workspace))
        try:
            rows = wait_for(lambda: query(db, "SELECT answer, run_log_id FROM runs WHERE "
                                              "status = 'succeeded'"), what="an SDK run")
            answer, run_log_id = rows[0]
            assert answer == "The news is good."
            assert server.requests[0]["messages"][-1]["content"] == "Summarize the news"
            # The run log has the same run, marked as coming from the scheduler.
            shown = jarvis(env, "runs", "show", run_log_id, "--json")
            assert shown.returncode == 0, shown.stderr
            record = json.loads(shown.stdout)
            assert record["source"] == "scheduler" and record["query"] == "Summarize the news"
            assert record["content"] == "The news is good."
            # The scripted replies are used up: the engine now errors. Runs fail, the daemon lives.
            wait_for(lambda: query(db, "SELECT error FROM runs WHERE status = 'failed' AND "
                                       "error_type = 'engine'"), what="an engine failure")
            assert daemon.proc.poll() is None
        finally:
            assert daemon.stop(signal.SIGTERM) == 0
        runs = jarvis(env, "schedule", "runs", task_id, "--json")
        assert {r["status"] for r in json.loads(runs.stdout)} >= {"succeeded", "failed"}


def test_confirmation_gated_tools_need_explicit_approval(cli_env, tmp_path, workspace):
    db = tmp_path / "scheduler.db"
    denied_file, approved_file = tmp_path / "denied.txt", tmp_path / "approved.txt"
    with FakeOpenAIServer(default=answer_from_request) as server:
        (workspace / "config.toml").write_text(
            f'[engine]\ndefault = "openai"\nmodel = "test-model"\nmax_retries = 0\n'
            f'[engine.hosts]\nopenai = "{server.base_url}"\n')
        env = daemon_env(cli_env, db, tmp_path / "unused.log")
        env["OPENAI_API_KEY"] = "test"
        # Due in an hour, then made due now: a time a second ahead was in the past by the
        # second `schedule add` on a loaded machine (the CLI refuses a time in the past).
        at = iso(time.time() + 3600)
        for path, extra in ((denied_file, []), (approved_file, ["--approve-tools", "danger"])):
            out = jarvis(env, "schedule", "add", f"write {path}", "--at", at, "--tools", "danger",
                         "--agent", "orchestrator", *extra)
            assert out.returncode == 0, out.stderr
        with sqlite3.connect(db) as conn:
            assert conn.execute("UPDATE tasks SET next_run = ?", (time.time() - 1,)).rowcount == 2
        conn.close()
        daemon = Daemon(env, "--poll", "0.2", runner=None, cwd=str(workspace))
        try:
            rows = wait_for(lambda: len(r := query(
                db, "SELECT status, answer, error FROM runs WHERE status IN ('succeeded', "
                "'parked') ORDER BY status")) == 2 and r, what="both runs")
        finally:
            assert daemon.stop() == 0
    # The approved tool ran; the other call waits for the person (docs/approvals.md): the run
    # is parked, its tool has not run.
    (parked, _, waiting), (succeeded, answer, _) = rows
    assert approved_file.read_text() == "written"
    assert not denied_file.exists()
    assert (parked, succeeded) == ("parked", "succeeded")
    assert waiting.startswith("waiting for your approval of danger"), waiting
    assert answer == f"tool said: wrote {approved_file}"


def test_a_run_that_fails_mid_ask_links_to_its_run_log(tmp_path):
    # The engine fails after the ask started: the run log holds the failed ask, and the
    # scheduler's run record must point at it (as for succeeded runs), not lose the link.
    from jarvis import Jarvis
    from jarvis.errors import EngineError
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore
    from jarvis.testing import ScriptedEngine

    with Jarvis(engine=ScriptedEngine([EngineError("the engine went away")])) as system:
        sched = TaskScheduler(store=SchedulerStore(tmp_path / "s.db"), system=system)
        task = sched.add("hello", every=3600)
        run = sched.run_now(task.id)
        assert (run.status, run.error_type) == ("failed", "engine")
        assert "the engine went away" in run.error
        assert run.run_log_id, "the failed run lost its run log id"
        logged = system.runlog.get(run.run_log_id)
        assert logged["status"] == "error" and logged["source"] == "scheduler"
