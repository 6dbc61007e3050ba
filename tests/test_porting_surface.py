"""The surface people port from OpenJarvis (issue 26, item 1), each run the way OpenJarvis's
docs use it, with only `openjarvis` renamed to `jarvis`."""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from typing import Any

import pytest

from jarvis.testing import FakeOpenAIServer, ScriptedEngine, reply, tool_call


def run_snippet(source: str, namespace: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Exec a documentation snippet (openjarvis -> jarvis); return what it printed."""
    namespace = {"__name__": "snippet"} if namespace is None else namespace
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source.replace("openjarvis", "jarvis"), "<snippet>", "exec"), namespace)
    return out.getvalue(), namespace


@pytest.fixture
def engine_env(monkeypatch, tmp_path):
    """`Jarvis()` as the docs write it reaches a scripted loopback server; cwd is a temp
    folder (the snippets index ./docs/)."""
    monkeypatch.chdir(tmp_path)
    with FakeOpenAIServer(models=["test-model"]) as server:
        monkeypatch.setenv("JARVIS_ENGINE", "vllm")
        monkeypatch.setenv("VLLM_HOST", server.url)
        monkeypatch.setenv("JARVIS_MODEL", "test-model")
        yield server


# --- j.memory.index / search / stats ---------------------------------------------------------
SDK_MEMORY = '''
from openjarvis import Jarvis

j = Jarvis(model="qwen3:8b")
result = j.memory.index("./docs/")
print(f"Indexed {result['chunks']} chunks from {result['path']}")
result = j.memory.index("./notes/", chunk_size=256, chunk_overlap=32)
results = j.memory.search("neural networks")
for r in results:
    print(f"[{r['score']:.4f}] {r['source']}: {r['content'][:80]}...")
results = j.memory.search("configuration options", top_k=5)
info = j.memory.stats()
print(f"Backend: {info['backend']}, Documents: {info.get('count', 'N/A')}")
j.memory.close()
j.close()
'''


def test_memory_index_search_and_stats_as_the_sdk_docs_use_them(engine_env, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "nets.md").write_text("Neural networks learn weights from data.\n")
    (tmp_path / "docs" / "config.md").write_text("Configuration options live in config.toml.\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("Buy milk and eggs.\n")
    printed, ns = run_snippet(SDK_MEMORY)
    lines = printed.splitlines()
    assert lines[0] == f"Indexed 2 chunks from {(tmp_path / 'docs').resolve()}"
    assert len(lines) == 3 and lines[1].endswith("nets.md: Neural networks learn weights from data....")
    assert lines[2] == "Backend: sqlite, Documents: 3"
    assert len(ns["result"]["doc_ids"]) == 1 and ns["result"]["chunks"] == 1
    assert [r["source"] for r in ns["results"]] == [str((tmp_path / "docs" / "config.md").resolve())]
    # The store is the run's memory: nothing of it was opened outside JARVIS_HOME.
    assert not (tmp_path / "memory.db").exists()


def test_memory_index_again_reports_unchanged_files_and_the_store_reopens(engine_env, tmp_path):
    from jarvis import Jarvis

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("alpha beta gamma\n")
    with Jarvis() as j:
        first = j.memory.index("./docs/")
        again = j.memory.index("./docs/")
        assert (first["chunks"], first["indexed"]) == (1, 1)
        assert (again["chunks"], again["unchanged"]) == (0, 1)
        assert again["doc_ids"] == first["doc_ids"]
        j.memory.close()
        # OpenJarvis's handle reopens after close(); so does j.memory.
        assert j.memory.search("gamma")[0]["content"] == "alpha beta gamma"
        with pytest.raises(Exception, match="chunk"):
            j.memory.index("./docs/", chunk_size=10, chunk_overlap=20)


def test_existing_memory_users_still_get_the_raw_store(engine_env):
    from jarvis import Jarvis
    from jarvis.memory import SQLiteMemory

    with Jarvis() as j:
        assert isinstance(j.memory, SQLiteMemory)
        j.memory.store("Zebras migrate.", source="zebra.md")
        assert j.memory.retrieve("zebras")[0].source == "zebra.md"
        stats = j.memory.stats()
        assert stats["documents"] == stats["count"] == 1 and stats["chunks"] == 1


# --- ask_stream: for and async for -------------------------------------------------------------
STREAM_TOKENS = '''
import asyncio
from openjarvis import Jarvis

async def main():
    with Jarvis() as j:
        async for token in j.ask_stream("Tell me a story"):
            print(token, end="", flush=True)

asyncio.run(main())
'''


def test_async_for_over_ask_stream_as_the_snippet_writes_it(engine_env):
    engine_env.add("Once upon a time there was a fox.")
    printed, _ = run_snippet(STREAM_TOKENS)
    assert printed == "Once upon a time there was a fox."
    assert engine_env.requests[0]["stream"] is True


def test_ask_stream_still_works_with_a_plain_for_loop_and_in_pieces():
    from jarvis import Jarvis

    engine = ScriptedEngine([reply("one two three four"), reply("five six seven eight")])
    with Jarvis(engine=engine, model="m") as j:
        pieces = [p for p in j.ask_stream("count", context=False)]
        assert len(pieces) > 1 and "".join(pieces) == "one two three four"

        async def main() -> list[str]:
            return [p async for p in j.ask_stream("count", context=False)]

        got = asyncio.run(main())
        assert len(got) > 1 and "".join(got) == "five six seven eight"


def test_one_stream_read_both_ways_is_an_error_and_misuse_is_caught_at_the_call():
    from jarvis import Jarvis
    from jarvis.errors import UserError

    engine = ScriptedEngine([reply("a b c d e f")])
    with Jarvis(engine=engine, model="m") as j:
        with pytest.raises(UserError, match="on_token"):
            j.ask_stream("q", on_token=print)
        stream = j.ask_stream("q", context=False)
        assert next(stream) == "a b "

        async def main() -> None:
            async for _ in stream:
                pass

        with pytest.raises(UserError, match="already read with `for`"):
            asyncio.run(main())
        assert "".join(stream) == "c d e f"


def test_leaving_an_async_for_over_ask_stream_early_cancels_the_run(jarvis_home):
    from jarvis import Jarvis, tool

    started, release = threading.Event(), threading.Event()

    @tool(register=False)
    def wait_here() -> str:
        """Wait until released."""
        started.set()
        release.wait(10)
        return "done"

    from jarvis.core.registry import ToolRegistry

    ToolRegistry.register_value("wait_here", wait_here)
    engine = ScriptedEngine([reply("Let me check. ", tool_calls=[tool_call("wait_here", {})]),
                             reply("never asked for")])
    with Jarvis(engine=engine, model="m") as j:
        async def main() -> str:
            async for piece in j.ask_stream("q", context=False, tools=["wait_here"]):
                return piece
            return ""

        assert asyncio.run(main()).startswith("Let me")
        assert started.wait(10)
        release.set()
        from waiting import wait_for

        wait_for(lambda: [r["status"] for r in j.runlog.list(limit=1)] == ["cancelled"],
                 timeout=10, what="the run recorded as cancelled")
    assert len(engine.calls) == 1  # the run stopped before its next engine call


# --- EventBus history and the process-wide bus -------------------------------------------------
def test_event_bus_records_history_and_the_process_bus_can_be_reset():
    from jarvis.core.events import EventBus, EventType, get_event_bus, reset_event_bus
    from jarvis.tools.calculator import CalculatorTool
    from jarvis.tools.executor import ToolExecutor

    bus = EventBus(record_history=True)
    ToolExecutor([CalculatorTool()], bus=bus).execute({"name": "calculator",
                                                       "arguments": '{"expression": "1+1"}'})
    kinds = [e.event_type for e in bus.history]
    assert kinds == [EventType.TOOL_CALL_START, EventType.TOOL_CALL_END]
    assert bus.history[1].data["success"] is True and bus.history[1].timestamp > 0
    bus.clear_history()
    assert bus.history == []
    assert EventBus().history == []  # off by default: nothing is kept
    capped = EventBus(record_history=True, max_history=3)
    for i in range(10):
        capped.publish(EventType.RUN_START, {"i": i})
    assert [e.data["i"] for e in capped.history] == [7, 8, 9]

    reset_event_bus()
    shared = get_event_bus(record_history=True)
    assert get_event_bus() is shared and shared.record_history
    shared.publish(EventType.RUN_END, {"x": 1})
    assert len(shared.history) == 1
    reset_event_bus()
    assert get_event_bus() is not shared and get_event_bus().history == []
    reset_event_bus()


# --- OrchestratorAgent(before_tool_call=..., parallel_tools=...) -------------------------------
def test_before_tool_call_sees_each_call_in_order_and_denies_fail_closed():
    from jarvis.agents import OrchestratorAgent
    from jarvis.tools.calculator import CalculatorTool

    asked: list[tuple[str, dict[str, Any]]] = []

    def hook(name: str, args: dict[str, Any]) -> bool:
        asked.append((name, args))
        if args.get("expression") == "boom":
            raise RuntimeError("policy engine down")
        return args.get("expression") != "2*2"

    engine = ScriptedEngine([
        reply(tool_calls=[tool_call("calculator", {"expression": "1+1"}),
                          tool_call("calculator", {"expression": "2*2"}),
                          tool_call("calculator", {"expression": "boom"}),
                          tool_call("calculator", "{not json")]),
        reply("done")])
    agent = OrchestratorAgent(engine, "m", tools=[CalculatorTool()], before_tool_call=hook)
    result = agent.run("compute")
    assert result.content == "done"
    assert asked == [("calculator", {"expression": "1+1"}), ("calculator", {"expression": "2*2"}),
                     ("calculator", {"expression": "boom"})]
    outcomes = [(r.success, r.error_type.value if r.error_type else None) for r in result.tool_results]
    assert outcomes == [(True, None), (False, "denied"), (False, "denied"), (False, "denied")]
    seen = [m["content"] for m in engine.calls[1]["messages"] if m["role"] == "tool"]
    assert seen[0] == "2"
    assert "policy denied it" in seen[1] and "policy failed (RuntimeError)" in seen[2]
    assert "not valid JSON" in seen[3]


def test_a_hook_that_returns_nothing_denies_and_structured_mode_asks_it_too():
    from jarvis.agents import OrchestratorAgent
    from jarvis.tools.calculator import CalculatorTool

    engine = ScriptedEngine([
        reply('Thought: compute\nAction: calculator\nAction Input: {"expression": "3*4"}'),
        reply("Thought: done\nFinal Answer: no")])
    agent = OrchestratorAgent(engine, "m", tools=[CalculatorTool()], mode="structured",
                              before_tool_call=lambda name, args: None)
    result = agent.run("3*4?")
    assert result.tool_results[0].error_type.value == "denied"
    assert "Observation: ERROR (denied)" in engine.calls[1]["messages"][-1]["content"]


def _barrier_tool(barrier: threading.Barrier, log: list[str]) -> Any:
    from jarvis import tool

    @tool(register=False)
    def meet(label: str) -> str:
        """Wait for the other call at a barrier.

        Args:
            label: which call this is.
        """
        log.append(f"start {label}")
        barrier.wait()
        log.append(f"end {label}")
        return label

    return meet


def test_parallel_tools_runs_one_replys_calls_together_or_one_by_one():
    from jarvis.agents import OrchestratorAgent

    calls = [tool_call("meet", {"label": "a"}), tool_call("meet", {"label": "b"})]
    log: list[str] = []
    together = threading.Barrier(2, timeout=10)
    engine = ScriptedEngine([reply(tool_calls=calls), reply("ok")])
    result = OrchestratorAgent(engine, "m", tools=[_barrier_tool(together, log)]).run("go")
    assert [r.content for r in result.tool_results] == ["a", "b"]  # both met at the barrier

    log.clear()
    alone = threading.Barrier(1)
    engine = ScriptedEngine([reply(tool_calls=[tool_call("meet", {"label": "a"}),
                                               tool_call("meet", {"label": "b"})]), reply("ok")])
    agent = OrchestratorAgent(engine, "m", tools=[_barrier_tool(alone, log)], parallel_tools=False)
    result = agent.run("go")
    assert log == ["start a", "end a", "start b", "end b"]
    assert [r.content for r in result.tool_results] == ["a", "b"]


# --- AgentContext / Conversation ----------------------------------------------------------------
AGENT_CONTEXT = '''
from openjarvis.agents._stubs import AgentContext, AgentResult
from openjarvis.core.types import Conversation, Message, Role

conversation = Conversation(max_messages=3)
conversation.add(Message(role=Role.SYSTEM, content="Answer in French."))
conversation.add(Message(role=Role.USER, content="My name is Ada."))
conversation.add(Message(role=Role.ASSISTANT, content="Enchante, Ada."))
conversation.add(Message(role=Role.USER, content="I live in Paris."))
context = AgentContext(conversation=conversation, tools=["calculator"],
                       memory_results=[{"content": "Ada likes tea.", "source": "notes.md"}],
                       metadata={"session": "s1"})
result = agent.run("What do I like?", context=context)
print(result.content)
print(result.metadata["context"])
print([m.text for m in conversation.window(2)])
'''


def test_agent_run_takes_an_agent_context_as_the_docs_build_it():
    from jarvis.agents import OrchestratorAgent
    from jarvis.tools.calculator import CalculatorTool

    engine = ScriptedEngine([reply("Vous aimez le the.")])
    agent = OrchestratorAgent(engine, "m", tools=[CalculatorTool()], system="Be brief.")
    printed, ns = run_snippet(AGENT_CONTEXT, {"agent": agent})
    assert printed.splitlines() == ["Vous aimez le the.", "{'session': 's1'}",
                                    "['Enchante, Ada.', 'I live in Paris.']"]
    sent = engine.calls[0]["messages"]
    # max_messages=3 dropped the system message; the capped conversation comes first.
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user", "user"]
    assert sent[0]["content"].startswith("Be brief.\n\nRelevant passages")
    assert "[1] notes.md\nAda likes tea." in sent[0]["content"]
    assert sent[-1]["content"] == "What do I like?"
    assert isinstance(ns["result"], ns["AgentResult"])


def test_context_system_messages_join_the_system_prompt_and_unknown_tools_are_refused():
    from jarvis.agents import SimpleAgent
    from jarvis.agents.context import AgentContext
    from jarvis.core.types import Conversation, Message
    from jarvis.errors import UserError

    engine = ScriptedEngine([reply("ok")])
    context = AgentContext(conversation=Conversation([Message("system", "Be kind."),
                                                      Message("user", "hi")]))
    SimpleAgent(engine, "m", system="Be brief.").run("q", context=context)
    assert engine.calls[0]["messages"][0] == {"role": "system", "content": "Be brief.\n\nBe kind."}
    with pytest.raises(UserError, match="does not have; its tools: \\(none\\)"):
        SimpleAgent(engine, "m").run("q", context=AgentContext(tools=["calculator"]))
    with pytest.raises(UserError, match="must be an AgentContext"):
        SimpleAgent(engine, "m").run("q", context={"tools": []})


# --- smaller names ------------------------------------------------------------------------------
def test_native_react_is_the_react_agent(engine_env):
    from jarvis import Jarvis

    engine_env.add('Thought: add\nAction: calculator\nAction Input: {"expression": "2+2"}',
                   "Thought: done\nFinal Answer: 4")
    with Jarvis() as j:
        result = j.ask_full("What is 2+2?", agent="native_react", tools=["calculator"])
    assert result["content"] == "4" and result["agent"] == "react"
    assert result["tool_results"][0]["content"] == "4"
    from jarvis.agents import ReActAgent, agent_class

    assert agent_class("native_react") is ReActAgent


def test_calculator_safe_eval():
    from jarvis.tools import calculator

    assert calculator.safe_eval("sqrt(144) + 3**2") == 21.0
    assert calculator.safe_eval("2^10") == 1024.0 and isinstance(calculator.safe_eval("7"), float)
    for bad, words in (("__import__('os')", "not allowed|unsupported|unknown"), ("1/0", "division by zero"),
                       ("9**9**9", "too large"), ("10**300 * 10**300 + 0.5", "too large")):
        with pytest.raises(ValueError, match=words):
            calculator.safe_eval(bad)


def test_task_not_found_is_also_a_key_error(tmp_path):
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore, TaskNotFoundError

    store = SchedulerStore(tmp_path / "s.db")
    try:
        with pytest.raises(KeyError) as info:
            TaskScheduler(store).pause_task("nope")
        assert isinstance(info.value, TaskNotFoundError)
        assert str(info.value) == ("no scheduled task with id 'nope'; see the ids with "
                                   "`jarvis schedule list`")
    finally:
        store.close()


def test_message_text():
    from jarvis.core.types import Message, Role

    assert Message(role=Role.USER, content="hi").text == "hi"
    assert Message(role="assistant", content=None).text == ""


# --- MCPToolProvider / MCPToolAdapter over jarvis's MCP client ---------------------------------
MCP_DISCOVER = '''
from openjarvis.mcp.client import MCPClient, StdioTransport
from openjarvis.mcp.client import MCPToolProvider

client = MCPClient(StdioTransport(command=[python, toolbox, "--label", "box"]))
client.initialize()
provider = MCPToolProvider(client)
discovered = provider.discover()
print(sorted(t.spec.name for t in discovered)[:3])
'''


def test_mcp_tool_provider_discovers_a_real_servers_tools_and_they_run_in_an_executor(tmp_path):
    import sys

    from mcp_support import TOOLBOX
    from sandbox_support import descendants, new_descendants

    from jarvis.agents import OrchestratorAgent
    from jarvis.mcp.client import MCPToolAdapter
    from jarvis.tools.executor import ToolExecutor

    before = descendants()
    printed, ns = run_snippet(MCP_DISCOVER, {"python": sys.executable, "toolbox": str(TOOLBOX)})
    client = ns["client"]
    try:
        assert printed == "['add', 'crash', 'delete_everything']\n"
        tools = {t.spec.name: t for t in ns["discovered"]}
        assert all(isinstance(t, MCPToolAdapter) for t in tools.values())
        assert tools["add"].spec.parameters["required"] == ["a", "b"]
        assert tools["delete_everything"].spec.requires_confirmation  # destructive on the server
        # A server not marked trusted: every tool asks before each call (its annotations are
        # only its own claims; docs/trust.md), so without an approver even `add` is denied.
        assert ToolExecutor(tools.values()).execute(
            {"name": "add", "arguments": {"a": 2, "b": 3}}).error_type.value == "denied"
        # Its results are private and untrusted, so each later call that sends to it is an
        # egress the person approves too (egress_approver; `approver` never answers those).
        executor = ToolExecutor(tools.values(),
                                approver=lambda spec, args: spec.name != "delete_everything",
                                egress_approver=lambda request: True)
        assert executor.execute({"name": "add", "arguments": {"a": 2, "b": 3}}).content == "5"
        failed = executor.execute({"name": "fail", "arguments": {"message": "nope"}})
        assert not failed.success and "Error executing tool fail" in failed.content
        denied = executor.execute({"name": "delete_everything",
                                   "arguments": {"confirm_phrase": "yes"}})
        assert denied.error_type.value == "denied"
        assert client.call_tool("echo", {"text": "hi"}) == {
            "content": [{"text": "hi", "detail": None, "type": "text"}], "isError": False}
        # An agent uses them like any tool.
        engine = ScriptedEngine([reply(tool_calls=[tool_call("echo", {"text": "ping"})]), "pong"])
        agent = OrchestratorAgent(engine, "m", executor=ToolExecutor(
            [tools["echo"]], approver=lambda spec, args: True))
        assert agent.run("echo ping").tool_results[0].content == "ping"
        one = MCPToolAdapter(client, client.list_tools()[0])
        assert one.spec.name == client.list_tools()[0].name
        assert int(client.call_tool("pid")["content"][0]["text"]) > 0
        assert new_descendants(before)  # the server (in the sandbox: its pid is its own there)
    finally:
        client.close()
    from waiting import wait_for

    wait_for(lambda: not new_descendants(before), timeout=10,
             what="the stdio server (and its sandbox) ends with close()")


def test_mcp_client_failures_are_clear(tmp_path):
    import sys

    from jarvis.errors import DependencyError, UserError
    from jarvis.mcp.client import MCPClient, MCPToolProvider, StdioTransport

    missing = tmp_path / "no_such_server.py"
    client = MCPClient(StdioTransport(command=[sys.executable, str(missing)]), connect_timeout=10)
    try:
        with pytest.raises(DependencyError, match="could not be reached"):
            MCPToolProvider(client).discover()
    finally:
        client.close()
    with pytest.raises(UserError, match="StdioTransport or StreamableHTTPTransport"):
        MCPClient("python server.py")
    with pytest.raises(UserError, match="takes an MCPClient"):
        MCPToolProvider(object())


def test_task_scheduler_publishes_its_runs_on_the_bus(tmp_path):
    from jarvis import Jarvis
    from jarvis.core.events import EventBus, EventType
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(db_path=str(tmp_path / "scheduler.db"))
    jarvis = Jarvis(engine=ScriptedEngine(["Headlines: all quiet."]), model="m")
    bus = EventBus(record_history=True)
    try:
        scheduler = TaskScheduler(store=store, system=jarvis, poll_interval=60, bus=bus)
        daily = scheduler.create_task(prompt="Summarize the latest news headlines",
                                      schedule_type="cron", schedule_value="0 8 * * *",
                                      agent="simple")
        scheduler.run_now(daily.id)
        scheduler.run_now(daily.id)  # the script is used up: this run fails
    finally:
        jarvis.close()
        store.close()
    events = [(e.event_type, e.data) for e in bus.history
              if e.event_type in (EventType.SCHEDULER_TASK_START, EventType.SCHEDULER_TASK_END)]
    assert [kind for kind, _ in events] == [EventType.SCHEDULER_TASK_START,
                                            EventType.SCHEDULER_TASK_END] * 2
    start, end, _, failed = (data for _, data in events)
    assert start["task_id"] == daily.id and start["prompt"].startswith("Summarize")
    assert end["success"] is True and end["result"] == "Headlines: all quiet."
    assert failed["success"] is False and "no scripted reply left" in failed["error"]
