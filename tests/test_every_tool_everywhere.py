"""Every built-in tool through every entry point, with the starter config (`jarvis init`).

`jarvis tools run`, `jarvis ask --tools` (a scripted engine), the SDK, `jarvis serve` (ORS
calls and the OpenAI-compatible API with tools), a scheduled task run by `jarvis scheduler
start --once`, and `jarvis mcp serve` (tools/list and a call). Network tools reach loopback
servers whose host the test's config allows; web_search asks a loopback SearXNG-compatible
JSON API. Each tool must work, or fail with the reason named in FAILS_HERE: a tool never
vanishes from an entry point without a word (`jarvis serve` once dropped web_search because
the SDK handed the memory store to its `backend` setting).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_in_process
from logged_process import LoggedProcess
from mcp_support import FEATURES
from net_support import Reply, fixture, serving

from jarvis.testing import FakeOpenAIServer, reply, tool_call

BUILTINS = (
    "calculator", "think", "file_read", "retrieval", "memory_retrieve", "memory_search",
    "memory_store", "memory_index", "llm", "schedule_task", "list_scheduled_tasks",
    "pause_scheduled_task", "resume_scheduled_task", "cancel_scheduled_task", "repl",
    "code_interpreter", "mcp_adapter", "mcp_read_resource", "http_request", "web_fetch",
    "web_search", "channel_send", "channel_list", "channel_status",
)
CONFIRM = ("memory_index", "repl", "code_interpreter")  # approved by each entry point's own way
# `jarvis tools run` and `jarvis ask` run in process (click's CliRunner), but for these tools: a
# real `jarvis` process that starts a sandbox, or an MCP server, and must leave nothing behind
# when it exits (`serve`, `mcp serve` and the scheduler daemon are real processes throughout).
REAL = ("code_interpreter", "mcp_adapter")

PAGE = (b"<html><head><title>Build 1234</title></head><body><article><h1>Build 1234</h1><p>All "
        b"920 tests passed on the main branch in 41 seconds, and the release was tagged.</p>"
        b"</article></body></html>")


def test_the_list_covers_every_builtin() -> None:
    """A new built-in must join this test (and so every entry point)."""
    code = ("import jarvis, json; jarvis.load_builtin_catalog(); "
            "from jarvis.core.registry import ToolRegistry as R; "
            "print(json.dumps(sorted(R._entries)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert sorted(BUILTINS) == json.loads(out.stdout)


class World:
    """A workspace made by `jarvis init`, its loopback servers, and what each tool is asked."""

    def __init__(self, root: Path, home: Path, net: Any, engine: FakeOpenAIServer) -> None:
        self.ws = root / "ws"
        self.home = home
        self.net = net
        self.engine = engine
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("JARVIS_")}
        self.env.update(JARVIS_HOME=str(home), JARVIS_LOAD_PLUGINS="", JARVIS_ENGINE="vllm",
                        VLLM_HOST=engine.url, JARVIS_MODEL="test-model")
        self.ws.mkdir()
        self.jarvis("init")
        here = net.hostport
        with (self.ws / "config.toml").open("a", encoding="utf-8") as fh:
            fh.write(f"""
[tools.web_search]
backend = "searxng"
base_url = "{net.url('/')}"

[tools.http_request]
allowed_hosts = ["{here}"]

[tools.web_fetch]
allowed_hosts = ["{here}"]

[mcp.servers.feat]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(FEATURES))}]

