"""`jarvis schedule ...` (in process, click's CliRunner; end to end, an unknown id and a prompt
piped on stdin as real subprocesses), and the scheduler tools (reference example, JSON
results, SDK wiring, failing clearly without a scheduler)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_support import run_in_process
from click.testing import CliRunner
from scheduler_support import daemon_env, query
from scheduler_support import jarvis as jarvis_process

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ToolCall


@pytest.fixture
def env(cli_env, tmp_path):
    return daemon_env(cli_env, tmp_path / "scheduler.db", tmp_path / "runner.log")


def jarvis(env: dict[str, str], *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """`jarvis ARGS` in process (tests/cli_support.py); `jarvis_process` is the real one."""
    return run_in_process(args, env=env, input=input)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_schedule_commands_end_to_end(env):
    task = json.loads(ok(jarvis_process(env, "schedule", "add", "echo good morning", "--cron", "0 8 * * *",
                                "--tz", "Europe/Paris", "--json")))
    task_id = task["task_id"]
    assert task["status"] == "active" and task["timezone"] == "Europe/Paris"
    assert task["next_run"].endswith(("T06:00:00+00:00", "T07:00:00+00:00"))  # 08:00 Paris
    listed = json.loads(ok(jarvis_process(env, "schedule", "list", "--json")))
    assert [t["task_id"] for t in listed] == [task_id]
    assert task_id in ok(jarvis_process(env, "schedule", "list"))

    assert "paused" in ok(jarvis_process(env, "schedule", "pause", task_id))
    assert json.loads(ok(jarvis_process(env, "schedule", "list", "--status", "active", "--json"))) == []
    resumed = json.loads(ok(jarvis_process(env, "schedule", "resume", task_id, "--json")))
    assert resumed["status"] == "active" and resumed["next_run"]

    ran = jarvis_process(env, "schedule", "run", task_id, "--runner", "scheduler_support:ScriptRunner")
    assert ok(ran).strip() == "good morning"
    runs = json.loads(ok(jarvis_process(env, "schedule", "runs", task_id, "--json")))
    assert [(r["trigger"], r["status"], r["answer"]) for r in runs] == [
        ("manual", "succeeded", "good morning")]
    assert runs[0]["run_log_id"].startswith("log-")

    cancelled = json.loads(ok(jarvis_process(env, "schedule", "cancel", task_id, "--json")))
    assert (cancelled["status"], cancelled["next_run"]) == ("cancelled", None)


@pytest.mark.parametrize("args, message", [
    (["pause", "nope"], "no scheduled task with id 'nope'"),
    (["resume", "nope"], "no scheduled task with id 'nope'"),
    (["cancel", "nope"], "no scheduled task with id 'nope'"),
    (["run", "nope"], "no scheduled task with id 'nope'"),
    (["runs", "nope"], "no scheduled task with id 'nope'"),
    (["add", "x", "--cron", "0 0 30 2 *"], "can never fire"),
    (["add", "x", "--cron", "99 * * * *"], "invalid cron expression"),
    (["add", "x", "--cron", "0 8 * * *", "--tz", "Nowhere/City"], "unknown time zone"),
    # Zone names are paths under the zoneinfo folder: a folder, an over-long name, a
    # traversal and a data file are each an unknown zone, not an OSError traceback.
    (["add", "x", "--cron", "0 8 * * *", "--tz", "America"], "unknown time zone 'America'"),
    (["add", "x", "--cron", "0 8 * * *", "--tz", "x" * 300], "unknown time zone"),
    (["add", "x", "--cron", "0 8 * * *", "--tz", "../../etc/passwd"], "unknown time zone"),
    (["add", "x", "--cron", "0 8 * * *", "--tz", "zone.tab"], "unknown time zone"),
    (["add", "x"], "give exactly one schedule"),
    (["add", "x", "--every", "60", "--at", "2030-01-01T00:00:00Z"], "give exactly one schedule"),
    (["add", "x", "--every", "0.1"], "interval must be between"),
    (["add", "x", "--every", "60", "--grace", "nan"], "grace seconds must be 0 or more"),
    (["add", "x", "--every", "60", "--grace", "-1"], "grace seconds must be 0 or more"),
])
def test_mistakes_are_one_line_errors_with_exit_code_2(env, args, message, monkeypatch):
    from jarvis.cli import cli

    monkeypatch.setenv("JARVIS_SCHEDULER_DB", env["JARVIS_SCHEDULER_DB"])
    result = CliRunner().invoke(cli, ["schedule", *args])
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unknown_id_in_a_real_process(env):
    result = jarvis_process(env, "schedule", "run", "nope")
    assert result.returncode == 2
    assert result.stderr.strip() == ("Error: no scheduled task with id 'nope'; see the ids with "
                                     "`jarvis schedule list`")


def test_add_refuses_unknown_agent_and_tools_with_a_did_you_mean(env):
    # Every run of such a task would fail: refuse it when it is created, as `ask` does.
    bad = jarvis(env, "schedule", "add", "x", "--every", "60", "--tools", "calculater")
    assert bad.returncode == 2
    assert "unknown tool 'calculater' (did you mean 'calculator'?)" in bad.stderr
    agent = jarvis(env, "schedule", "add", "x", "--every", "60", "--agent", "orchestrater")
    assert agent.returncode == 2
    assert "unknown agent 'orchestrater' (did you mean 'orchestrator'?)" in agent.stderr
    assert "no scheduled tasks" in jarvis(env, "schedule", "list").stderr  # nothing was made
    good = jarvis(env, "schedule", "add", "x", "--every", "60", "--agent", "orchestrator",
                  "--tools", "calculator,think")
    assert good.returncode == 0 and "Warning" not in good.stderr, good.stderr


def test_documented_add_examples_run_as_written(env):
    # `schedule add --help` is copied by users: every example must work (a fixed --at date in
    # the past did not). Its --at date is moved a year ahead. (docs/scheduler.md's examples run
    # as written, in a shell, in tests/test_docs_scheduler.py.)
    import re
    import shlex

    from scheduler_support import future_at

    help_text = ok(jarvis(env, "schedule", "add", "--help"))
    lines = [line.split("#")[0] for line in help_text.splitlines()
             if re.match(r"\s*(echo .*\| *)?jarvis schedule add ", line)]
    assert len(lines) >= 4 and any("--at" in line for line in lines), lines
    assert any("|" in line for line in lines), lines
    for line in lines:
        piped, _, command = line.rpartition("|")
        stdin = shlex.split(piped)[1] + "\n" if piped else None  # `echo "TEXT" | ...`
        args = future_at(shlex.split(command)[1:])
        result = jarvis(env, *args, input=stdin)
        assert result.returncode == 0, (line, result.stderr)
        assert "unknown tool" not in result.stderr, (line, result.stderr)


def test_a_failed_manual_run_exits_1_with_the_error(env):
    task_id = json.loads(ok(jarvis(env, "schedule", "add", "fail", "--every", "60", "--json")))["task_id"]
    result = jarvis(env, "schedule", "run", task_id, "--runner", "scheduler_support:ScriptRunner")
    assert result.returncode == 1
    assert "boom: the task failed on purpose" in result.stderr


def test_every_command_has_help():
    from jarvis.commands.schedule import schedule, scheduler

    runner = CliRunner()
    for group in (schedule, scheduler):
        for name, command in group.commands.items():
            assert command.help, f"{group.name} {name} has no help text"
            result = runner.invoke(group, [name, "--help"])
            assert result.exit_code == 0 and "Usage:" in result.output


# --- tools ---------------------------------------------------------------------------------
@pytest.fixture
def scheduler(tmp_path):
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(db_path=str(tmp_path / "tools.db"))
    yield TaskScheduler(store=store, system=None)
    store.close()


def test_reference_example(scheduler):
    from jarvis.scheduler.tools import ScheduleTaskTool

    scheduler.start()
    try:
        tool = ScheduleTaskTool()
        tool._scheduler = scheduler
        result = tool.execute(prompt="Summarize the daily news", schedule_type="cron",
                              schedule_value="0 8 * * *", agent="simple")
    finally:
        scheduler.stop(5)
    data = json.loads(result.content)
    assert result.success and set(data) >= {"task_id", "next_run", "status"}
    assert data["status"] == "active" and data["next_run"].endswith("T08:00:00+00:00")
    assert scheduler.get_task(data["task_id"]).agent == "simple"


def test_tools_return_json_and_fail_clearly(scheduler):
    from jarvis.scheduler import tools as st

    made = st.ScheduleTaskTool(scheduler=scheduler).execute(
        prompt="ping", schedule_type="interval", schedule_value="3600", tools="calculator,think")
    task_id = json.loads(made.content)["task_id"]
    listed = json.loads(st.ListScheduledTasksTool(scheduler=scheduler).execute(status="active").content)
    assert [(t["task_id"], t["tools"]) for t in listed] == [(task_id, ["calculator", "think"])]
    paused = st.PauseScheduledTaskTool(scheduler=scheduler).execute(task_id=task_id)
    assert json.loads(paused.content) == {"task_id": task_id, "status": "paused"}
    resumed = json.loads(st.ResumeScheduledTaskTool(scheduler=scheduler).execute(task_id=task_id).content)
    assert resumed["status"] == "active" and resumed["next_run"]
    cancelled = json.loads(st.CancelScheduledTaskTool(scheduler=scheduler).execute(task_id=task_id).content)
    assert cancelled == {"task_id": task_id, "status": "cancelled", "next_run": None}

    unknown = st.PauseScheduledTaskTool(scheduler=scheduler).execute(task_id="nope")
    assert not unknown.success and unknown.error_type.value == "invalid_args"
    assert "no scheduled task with id 'nope'" in unknown.content
    never = st.ScheduleTaskTool(scheduler=scheduler).execute(
        prompt="x", schedule_type="cron", schedule_value="0 0 30 2 *")
    assert not never.success and "can never fire" in never.content

    for cls in (st.ScheduleTaskTool, st.ListScheduledTasksTool, st.PauseScheduledTaskTool,
                st.ResumeScheduledTaskTool, st.CancelScheduledTaskTool):
        result = cls().execute(task_id="x", prompt="x", schedule_type="once", schedule_value="x")
        assert not result.success and "scheduler is unavailable" in result.content
        assert "scheduler=" in result.content  # says how to wire one


def test_tools_are_registered_and_get_the_sdk_scheduler_injected(tmp_path):
    from jarvis.sdk import Jarvis
    from jarvis.tools.executor import ToolExecutor

    names = ["schedule_task", "list_scheduled_tasks", "pause_scheduled_task",
             "resume_scheduled_task", "cancel_scheduled_task"]
    assert all(ToolRegistry.contains(n) for n in names)
    with Jarvis() as j:
        built = j.build_tools(names)
        assert {t.spec.category for t in built} == {"scheduler"}
        assert all(t._scheduler is j.scheduler for t in built)
        executor = ToolExecutor(built)
        result = executor.execute(ToolCall(id="1", name="schedule_task", arguments=json.dumps(
            {"prompt": "hi", "schedule_type": "once", "schedule_value": "2099-01-01T00:00:00Z"})))
        assert result.success, result.content
        task_id = json.loads(result.content)["task_id"]
        assert [t.id for t in j.scheduler.list_tasks()] == [task_id]
        assert j.scheduler.store.path.parent == tmp_path / "jarvis-home"


def test_tools_module_stays_cheap_to_import():
    code = ("import sys, jarvis.tools, jarvis.scheduler.tools, jarvis.commands.schedule; "
            "print([m for m in ('croniter', 'sqlite_utils') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "croniter" not in out.stdout


def test_a_file_that_is_not_a_database_is_a_clear_error(env, tmp_path):
    bad = tmp_path / "not-a-db.db"
    bad.write_text("this is not an SQLite database, just some text " * 20)
    env = dict(env, JARVIS_SCHEDULER_DB=str(bad))
    for args in (("schedule", "list"), ("scheduler", "start", "--once")):
        result = jarvis(env, *args)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stderr.strip().startswith(f"Error: cannot use the scheduler database {bad}")


# --- issue 13: input that was accepted wrongly -------------------------------------------------
def test_an_interval_is_stored_exactly(env, tmp_path):
    # `%g` kept 6 significant digits: 1000001 s was stored (and run) as 1e+06 = 1000000 s.
    task = json.loads(ok(jarvis(env, "schedule", "add", "x", "--every", "1000001", "--json")))
    assert (task["schedule_value"], task["schedule"]) == ("1000001", "every 1000001 s")
    stored = query(tmp_path / "scheduler.db", "SELECT schedule_value, next_run - anchor FROM tasks")
    assert stored == [("1000001", 1000001.0)]
    fraction = json.loads(ok(jarvis(env, "schedule", "add", "x", "--every", "1234.5678", "--json")))
    assert fraction["schedule_value"] == "1234.5678"


def test_a_time_stored_out_of_range_before_the_fix_does_not_break_listing(env, tmp_path):
    from jarvis.scheduler.store import SchedulerStore

    ok(jarvis(env, "schedule", "add", "x", "--every", "60"))
    store = SchedulerStore(tmp_path / "scheduler.db")
    store.db.conn.execute("UPDATE tasks SET schedule_type = 'once', schedule_value = ?, "
                          "next_run = ?", ("9999-12-31T23:59:59-05:00", 253402318799.0))
    store.db.conn.commit()
    store.close()
    listed = json.loads(ok(jarvis(env, "schedule", "list", "--json")))
    assert listed[0]["next_run"] == "out of range (253402318799.0)"
    assert listed[0]["schedule"] == "once at 9999-12-31T23:59:59-05:00 (out of range)"
    assert "out of range" in ok(jarvis(env, "schedule", "list"))


@pytest.mark.parametrize("args, message", [
    # Year 10000 in UTC: accepted before, then every listing failed with "year 10000 is out of
    # range".
    (["--at", "9999-12-31T23:59:59-05:00"], "out of range"),
    (["--at", "0001-01-01T00:00:00+05:00"], "out of range"),
    # An approval without --tools applied to whatever tools the agent has by default.
    (["--every", "60", "--approve-tools", "shell"], "--approve-tools needs --tools"),
    # `$` matches before a trailing newline: 'simple\n' passed as a valid agent name.
    (["--every", "60", "--agent", "simple\n"], "agent 'simple\\n'"),
    (["--every", "60", "--tools", "calculator,think\n\n"], None),  # stripped: fine
])
def test_add_refuses_what_it_cannot_honour_and_listing_keeps_working(env, args, message):
    result = jarvis(env, "schedule", "add", "x", *args)
    if message is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 2, result.stdout
        assert message in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    listed = jarvis(env, "schedule", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == (message is None)


# --- issue 13: paging, prompts from files and stdin ------------------------------------------
def test_schedule_list_pages_with_limit_and_offset(env, tmp_path):
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(tmp_path / "scheduler.db")
    api = TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    ids = [api.add(f"task {i}", every=3600).id for i in range(230)]
    store.close()

    first = jarvis(env, "schedule", "list", "--json")  # a page of 100 by default
    assert [t["task_id"] for t in json.loads(ok(first))] == ids[:100]
    assert "showing tasks 1-100 of 230; next page: --offset 100" in first.stderr
    last = jarvis(env, "schedule", "list", "--limit", "100", "--offset", "200", "--json")
    assert [t["task_id"] for t in json.loads(ok(last))] == ids[200:]
    assert "showing" not in last.stderr  # the last page: nothing more to say
    everything = jarvis(env, "schedule", "list", "--limit", "0")
    assert len(ok(everything).splitlines()) == 231  # a header and 230 tasks
    past = jarvis(env, "schedule", "list", "--offset", "500")
    assert ok(past) == "" and "no tasks from --offset 500: there are 230" in past.stderr
    bad = jarvis(env, "schedule", "list", "--limit", "-1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_list_scheduled_tasks_tool_pages_and_bounds_its_work(scheduler):
    from jarvis.scheduler import tools as st

    ids = [scheduler.add(f"task {i}", every=3600).id for i in range(120)]
    tool = st.ListScheduledTasksTool(scheduler=scheduler)
    page = json.loads(tool.execute().content)
    assert [t["task_id"] for t in page] == ids[:100]
    page = json.loads(tool.execute(limit=30, offset=100).content)
    assert [t["task_id"] for t in page] == ids[100:]
    assert json.loads(tool.execute(status="paused", limit=5).content) == []
    for bad in ({"limit": 100_000}, {"limit": "all"}, {"limit": 0}, {"offset": -1},
                {"offset": True}, {"status": "sleeping"}):
        result = tool.execute(**bad)
        assert not result.success and result.error_type.value == "invalid_args", bad


def test_a_prompt_comes_from_a_file_or_stdin(env, tmp_path):
    text = "Summarize the news:\n- politics\n- science ✓\n"
    piped = subprocess.run([sys.executable, "-m", "jarvis.cli", "schedule", "add", "-", "--every",
                            "60", "--json"], input=text, env=env, capture_output=True, text=True,
                           timeout=30)
    assert json.loads(ok(piped))["prompt"] == text.strip()
    path = tmp_path / "prompt.txt"
    path.write_text(text * 2, encoding="utf-8")
    from_file = jarvis(env, "schedule", "add", "--prompt-file", str(path), "--every", "60", "--json")
    assert json.loads(ok(from_file))["prompt"] == (text * 2).strip()

    path.write_bytes(b"\xff\xfe not utf-8")
    (tmp_path / "long.txt").write_text("x" * 20_001)
    (tmp_path / "blank.txt").write_text("\n  \n")
    for args, message in (
            (["--prompt-file", str(path)], "is not UTF-8 text"),
            (["--prompt-file", str(tmp_path / "long.txt")], "longer than 20000 characters"),
            (["--prompt-file", str(tmp_path / "blank.txt")], "is empty"),
            (["--prompt-file", str(tmp_path / "missing.txt")], "No such file or directory"),
            (["inline", "--prompt-file", str(path)], "not both"),
            ([], "give the prompt")):
        result = jarvis(env, "schedule", "add", *args, "--every", "60")
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert len(json.loads(ok(jarvis(env, "schedule", "list", "--json")))) == 2


def test_a_prompt_with_escape_sequences_is_shown_escaped(env):
    # A model writes the prompts of the tasks it schedules; `schedule show` printed them as they
    # were, so a task could clear the screen or retitle the window of whoever looks at it.
    evil = "echo hi\x1b]0;pwned\x07\x9b2J\u202eevil"
    task_id = json.loads(ok(jarvis(env, "schedule", "add", evil, "--every", "3600",
                                   "--json")))["task_id"]
    shown = ok(jarvis(env, "schedule", "show", task_id))
    assert "prompt: echo hi\\x1b]0;pwned\\x07\\x9b2J\\u202eevil" in shown
    assert not any(c in shown for c in "\x1b\x07\x9b\u202e")
    assert json.loads(ok(jarvis(env, "schedule", "show", task_id, "--json")))["prompt"] == evil
    listed = ok(jarvis(env, "schedule", "list"))
    assert task_id in listed and not any(c in listed for c in "\x1b\x07\x9b\u202e")
