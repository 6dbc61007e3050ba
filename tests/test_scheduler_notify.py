"""Scheduled results delivered to channels: a finished run's answer (or failure) reaches a real
receiver on loopback; delivery is recorded with the run, retried with backoff, and a failed
delivery never loses the answer."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from net_support import Reply, SmtpReceiver, serving
from ports import closed_port
from scheduler_support import TESTS, ScriptRunner

from jarvis.channels.delivery import ChannelNotifier
from jarvis.core.config import JarvisConfig
from jarvis.errors import UserError
from jarvis.scheduler.runner import RunOutcome
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore
from jarvis.scheduler.tools import ScheduleTaskTool


def scheduler_for(tmp_path: Path, channels: dict, **kwargs) -> TaskScheduler:
    config = JarvisConfig.model_validate({"channels": channels})
    return TaskScheduler(store=SchedulerStore(tmp_path / "sched.db"), runner=ScriptRunner(),
                         config=config, **kwargs)


def test_a_finished_run_is_delivered_and_recorded(tmp_path):
    with serving({"/hook": lambda s: Reply(200, "ok")}) as server:
        sched = scheduler_for(tmp_path, {"hook": {"url": f"json://{server.hostport}/hook"}})
        task = sched.add("echo the build is green", every=3600, notify="hook")
        run = sched.run_now(task.id)
    assert run.status == "succeeded" and run.answer == "the build is green"
    payload = json.loads(server.seen[0].body)
    assert payload["title"] == f"jarvis: task {task.id} done"
    assert payload["message"].startswith("the build is green\n\n")
    assert f"run #{run.id}" in payload["message"]
    assert run.delivery["status"] == "delivered" and run.delivery["attempts"] == 1
    stored = sched.store.get_run(run.id)
    assert stored.delivery == run.delivery and stored.to_dict()["delivery"]["channel"] == "hook"
    assert sched.get_task(task.id).to_dict()["notify"] == "hook"


def test_a_failed_run_is_delivered_as_a_failure_by_email(tmp_path):
    with SmtpReceiver() as smtp:
        sched = scheduler_for(tmp_path, {"mail": {
            "url": f"mailto://127.0.0.1:{smtp.port}?to=me@example.com&from=jarvis@example.com"}})
        task = sched.add("fail", every=3600, notify="mail")
        run = sched.run_now(task.id)
    assert run.status == "failed" and run.delivery["status"] == "delivered"
    (_, recipients, message), = smtp.messages
    assert recipients == ["me@example.com"]
    assert message["Subject"] == f"jarvis: task {task.id} failed"
    text = next(p.get_payload(decode=True).decode() for p in message.walk()
                if p.get_content_type() == "text/plain")
    assert "The run failed (execution): RuntimeError: boom: the task failed on purpose" in text


def test_delivery_is_retried_with_backoff_until_it_works(tmp_path):
    calls = []

    def flaky(seen):
        calls.append(seen)
        return Reply(503, "busy") if len(calls) < 3 else Reply(200, "ok")

    slept = []
    with serving({"/hook": flaky}) as server:
        config = JarvisConfig.model_validate({"channels": {"hook": {
            "url": f"json://{server.hostport}/hook", "retries": 4, "retry_backoff": 1.5}}})
        sched = TaskScheduler(store=SchedulerStore(tmp_path / "s.db"), runner=ScriptRunner(),
                              config=config, notifier=ChannelNotifier(config, sleep=slept.append))
        task = sched.add("echo hello", every=3600, notify="hook")
        run = sched.run_now(task.id)
    assert len(calls) == 3 and slept == [1.5, 3.0]
    assert run.delivery["status"] == "delivered" and run.delivery["attempts"] == 3


def test_a_failed_delivery_never_loses_the_answer(tmp_path):
    sched = scheduler_for(tmp_path, {"down": {"url": f"json://127.0.0.1:{closed_port()}/x",
                                              "retries": 2, "retry_backoff": 0.01}})
    task = sched.add("echo the answer survives", every=3600, notify="down")
    run = sched.run_now(task.id)
    assert run.status == "succeeded" and run.answer == "the answer survives"
    assert run.delivery["status"] == "failed" and run.delivery["attempts"] == 3
    assert run.delivery["error"]
    stored = sched.store.get_run(run.id)
    assert stored.answer == "the answer survives" and stored.delivery["status"] == "failed"


def test_a_notifier_that_raises_is_recorded_and_the_run_kept(tmp_path):
    def broken(task, run):
        raise RuntimeError("notifier exploded")

    sched = scheduler_for(tmp_path, {"x": {"url": "json://127.0.0.1:9/"}}, notifier=broken)
    task = sched.add("echo kept", every=3600, notify="x")
    run = sched.run_now(task.id)
    assert run.answer == "kept" and run.status == "succeeded"
    assert run.delivery["status"] == "failed"
    assert run.delivery["error"] == "RuntimeError: notifier exploded"


def test_due_runs_of_the_daemon_are_delivered(tmp_path):
    now = [1_000_000.0]
    with serving({"/hook": lambda s: Reply(200, "ok")}) as server:
        config = JarvisConfig.model_validate(
            {"channels": {"hook": {"url": f"json://{server.hostport}/hook"}}})
        sched = TaskScheduler(store=SchedulerStore(tmp_path / "s.db"), runner=ScriptRunner(),
                              config=config, clock=lambda: now[0])
        sched.add("echo on schedule", every=60, notify="hook")
        sched.add("echo no channel", every=60)
        now[0] += 61
        runs = sched.run_due()
    assert sorted(r.answer for r in runs) == ["no channel", "on schedule"]
    assert [json.loads(s.body)["message"].split("\n")[0] for s in server.seen] == ["on schedule"]
    assert {r.answer: (r.delivery or {}).get("status") for r in runs} == {
        "on schedule": "delivered", "no channel": None}


def test_unknown_channels_are_refused_when_the_task_is_created(tmp_path):
    sched = scheduler_for(tmp_path, {"hook": {"url": "json://127.0.0.1:9/"}})
    with pytest.raises(UserError, match="unknown channel 'nope' for --notify; configured "
                                        "channels: hook"):
        sched.add("echo x", every=60, notify="nope")
    with pytest.raises(UserError, match="invalid channel name"):
        sched.add("echo x", every=60, notify="../../etc")


def test_a_model_may_only_notify_channels_open_to_unattended_sends(tmp_path):
    from jarvis.core.types import ToolCall
    from jarvis.tools.executor import ToolExecutor

    sched = scheduler_for(tmp_path, {"asks": {"url": "json://127.0.0.1:9/"},
                                     "open": {"url": "json://127.0.0.1:9/", "confirm": False}})
    tool = ScheduleTaskTool(scheduler=sched)

    def schedule(executor, channel):
        return executor.execute(ToolCall(id="1", name="schedule_task", arguments={
            "prompt": "echo x", "schedule_type": "interval", "schedule_value": "3600",
            "notify": channel}))

    model = ToolExecutor([tool])  # a model's call: the run's grant applies
    refused = schedule(model, "asks")
    assert not refused.success and refused.error_type.value == "denied"
    assert "asks before each message" in refused.content
    assert "jarvis schedule add --notify asks" in refused.content
    ok = schedule(model, "open")
    assert ok.success and json.loads(ok.content)["notify"] == "open"
    # channel_send approved by name for the run: the model may name that channel too
    approved = schedule(ToolExecutor([tool], approved_tools=["channel_send"]), "asks")
    assert approved.success, approved.content
    # a person's call (direct, or `jarvis tools run`) may name any configured channel
    person = tool.execute(prompt="echo y", schedule_type="interval", schedule_value="3600",
                          notify="asks")
    assert person.success
    assert sorted(t.notify for t in sched.list_tasks()) == ["asks", "asks", "open"]


def test_a_model_may_not_name_a_channel_the_scheduler_cannot_check(tmp_path):
    # The scheduler the docs show for a tool (no config) cannot tell whether a channel asks
    # before each message; a daemon run with the real config would then send to it unasked.
    from jarvis.core.types import ToolCall
    from jarvis.tools.executor import ToolExecutor

    sched = TaskScheduler(store=SchedulerStore(tmp_path / "s.db"), runner=ScriptRunner())
    model = ToolExecutor([ScheduleTaskTool(scheduler=sched)])
    refused = model.execute(ToolCall(id="1", name="schedule_task", arguments={
        "prompt": "echo x", "schedule_type": "interval", "schedule_value": "3600",
        "notify": "phone"}))
    assert not refused.success and refused.error_type.value == "denied", refused.content
    assert "phone" in refused.content and "jarvis schedule add --notify phone" in refused.content
    assert sched.list_tasks() == []
    # an unknown name under a known config is refused too (no task stored)
    known = scheduler_for(tmp_path, {"open": {"url": "json://127.0.0.1:9/",
                                                    "confirm": False}})
    unknown = ToolExecutor([ScheduleTaskTool(scheduler=known)]).execute(ToolCall(
        id="2", name="schedule_task", arguments={"prompt": "echo x", "schedule_type": "interval",
                                                 "schedule_value": "3600", "notify": "phone"}))
    assert not unknown.success and known.list_tasks() == []


def test_a_version_1_database_is_migrated(tmp_path):
    path = tmp_path / "old.db"
    from jarvis.scheduler import store as store_module

    old = store_module.MIGRATIONS
    store_module.MIGRATIONS = old[:1]
    try:
        first = SchedulerStore(path)
        with first.immediate() as conn:  # a row as version 1 wrote it
            conn.execute("INSERT INTO tasks (id, prompt, schedule_type, schedule_value, status, "
                         "tools, approved_tools, metadata, created_at) VALUES ('old1', 'echo old', "
                         "'interval', '60', 'active', '[]', '[]', '{}', 1.0)")
        first.close()
    finally:
        store_module.MIGRATIONS = old
    columns = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(tasks)")}
    assert "notify" not in columns
    upgraded = SchedulerStore(path)
    (task,) = upgraded.list_tasks()
    assert upgraded.schema_version == len(old) and task.notify is None and task.prompt == "echo old"


def test_agent_files_with_notify_get_a_notifying_task(tmp_path):
    from jarvis.core.config import load_config
    from jarvis.scheduler.agents import sync_agent_schedules

    (tmp_path / "agents").mkdir()
    (tmp_path / "config.toml").write_text('[scheduler]\ndb_path = "s.db"\n'
                                          '[channels.phone]\nurl = "ntfy://ntfy.example/t"\n')
    agent = tmp_path / "agents" / "news.toml"
    agent.write_text('schedule = "0 7 * * *"\nnotify = "phone"\n')
    config = load_config(tmp_path / "config.toml")
    sched = TaskScheduler(store=SchedulerStore(tmp_path / "s.db"), runner=ScriptRunner(),
                          config=config)
    assert sync_agent_schedules(sched, config).created == ["news"]
    assert [t.notify for t in sched.list_tasks("active")] == ["phone"]
    agent.write_text('schedule = "0 7 * * *"\n')  # notify dropped: the task is replaced
    assert sync_agent_schedules(sched, load_config(tmp_path / "config.toml")).replaced == ["news"]
    assert [t.notify for t in sched.list_tasks("active")] == [None]


def test_cli_schedule_add_notify_and_runs_show_the_delivery(cli_env, tmp_path):
    with serving({"/hook": lambda s: Reply(200, "ok")}) as server:
        config = tmp_path / "config.toml"
        config.write_text(f'[scheduler]\ndb_path = "{tmp_path / "s.db"}"\n'
                          f'[channels.hook]\nurl = "json://{server.hostport}/hook"\n')
        env = dict(cli_env, JARVIS_CONFIG=str(config), PYTHONPATH=str(TESTS))

        def jarvis(*args):
            return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                                  text=True, env=env, timeout=60)

        added = jarvis("schedule", "add", "echo from the cli", "--every", "3600", "--notify",
                       "hook", "--json")
        assert added.returncode == 0, added.stderr
        task_id = json.loads(added.stdout)["task_id"]
        ran = jarvis("schedule", "run", task_id, "--runner", "scheduler_support:ScriptRunner")
        runs = jarvis("schedule", "runs", "--json")
        listing = jarvis("schedule", "runs")
        wrong = jarvis("schedule", "add", "x", "--every", "60", "--notify", "nope")
    assert ran.returncode == 0 and ran.stdout == "from the cli\n"
    assert "delivery to hook: delivered" in ran.stderr
    assert json.loads(server.seen[0].body)["message"].startswith("from the cli")
    assert json.loads(runs.stdout)[0]["delivery"]["status"] == "delivered"
    assert "[-> hook: delivered]" in listing.stdout
    assert wrong.returncode == 2 and "unknown channel 'nope'" in wrong.stderr


def test_a_failed_delivery_keeps_the_answer_in_the_run_log_with_the_real_sdk_runner(cli_env,
                                                                                     tmp_path):
    # The whole path a user runs: `jarvis schedule run` with the default runner (SdkRunner ->
    # Jarvis.ask_full -> a loopback OpenAI-compatible engine), a channel whose receiver is
    # down. The answer must be in the run record AND in the run log (`jarvis runs show`), and
    # the failed delivery recorded with the run and said on stderr.
    from jarvis.testing import FakeOpenAIServer

    dead = closed_port()
    with FakeOpenAIServer(["Three new issues were opened overnight."]) as server:
        config = tmp_path / "config.toml"
        config.write_text(
            f'[engine]\ndefault = "openai"\nmodel = "test-model"\nmax_retries = 0\n'
            f'[engine.hosts]\nopenai = "{server.base_url}"\n'
            f'[scheduler]\ndb_path = "{tmp_path / "s.db"}"\n'
            f'[channels.phone]\nurl = "json://127.0.0.1:{dead}/notify"\n'
            f'retries = 1\nretry_backoff = 0.01\n')
        env = dict(cli_env, JARVIS_CONFIG=str(config), OPENAI_API_KEY="test")

        def jarvis(*args):
            return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                                  text=True, env=env, timeout=60)

        added = jarvis("schedule", "add", "Summarize the new issues", "--every", "3600",
                       "--notify", "phone", "--json")
        assert added.returncode == 0, added.stderr
        task_id = json.loads(added.stdout)["task_id"]
        ran = jarvis("schedule", "run", task_id)  # no --runner: the configured SdkRunner
        runs = jarvis("schedule", "runs", task_id, "--json")
        assert server.requests[0]["messages"][-1]["content"] == "Summarize the new issues"
    # The run succeeded and printed its answer; the delivery failure is one line on stderr.
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "Three new issues were opened overnight.\n"
    assert "delivery to phone: failed after 2 attempt(s): " in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr
    # The run record keeps the answer and the failed delivery...
    (record,) = json.loads(runs.stdout)
    assert record["status"] == "succeeded"
    assert record["answer"] == "Three new issues were opened overnight."
    assert record["delivery"]["status"] == "failed" and record["delivery"]["attempts"] == 2
    assert record["delivery"]["channel"] == "phone" and record["delivery"]["error"]
    # ...and links the run log, where the same answer is (it was never only in the message).
    assert record["run_log_id"]
    shown = jarvis("runs", "show", record["run_log_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    logged = json.loads(shown.stdout)
    assert logged["source"] == "scheduler" and logged["query"] == "Summarize the new issues"
    assert logged["content"] == "Three new issues were opened overnight."
    text = jarvis("runs", "show", record["run_log_id"])
    assert text.returncode == 0 and "Three new issues were opened overnight." in text.stdout


def test_run_outcome_helper_is_untouched():
    assert RunOutcome.failed("x").success is False
