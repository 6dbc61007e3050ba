"""A run that stops without an answer (max_turns, the loop guard) is `incomplete` everywhere
(issue 25, item 2): the run log and `runs list/show`, `ask --json` (content empty, status and
stop_reason beside it, exit code 3), scheduled runs (`schedule runs`, the notification's
title, `scheduler start --once`'s exit code), the SDK result and `Jarvis.ask`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from net_support import Reply, serving

from jarvis.testing import FakeOpenAIServer, ScriptedEngine, reply, tool_call

ALWAYS_A_TOOL = reply(tool_calls=[tool_call("calculator", {"expression": "1+1"})])


def jarvis(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def engine_env(cli_env, tmp_path):
    with FakeOpenAIServer(default=ALWAYS_A_TOOL) as fake:
        yield dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="test-model")


def test_ask_at_max_turns_is_recorded_and_listed_as_incomplete(engine_env, tmp_path) -> None:
    out = jarvis(engine_env, tmp_path, "ask", "--tools", "calculator", "--max-turns", "2",
                 "--json", "Add one and one")
    assert out.returncode == 3, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "incomplete" and result["stop_reason"] == "max_turns"
    assert result["content"] == ""  # the canned sentence is not an answer
    assert result["stop_message"].startswith("stopped at max_turns (2 turns)")
    assert "raise it with --max-turns (exit code 3)" in out.stderr

    listed = jarvis(engine_env, tmp_path, "runs", "list", "--json")
    (row,) = json.loads(listed.stdout)
    assert row["status"] == "incomplete"
    table = jarvis(engine_env, tmp_path, "runs", "list")
    assert " incomplete " in table.stdout
    shown = jarvis(engine_env, tmp_path, "runs", "show", result["run_id"])
    assert f"run {result['run_id']}  (incomplete, source cli)" in shown.stdout
    assert "stopped: at max_turns (2 turns) without a final answer" in shown.stdout
    assert "answer:" not in shown.stdout


def test_the_loop_guard_is_incomplete_too(engine_env, tmp_path) -> None:
    out = jarvis(engine_env, tmp_path, "ask", "--tools", "calculator", "--json", "Add")
    assert out.returncode == 3, out.stderr
    result = json.loads(out.stdout)
    assert (result["status"], result["stop_reason"]) == ("incomplete", "loop_guard")
    assert "kept repeating the same tool call" in out.stderr


def test_sdk_result_and_ask(tmp_path) -> None:
    from jarvis import Jarvis, RunIncomplete

    with Jarvis(engine=ScriptedEngine(default=ALWAYS_A_TOOL), model="m") as j:
        out = j.ask_full("go", tools=["calculator"], max_turns=2)
        assert (out["status"], out["stop_reason"], out["content"]) == ("incomplete",
                                                                       "max_turns", "")
        with pytest.raises(RunIncomplete, match="stopped at max_turns") as caught:
            j.ask("go", tools=["calculator"], max_turns=2)
        assert caught.value.reason == "max_turns" and caught.value.result["turns"] == 2
        with pytest.raises(RunIncomplete):
            list(j.ask_stream("go", tools=["calculator"], max_turns=2))
        assert j.runlog.list(limit=1)[0]["status"] == "incomplete"
    with Jarvis(engine=ScriptedEngine(["Two."]), model="m") as j:
        out = j.ask_full("go")
        assert (out["status"], out["stop_reason"], out["content"]) == ("ok", None, "Two.")


def test_a_scheduled_run_that_stops_is_incomplete_notified_and_exits_3(engine_env,
                                                                      tmp_path) -> None:
    with serving({"/hook": lambda seen: Reply(200, "ok")}) as hook:
        (tmp_path / "config.toml").write_text(
            f'[agent]\nmax_turns = 2\n\n[channels.hook]\nurl = "json://{hook.hostport}/hook"\n')
        due = time.time()  # due now (--at allows a time a few seconds past)
        at = datetime.fromtimestamp(due, UTC).isoformat(timespec="seconds")
        added = jarvis(engine_env, tmp_path, "schedule", "add", "Add one and one", "--at", at,
                       "--tools", "calculator", "--notify", "hook", "--json")
        assert added.returncode == 0, added.stderr
        task_id = json.loads(added.stdout)["task_id"]
        once = jarvis(engine_env, tmp_path, "scheduler", "start", "--once")
        assert once.returncode == 3, once.stdout + once.stderr
        assert f"task {task_id}: run #1 incomplete (max_turns: stopped at max_turns" in once.stdout
        assert "ran 1 task run(s), 0 failed, 1 stopped without an answer" in once.stderr
        (message,) = [json.loads(s.body) for s in hook.seen]
        assert message["title"] == f"jarvis: task {task_id} stopped without an answer"
        assert message["message"].startswith("The run stopped without an answer (max_turns): "
                                             "stopped at max_turns (2 turns)")
        # Still serving the hook: the manual run below notifies it too (with the hook gone,
        # its delivery kept that run retrying for ~15 s).
        runs = jarvis(engine_env, tmp_path, "schedule", "runs", "--json")
        (run,) = json.loads(runs.stdout)
        assert run["status"] == "incomplete" and run["error_type"] == "max_turns"
        listing = jarvis(engine_env, tmp_path, "schedule", "runs")
        assert "incomplete" in listing.stdout and "max_turns" in listing.stdout
        again = jarvis(engine_env, tmp_path, "schedule", "run", task_id)
        assert again.returncode == 3 and "stopped at max_turns" in again.stderr
        shown = jarvis(engine_env, tmp_path, "schedule", "show", task_id, "--json")
        assert json.loads(shown.stdout)["last_outcome"] == "incomplete"  # and no retry was queued
        assert len(hook.seen) == 2, [s.body for s in hook.seen]
