"""What a model may grant: scheduled tasks get at most the tools and approvals of the run
that scheduled them, model quotas, the cap on tool calls per reply, and the cap on threads
of timed-out tools. Every case goes through a real entry point (the SDK with the loopback
engine, the executor, the CLI, `jarvis serve`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from waiting import wait_for

from jarvis.core.config import SchedulerConfig, load_config
from jarvis.core.types import ToolCall
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore
from jarvis.scheduler.tools import ScheduleTaskTool
from jarvis.sdk import Jarvis
from jarvis.testing import FakeOpenAIServer, reply, tool_call
from jarvis.tools.base import tool
from jarvis.tools.executor import ToolExecutor, abandoned_threads

FAR = "2099-01-01T00:00:00Z"


def jarvis_on(fake: FakeOpenAIServer, **overrides) -> Jarvis:
    config = load_config(overrides={"engine.max_retries": 0, "memory.enabled": False,
                                    **overrides})
    return Jarvis(config=config, engine="vllm", host=fake.url, model="test-model")


def schedule(**args) -> ToolCall:
    base = {"prompt": "check the news", "schedule_type": "once", "schedule_value": FAR}
    return tool_call("schedule_task", {**base, **args})


# --- what a model may grant ---------------------------------------------------------------------

def test_a_run_cannot_give_a_task_more_tools_than_it_has():
    script = [reply(tool_calls=[schedule(tools="file_read"), schedule(tools="calculator"),
                                schedule()]),
              "Scheduled."]
    with FakeOpenAIServer(script) as fake, jarvis_on(fake) as j:
        result = j.ask_full("schedule things", tools=["schedule_task", "calculator"])
        refused, narrowed, defaulted = result["tool_results"]
        assert not refused["success"] and refused["error_type"] == "denied"
        assert "not granted: file_read" in refused["content"]
        # What it may use: the run's tools, never schedule_task (docs/trust.md).
        assert "of this run: calculator." in refused["content"]
        assert narrowed["success"] and defaulted["success"], (narrowed, defaulted)
        tasks = {t.id: t for t in j.scheduler.list_tasks()}
        assert len(tasks) == 2  # the refused one was never stored
        narrow = tasks[json.loads(narrowed["content"])["task_id"]]
        default = tasks[json.loads(defaulted["content"])["task_id"]]
        assert narrow.tools == ["calculator"]
        # Naming no tools gives the run's tools, never the configured defaults, and never
        # schedule_task: a task a model creates cannot spawn more tasks unattended.
        assert default.tools == ["calculator"]
        assert {t.created_by for t in tasks.values()} == {"model"}
        assert narrow.to_dict()["created_by"] == "model"
        assert narrow.metadata["created_in_run"] == result["run_id"]

        # The daemon's run of the task offers the engine only the granted tool.
        fake.add("It is quiet.")
        run = j.scheduler.run_now(narrow.id)
        assert run.status == "succeeded", run.error
        offered = {t["function"]["name"] for t in fake.requests[-1]["tools"]}
        assert offered == {"calculator"}


def test_a_model_approves_only_what_its_run_approved_by_name(tmp_path):
    @tool(name="danger_grant", requires_confirmation=True, register=False)
    def danger(path: str) -> str:
        """Write a file (needs confirmation).

        Args:
            path: where
        """
        return path

    scheduler = TaskScheduler(store=SchedulerStore(tmp_path / "s.db"))
    executor = ToolExecutor([ScheduleTaskTool(scheduler=scheduler), danger],
                            approved_tools=["danger_grant"], run_id="run-1")
    ok = executor.execute(schedule(tools="danger_grant", approved_tools="danger_grant"))
    assert ok.success, ok.content
    task = scheduler.get_task(json.loads(ok.content)["task_id"])
    assert task.approved_tools == ["danger_grant"] and task.created_by == "model"

    # A run whose approvals were per call (an approver, e.g. --yes) cannot pass them on.
    per_call = ToolExecutor([ScheduleTaskTool(scheduler=scheduler), danger],
                            approver=lambda spec, args: True)
    refused = per_call.execute(schedule(tools="danger_grant", approved_tools="danger_grant"))
    assert not refused.success and refused.error_type.value == "denied"
    assert "approval not granted for: danger_grant" in refused.content
    assert len(scheduler.list_tasks()) == 1
    scheduler.store.close()


def test_a_person_is_not_limited_and_is_recorded_as_the_creator(cli_env):
    cli = [sys.executable, "-m", "jarvis.cli"]
    args = json.dumps({"prompt": "read it", "schedule_type": "once", "schedule_value": FAR,
                       "tools": "file_read"})
    run = subprocess.run([*cli, "tools", "run", "schedule_task", args], env=cli_env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    added = subprocess.run([*cli, "schedule", "add", "--every", "5", "--tools", "file_read",
                            "--json", "poll"], env=cli_env, capture_output=True, text=True,
                           timeout=60)
    assert added.returncode == 0, added.stderr
    listed = subprocess.run([*cli, "schedule", "list", "--json"], env=cli_env,
                            capture_output=True, text=True, timeout=60)
    tasks = json.loads(listed.stdout)
    assert [(t["tools"], t["created_by"]) for t in tasks] == [(["file_read"], "person")] * 2


# --- quotas on what a model schedules -------------------------------------------------------------

def quota_executor(tmp_path, **limits):
    settings = SchedulerConfig(**limits)
    scheduler = TaskScheduler(store=SchedulerStore(tmp_path / "q.db"), config=settings)
    return scheduler, ToolExecutor([ScheduleTaskTool(scheduler=scheduler)], max_concurrency=8)


def test_model_task_quota_holds_under_concurrent_calls(tmp_path):
    scheduler, executor = quota_executor(tmp_path, model_max_active_tasks=3)
    results = executor.execute_many([schedule() for _ in range(12)])
    assert sum(r.success for r in results) == 3
    refused = [r for r in results if not r.success]
    assert all(r.error_type.value == "denied" for r in refused)
    assert "model_max_active_tasks = 3" in refused[0].content
    assert len(scheduler.list_tasks()) == 3
    # A person's tasks do not count, and are not limited.
    for _ in range(4):
        scheduler.create_task("by hand", "once", FAR)
    assert len(scheduler.list_tasks()) == 7
    # Cancelling frees room for the model again.
    scheduler.cancel_task(scheduler.list_tasks()[0].id)
    assert executor.execute(schedule()).success
    scheduler.store.close()


def test_model_interval_and_prompt_limits(tmp_path):
    scheduler, executor = quota_executor(tmp_path, model_min_interval_seconds=120,
                                         model_max_prompt_chars=50)
    cases = {
        "every second": schedule(schedule_type="interval", schedule_value="1"),
        "every minute (cron)": schedule(schedule_type="cron", schedule_value="* * * * *"),
        "two minutes apart at the hour's end": schedule(schedule_type="cron",
                                                        schedule_value="0,59 * * * *"),
        "long prompt": schedule(prompt="x" * 51),
    }
    for what, call in cases.items():
        result = executor.execute(call)
        assert not result.success and result.error_type.value == "denied", what
        assert result.content.startswith("refused:"), what
    assert "model_min_interval_seconds" in executor.execute(cases["every second"]).content
    assert "model_max_prompt_chars" in executor.execute(cases["long prompt"]).content
    for ok in (schedule(schedule_type="interval", schedule_value="120"),
               schedule(schedule_type="cron", schedule_value="*/5 * * * *")):
        assert executor.execute(ok).success
    # A person may still poll every second with a long prompt.
    scheduler.create_task("y" * 500, "interval", "1")
    assert len(scheduler.list_tasks()) == 3
    scheduler.store.close()


def test_a_zone_name_that_is_a_folder_is_a_clear_failed_result(tmp_path):
    # "America" is a folder under zoneinfo: it raised IsADirectoryError (with the install path)
    # out of the tool instead of an invalid-argument result.
    scheduler, executor = quota_executor(tmp_path)
    for zone in ("America", "x" * 64, "../../etc/passwd"):
        result = executor.execute(schedule(schedule_type="cron", schedule_value="0 9 * * *",
                                           timezone=zone))
        assert not result.success and result.error_type.value == "invalid_args", result.content
        assert result.content.startswith("unknown time zone"), result.content
        assert "site-packages" not in result.content
    assert scheduler.list_tasks() == []
    scheduler.store.close()


# --- tool calls per reply --------------------------------------------------------------------------

def test_calls_beyond_the_limit_get_failed_results_the_model_reads():
    calls = [tool_call("calculator", {"expression": f"{i}+1"}) for i in range(20_000)]
    with FakeOpenAIServer([reply(tool_calls=calls), "done"]) as fake, jarvis_on(fake) as j:
        started = time.monotonic()
        result = j.ask_full("add", tools=["calculator"], context=False)
        took = time.monotonic() - started
        assert result["content"] == "done"
        ran = [r for r in result["tool_results"] if r["success"]]
        assert len(ran) == 32  # the default limit
        # The excess is one refusal the model reads, not 19 968 results and answers: the
        # transcript keeps the calls that ran plus the first refused one (each call id in it
        # answered), so the work and the next request stay bounded by the limit.
        (refused,) = [r for r in result["tool_results"] if not r["success"]]
        assert refused["error_type"] == "denied"
        assert refused["content"].startswith("refused: more than 32 tool calls in one reply")
        assert "this call and 19967 more did not run" in refused["content"]
        (assistant,) = [m for m in fake.requests[1]["messages"] if m["role"] == "assistant"]
        answers = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
        assert len(assistant["tool_calls"]) == len(answers) == 33
        assert {m["tool_call_id"] for m in answers} == {c["id"] for c in assistant["tool_calls"]}
        assert answers[32]["content"].startswith("ERROR (denied): refused: more than 32")
        assert result["metadata"]["refused_tool_calls"] == 20_000 - 32
    assert took < 60


def test_the_limit_comes_from_config_and_applies_to_react():
    three = [tool_call("calculator", {"expression": f"{i}*2"}) for i in range(3)]
    with FakeOpenAIServer([reply(tool_calls=three), "ok"]) as fake, \
            jarvis_on(fake, **{"agent.max_tool_calls_per_turn": 2}) as j:
        result = j.ask_full("double", tools=["calculator"], context=False)
    assert [r["success"] for r in result["tool_results"]] == [True, True, False]
    assert "more than 2 tool calls" in result["tool_results"][2]["content"]
    assert "this call and 0 more did not run" in result["tool_results"][2]["content"]
    # react runs one call per reply and says the rest did not run.
    with FakeOpenAIServer([reply(tool_calls=three), "Final Answer: ok"]) as fake, \
            jarvis_on(fake) as j:
        result = j.ask_full("double", agent="react", tools=["calculator"], context=False)
    assert result["content"] == "ok" and len(result["tool_results"]) == 1
    observation = fake.requests[1]["messages"][-1]["content"]
    assert "refused: 2 more tool call(s) in that reply did not run" in observation


def test_jarvis_serve_agents_apply_the_limit():
    import httpx

    from jarvis.server import ServerThread, ServeSettings, build_app
    from jarvis.tools.catalog import build_tools

    five = [tool_call("calculator", {"expression": f"{i}+0"}) for i in range(5)]
    with FakeOpenAIServer([reply(tool_calls=five), "fine"]) as fake:
        j = jarvis_on(fake, **{"agent.max_tool_calls_per_turn": 2, "runs.enabled": False})
        app = build_app(ServeSettings(), tools=build_tools(["calculator"]), jarvis=j)
        try:
            with ServerThread(app) as server:
                answer = httpx.post(server.url + "/v1/chat/completions", timeout=30,
                                    headers=server.headers, json={
                    "model": "orchestrator", "messages": [{"role": "user", "content": "sum"}]})
        finally:
            j.close()
    assert answer.status_code == 200, answer.text
    results = answer.json()["jarvis"]["tool_results"]
    assert [r["success"] for r in results] == [True, True, False]
    assert "more than 2 tool calls" in results[2]["content"]
    assert "this call and 2 more did not run" in results[2]["content"]


# --- threads of timed-out tools --------------------------------------------------------------------

def test_abandoned_threads_are_capped_per_tool_and_overall_and_released():
    release = threading.Event()

    @tool(name="hang_a", timeout=0.3, register=False)
    def hang_a() -> str:
        """Hang until released."""
        release.wait(30)
        return "a"

    @tool(name="hang_b", timeout=0.3, register=False)
    def hang_b() -> str:
        """Hang until released."""
        release.wait(30)
        return "b"

    executor = ToolExecutor([hang_a, hang_b], max_abandoned_per_tool=2, max_abandoned=3)
    # The overall count is per process: a call that another test of this worker abandoned may
    # still be running, and would take part of the 3 (settle it before counting).
    wait_for(lambda: not abandoned_threads(), timeout=60, what="other tests' abandoned calls")
    try:
        for _ in range(2):
            timed_out = executor.execute(ToolCall(id="", name="hang_a", arguments="{}"))
            assert timed_out.error_type.value == "timeout"
            assert "timed out after 0.3 s" in timed_out.content
        assert abandoned_threads().get("hang_a") == 2
        threads = threading.active_count()
        capped = executor.execute(ToolCall(id="", name="hang_a", arguments="{}"))
        # Failed at once: no new thread, nothing more abandoned, a result that says why.
        assert threading.active_count() <= threads
        assert abandoned_threads().get("hang_a") == 2
        assert capped.content.startswith("tool hang_a was not started")
        assert capped.error_type.value == "timeout" and not capped.success
        assert "max_abandoned_per_tool" in capped.content and "limit is 2" in capped.content
        assert executor.execute(ToolCall(id="", name="hang_b", arguments="{}")).error_type.value \
            == "timeout"
        overall = executor.execute(ToolCall(id="", name="hang_b", arguments="{}"))
        assert "max_abandoned_threads" in overall.content and "limit is 3" in overall.content
        assert overall.metadata["cap"] == "max_abandoned_threads"
    finally:
        release.set()
    # The threads end and leave the count; the tools run again.
    wait_for(lambda: not {"hang_a", "hang_b"} & set(abandoned_threads()), what="threads to end")
    again = executor.execute(ToolCall(id="", name="hang_a", arguments="{}"))
    assert again.success and again.content == "a"


@pytest.mark.parametrize("use_async", [False, True])
def test_async_execution_counts_abandoned_threads_too(use_async):
    import asyncio

    release = threading.Event()

    @tool(name=f"stall_{int(use_async)}", timeout=0.05, register=False)
    def stall() -> str:
        """Stall until released."""
        release.wait(30)
        return "x"

    executor = ToolExecutor([stall], max_abandoned_per_tool=1)
    call = ToolCall(id="", name=stall.spec.name, arguments="{}")
    try:
        first = asyncio.run(executor.aexecute(call)) if use_async else executor.execute(call)
        assert first.error_type.value == "timeout"
        second = asyncio.run(executor.aexecute(call))
        assert "max_abandoned_per_tool" in second.content
    finally:
        release.set()
    wait_for(lambda: stall.spec.name not in abandoned_threads(), what="the thread to end")


def test_jarvis_serve_ors_sessions_apply_the_abandoned_thread_cap_from_config():
    from pathlib import Path

    from ors.client import ORS, Task
    from serve_support import running

    Path("config.toml").write_text("[tools]\nmax_abandoned_per_tool = 1\n")  # cwd: a temp dir
    release = threading.Event()

    @tool(name="hang_ors", timeout=0.05, register=False)
    def hang_ors() -> str:
        """Hang until released."""
        release.wait(30)
        return "done"

    try:
        with running(extra_tools=[hang_ors]) as server, \
                ORS(base_url=server.url, api_key=server.token) as client:
            env = client.environment("jarvis")
            with env.session(task=Task(environment_name="jarvis", task_spec={})) as session:
                first = session.call_tool("hang_ors", {})
                assert first.metadata["error_type"] == "timeout"
                second = session.call_tool("hang_ors", {})
                assert second.metadata["error_type"] == "timeout"
                assert "max_abandoned_per_tool" in second.blocks[0].text
                assert "limit is 1" in second.blocks[0].text
    finally:
        release.set()
    wait_for(lambda: "hang_ors" not in abandoned_threads(), what="the thread to end")


# --- attacks on the grant (w12s) ------------------------------------------------------------------

def _iso_in(seconds: float) -> str:
    from jarvis.scheduler.schedules import iso

    return iso(time.time() + seconds)


def test_a_chain_of_one_off_tasks_cannot_beat_the_minimum_interval():
    # Each run schedules the next one-off "now" with its own tools (schedule_task among them):
    # without a bound on one-off times that is a task running as fast as the engine answers.
    soon = schedule(schedule_type="once", schedule_value=_iso_in(2))
    with FakeOpenAIServer([reply(tool_calls=[soon]), "Scheduled."]) as fake, \
            jarvis_on(fake) as j:
        result = j.ask_full("keep going", tools=["schedule_task"])
        (refused,) = result["tool_results"]
        assert not refused["success"] and refused["error_type"] == "denied", refused
        assert refused["content"].startswith("refused:")
        assert "model_min_interval_seconds" in refused["content"]
        assert j.scheduler.list_tasks() == []
        # A one-off at least the minimum interval away is fine.
        fake.add(reply(tool_calls=[schedule(schedule_type="once",
                                            schedule_value=_iso_in(120))]), "ok")
        later = j.ask_full("later", tools=["schedule_task"])
        assert later["tool_results"][0]["success"], later["tool_results"][0]
        # A person may still schedule a one-off in two seconds.
        j.scheduler.create_task("soon", "once", _iso_in(2))
        assert len(j.scheduler.list_tasks()) == 2


def test_a_model_cannot_resume_a_task_with_more_than_its_run_has():
    with FakeOpenAIServer() as fake, jarvis_on(fake) as j:
        scheduler = j.scheduler
        reader = scheduler.create_task("read my notes", "interval", "3600", tools=["file_read"])
        default = scheduler.create_task("whatever the defaults are", "interval", "3600")
        mine = scheduler.create_task("add", "interval", "3600", tools=["calculator"])
        for task in (reader, default, mine):
            scheduler.pause_task(task.id)
        resume = [tool_call("resume_scheduled_task", {"task_id": t.id})
                  for t in (reader, default, mine)]
        fake.add(reply(tool_calls=resume), "done")
        result = j.ask_full("resume everything",
                            tools=["resume_scheduled_task", "calculator"])
        by_file, by_default, ok = result["tool_results"]
        assert not by_file["success"] and by_file["error_type"] == "denied", by_file
        assert "file_read" in by_file["content"] and by_file["content"].startswith("refused:")
        assert not by_default["success"] and by_default["error_type"] == "denied", by_default
        assert ok["success"], ok
        status = {t.id: t.status for t in scheduler.list_tasks()}
        assert status == {reader.id: "paused", default.id: "paused", mine.id: "active"}
        # A person resumes anything.
        scheduler.resume_task(reader.id)
        assert scheduler.get_task(reader.id).status == "active"


def test_a_model_cannot_give_a_task_schedule_task():
    # A task that holds schedule_task can spawn tasks unattended: a model never gives it one
    # (the old behaviour let a page make an hourly task that made more; docs/trust.md).
    with FakeOpenAIServer([reply(tool_calls=[schedule(tools="schedule_task,calculator")]),
                           "ok"]) as fake, jarvis_on(fake) as j:
        result = j.ask_full("plan", tools=["schedule_task", "calculator"])
        (refused,) = result["tool_results"]
        assert not refused["success"] and refused["error_type"] == "denied", refused
        assert "cannot have schedule_task" in refused["content"]
        assert j.scheduler.list_tasks() == []


def test_a_scheduled_run_grants_no_more_than_its_task_was_given():
    # The task's own run is a model's run too: what it schedules is bounded by the task's
    # tools, and counts against the same model quota. A person gave this task schedule_task.
    later = _iso_in(3600)
    with FakeOpenAIServer() as fake, \
            jarvis_on(fake, **{"scheduler.model_max_active_tasks": 2}) as j:
        task_id = j.scheduler.create_task("plan", "once", later,
                                          tools=["schedule_task", "calculator"]).id
        fake.add(reply(tool_calls=[schedule(schedule_value=later, tools="think"),
                                   schedule(schedule_value=later, prompt="one"),
                                   schedule(schedule_value=later, prompt="two"),
                                   schedule(schedule_value=later, prompt="three")]), "done")
        run = j.scheduler.run_now(task_id)
        assert run.status == "succeeded", run.error
        tasks = j.scheduler.list_tasks()
        assert len(tasks) == 3  # the quota of 2 model tasks: one refused
        nested = [t for t in tasks if t.id != task_id]
        # Naming none: the run's tools without schedule_task (it cannot spawn more).
        assert [sorted(t.tools) for t in nested] == [["calculator"], ["calculator"]]
        assert all(t.created_by == "model" for t in nested)
        answers = [m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
        assert "not granted: think" in answers[0]
        # The three grantable calls run side by side: any may be the one over the quota.
        refused = [a for a in answers[1:] if "model_max_active_tasks = 2" in a]
        assert len(refused) == 1, answers