[channels.hook]
url = "json://{here}/hook"
confirm = false
""")
        (self.ws / "notes").mkdir()
        (self.ws / "notes" / "walrus.md").write_text("The walrus sleeps on the ice floe.\n")
        self.jarvis("memory", "index", "notes")
        self.passes = 0
        self.prepare()

    def prepare(self) -> None:
        """Fresh targets for the tools that change state (a task to pause, resume and cancel,
        a folder not indexed yet): each pass of every tool starts from the same state."""
        self.passes += 1
        self.index_dir = self.ws / f"index-me-{self.passes}"
        self.index_dir.mkdir()
        (self.index_dir / "otter.md").write_text(f"The otter floats on its back ({self.passes}).\n")
        self.task_ids = self._tasks()

    def jarvis(self, *args: str, timeout: float = 60, real: bool = False
               ) -> subprocess.CompletedProcess:
        """`jarvis ARGS` in the workspace: in process (tests/cli_support.py), or with `real` a
        subprocess (the scheduler daemon; the tools in REAL on each CLI entry point)."""
        if not real:
            return run_in_process(args, env=self.env, cwd=self.ws)
        return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], cwd=self.ws,
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def _tasks(self) -> dict[str, str]:
        """Tasks for the pause/resume/cancel tools (a model may resume only a task whose tools
        its own run has: this one names resume_scheduled_task)."""
        ids = {}
        for tool, paused in (("pause_scheduled_task", False), ("resume_scheduled_task", True),
                             ("cancel_scheduled_task", False)):
            out = self.jarvis("schedule", "add", f"target of {tool}", "--cron", "0 8 * * *",
                              "--tools", "resume_scheduled_task", "--json")
            assert out.returncode == 0, out.stderr
            ids[tool] = json.loads(out.stdout)["task_id"]
            if paused:
                assert self.jarvis("schedule", "pause", ids[tool]).returncode == 0
        return ids

    def cases(self) -> dict[str, tuple[dict[str, Any], str]]:
        """tool -> (arguments, text its result holds)."""
        ids = self.task_ids
        return {
            "calculator": ({"expression": "6*7"}, "42"),
            "think": ({"thought": "first the ice"}, "first the ice"),
            "file_read": ({"path": str(self.ws / "notes" / "walrus.md")}, "ice floe"),
            "retrieval": ({"query": "walrus"}, "ice floe"),
            "memory_retrieve": ({"query": "walrus"}, "ice floe"),
            "memory_search": ({"query": "walrus"}, "walrus.md"),
            "memory_store": ({"content": "The puffin nests on cliffs.", "source": "birds"},
                             "Stored 27 characters from 'birds'"),
            "memory_index": ({"path": str(self.index_dir)}, "Indexed 1 file"),
            "llm": ({"prompt": "Say the sub-answer."}, "sub-answer to Say the sub-answer."),
            "schedule_task": ({"prompt": "Water the plants", "schedule_type": "cron",
                               "schedule_value": "0 9 * * *"}, '"status": "active"'),
            "list_scheduled_tasks": ({}, "target of pause_scheduled_task"),
            "pause_scheduled_task": ({"task_id": ids["pause_scheduled_task"]}, '"paused"'),
            "resume_scheduled_task": ({"task_id": ids["resume_scheduled_task"]}, '"active"'),
            "cancel_scheduled_task": ({"task_id": ids["cancel_scheduled_task"]}, '"cancelled"'),
            "repl": ({"code": "x = 6\nx * 7"}, "42"),
            "code_interpreter": ({"code": "print(6 * 7)"}, "42"),
            # The bridge lists a server's tools; it calls only tools a trusted server marks
            # read-only (docs/trust.md): `slow` of this untrusted server is called as
            # feat__slow, with a confirmation.
            "mcp_adapter": ({"server": "feat"}, "slow: Report progress"),
            "mcp_read_resource": ({"server": "feat", "uri": "notes://readme"}, "Read me first."),
            "http_request": ({"url": self.net.url("/status")}, '"build": "green"'),
            "web_fetch": ({"url": self.net.url("/builds/1234")}, "All 920 tests passed"),
            "web_search": ({"query": "sqlite wal mode"}, "Write-Ahead Logging - SQLite"),
            "channel_send": ({"channel": "hook", "message": "the build is green"}, "hook"),
            "channel_list": ({}, '"channel": "hook"'),
            "channel_status": ({"channel": "hook"}, '"channel": "hook"'),
        }

    def brain(self, request: dict[str, Any]) -> Any:
        """The scripted model: 'run the NAME tool' calls NAME with its case's arguments; after
        a tool result it answers; without tools (the llm tool's own request) it answers."""
        last = request["messages"][-1]
        if not request.get("tools"):
            return f"sub-answer to {last['content']}"
        if last["role"] == "tool":
            return "done"
        found = re.search(r"run the (\w+) tool", str(last.get("content")))
        assert found, last
        name = found.group(1)
        return reply(tool_calls=[tool_call(name, self.cases()[name][0])])


@pytest.fixture
def world(tmp_path: Path, jarvis_home: Path):
    hooks: list[bytes] = []

    def hook(seen):
        hooks.append(seen.body)
        return Reply(200, "ok")

    routes = {
        "/status": lambda s: Reply(200, json.dumps({"build": "green"}),
                                   content_type="application/json"),
        "/builds/1234": lambda s: Reply(200, PAGE, content_type="text/html"),
        "/search": lambda s: Reply(200, fixture("search/searxng.json"),
                                   content_type="application/json"),
        "/hook": hook,
    }
    holder: dict[str, World] = {}
    with serving(routes) as net, FakeOpenAIServer(default=lambda r: holder["w"].brain(r)) as fake:
        made = World(tmp_path, jarvis_home, net, fake)
        made.hooks = hooks
        holder["w"] = made
        yield made


# A serve session or chat run is offered every configured tool, the untrusted feat server's
# too: its descriptions are that server's words in the prompt, so the run is tainted from the
# start and may not create or resume a scheduled task on its own (docs/trust.md).
OFFERED_FEAT = {"schedule_task": "the description of tool feat__",
                "resume_scheduled_task": "the description of tool feat__"}


def check(results: dict[str, tuple[bool, str]], world: World, where: str,
          refused: dict[str, str] | None = None) -> None:
    """Every built-in answered with its expected text (success), nothing missing; those in
    `refused` failed saying the text given there instead."""
    cases = world.cases()
    refused = refused or {}
    assert sorted(results) == sorted(BUILTINS), f"{where}: missing {set(BUILTINS) - set(results)}"
    wrong = {name: got for name, got in results.items()
             if not ((not got[0] and refused[name] in got[1]) if name in refused
                     else (got[0] and cases[name][1] in got[1]))}
    assert not wrong, f"{where}: {json.dumps(wrong, indent=1)[:6000]}"


def test_jarvis_tools_run(world: World) -> None:
    results = {}
    for name, (arguments, _) in world.cases().items():
        out = world.jarvis("tools", "run", name, json.dumps(arguments), "--yes", "--json",
                           real=name in REAL)
        assert out.returncode in (0, 1), (name, out.stderr)
        data = json.loads(out.stdout)
        results[name] = (data["success"], data["content"])
    check(results, world, "jarvis tools run")
    assert any(b"the build is green" in body for body in world.hooks)


def test_jarvis_ask_with_tools(world: World) -> None:
    results = {}
    for name in world.cases():
        out = world.jarvis("ask", "--tools", name, "--yes", "--json", f"Please run the {name} tool.",
                           real=name in REAL)
        assert out.returncode == 0, (name, out.stderr)
        (tr,) = json.loads(out.stdout)["tool_results"]
        results[name] = (tr["success"], tr["content"])
    check(results, world, "jarvis ask --tools")


def test_the_sdk(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from jarvis import Jarvis

    for key in ("JARVIS_ENGINE", "VLLM_HOST", "JARVIS_MODEL"):
        monkeypatch.setenv(key, world.env[key])
    monkeypatch.chdir(world.ws)
    results = {}
    with Jarvis() as j:
        for name in world.cases():
            out = j.ask_full(f"Please run the {name} tool.", tools=[name],
                             approved_tools=list(CONFIRM))
            (tr,) = out["tool_results"]
            results[name] = (tr["success"], tr["content"])
    check(results, world, "the SDK")


def _sse_json(text: str) -> dict[str, Any]:
    """The JSON payload of an ORS call's `chunk` and `end` events."""
    data, event = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: ") and event in ("chunk", "end"):
            data.append(line[len("data: "):])
    return json.loads("".join(data))


def test_jarvis_serve_ors_and_openai_api(world: World) -> None:
    import httpx

    served = LoggedProcess(subprocess.Popen(
        [sys.executable, "-m", "jarvis.cli", "serve", "--port", "0", "--yes"], cwd=world.ws,
        env=world.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
        "jarvis serve")
    try:
        line = served.wait_for_line("listening on", timeout=60)
        url = re.search(r"(http://\S+)", line).group(1)
        served.wait_for_line("OpenAI-compatible API")
        assert not [x for x in served.lines if "not serving" in x], served.text()
        token = (world.home / "serve.token").read_text().strip()  # the owner's (keyless serve)
        with httpx.Client(base_url=url, timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            ors = {}
            for name, (arguments, _) in world.cases().items():
                # A session per tool: a session is one run, and the egress guard stops a run
                # that read untrusted content and private data from sending (docs/trust.md).
                sid = client.post("/create_session").text.split("data: ")[1].split("\n")[0]
                assert client.post("/create", json={"task_spec": {}},
                                   headers={"X-Session-ID": sid}).status_code == 200
                answer = client.post("/jarvis/call", json={"name": name, "input": arguments},
                                     headers={"X-Session-ID": sid})
                assert answer.status_code == 200, (name, answer.text)
                output = _sse_json(answer.text)["output"]
                text = "\n".join(b.get("text", "") for b in output["blocks"])
                failed = (output.get("metadata") or {}).get("error_type")
                ors[name] = (not failed, text)
            check(ors, world, "jarvis serve (ORS)", refused=OFFERED_FEAT)
            world.prepare()
            chat = {}
            for name in world.cases():
                answer = client.post("/v1/chat/completions", json={
                    "model": "orchestrator",
                    "messages": [{"role": "user", "content": f"Please run the {name} tool."}]})
                assert answer.status_code == 200, (name, answer.text)
                (tr,) = answer.json()["jarvis"]["tool_results"]
                chat[name] = (tr["success"], tr["content"])
            check(chat, world, "jarvis serve (OpenAI-compatible API)", refused=OFFERED_FEAT)
    finally:
        served.proc.terminate()
        served.proc.wait(20)
        served.close_streams()


def test_a_scheduled_task_per_tool_run_by_scheduler_start_once(world: World) -> None:
    from jarvis.core.config import load_config
    from jarvis.runlog import RunLog, run_log_path
    from jarvis.scheduler.ledger import open_store
    from jarvis.scheduler.scheduler import TaskScheduler

    config = load_config(world.ws / "config.toml")
    store = open_store(config)
    scheduler = TaskScheduler(store=store, config=config)
    due = time.time()  # due at once (a time a few seconds past is allowed)
    tasks = {}
    for name in world.cases():
        task = scheduler.add(f"Please run the {name} tool.", at=datetime.fromtimestamp(due, UTC).isoformat(),
                             tools=[name], approved_tools=[name] if name in CONFIRM else None)
        tasks[task.id] = name
    out = world.jarvis("scheduler", "start", "--once", timeout=300, real=True)
    assert out.returncode == 0, out.stdout + out.stderr
    log = RunLog(run_log_path(config))
    results = {}
    try:
        for task_id, name in tasks.items():
            (run,) = store.list_runs(task_id)
            assert run.status == "succeeded", (name, run.error)
            (call,) = log.get(run.run_log_id)["tool_calls"]
            results[name] = (call["success"], call["content"])
    finally:
        store.close()
        log.close()
    check(results, world, "scheduler start --once")


def test_jarvis_mcp_serve(world: World) -> None:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, env=world.env, cwd=str(world.ws),
                                   args=["-m", "jarvis.cli", "mcp", "serve", "--tools",
                                         ",".join(BUILTINS)])

    async def go() -> tuple[list[str], dict[str, tuple[bool, str]]]:
        listed: list[str] = []
        results = {}
        for name, (arguments, _) in world.cases().items():
            # A connection per tool: a connection is one run, and the egress guard stops a
            # run that read untrusted content and private data from sending (docs/trust.md).
            async with Client(params) as client:
                listed = listed or [t.name for t in (await client.list_tools()).tools]
                answer = await client.call_tool(name, arguments)
                text = "\n".join(getattr(c, "text", "") for c in answer.content)
                results[name] = (not answer.is_error, text)
        return listed, results

    listed, results = asyncio.run(go())
    assert sorted(listed) == sorted(BUILTINS)
    check(results, world, "jarvis mcp serve")
