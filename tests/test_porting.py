"""What users port from OpenJarvis (issue 16): the registry contract, dict engine replies,
Role, the SDK's extra surface, the scheduler alias, event keys, agent flags, memory_index on
any backend, and strict built-in arguments."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jarvis import Jarvis
from jarvis.agents import OrchestratorAgent, ReActAgent, SimpleAgent
from jarvis.core.events import EventBus, EventType
from jarvis.core.registry import AgentRegistry, ToolRegistry
from jarvis.core.types import Message, Role, ToolCall
from jarvis.errors import DuplicateNameError, UnknownNameError
from jarvis.testing import ScriptedEngine, reply, tool_call
from jarvis.tools.calculator import CalculatorTool
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.llm_tool import LLMTool


# --- registry contract -------------------------------------------------------------------
def test_duplicate_plain_values_are_an_error_and_the_first_stays():
    ToolRegistry.register_value("x_value", 1)
    with pytest.raises(DuplicateNameError, match="'x_value' is already registered"):
        ToolRegistry.register_value("x_value", 2)
    assert ToolRegistry.get("x_value") == 1


def _make_class(label: str) -> type:
    class D:  # same module and qualname on every call: two different definitions
        kind = label

    return D


def test_classes_made_by_one_function_do_not_replace_each_other():
    first, second = _make_class("a"), _make_class("b")
    assert (first.__module__, first.__qualname__) == (second.__module__, second.__qualname__)
    AgentRegistry.register("d_agent")(first)
    with pytest.raises(DuplicateNameError):
        AgentRegistry.register("d_agent")(second)
    assert AgentRegistry.get("d_agent") is first
    AgentRegistry.register("d_agent")(first)  # the very same object again is fine


def test_a_rerun_of_a_module_level_definition_passes(tmp_path, monkeypatch):
    import importlib
    import sys

    (tmp_path / "rerun_mod.py").write_text(
        "from jarvis.core.registry import AgentRegistry\n"
        "@AgentRegistry.register('rerun_agent')\n"
        "class Rerun:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("rerun_mod")
    try:
        old = AgentRegistry.get("rerun_agent")
        importlib.reload(module)  # a module reloaded on purpose
        assert AgentRegistry.get("rerun_agent") is module.Rerun is not old
    finally:
        sys.modules.pop("rerun_mod", None)


def test_registry_errors_are_also_key_and_value_errors_with_jarvis_messages():
    with pytest.raises(KeyError) as info:
        ToolRegistry.get("calcualtor")
    assert isinstance(info.value, UnknownNameError)
    text = str(info.value)
    assert text.startswith("unknown tool 'calcualtor' (did you mean 'calculator'?); valid tool")
    ToolRegistry.register_value("v_dup", object())
    with pytest.raises(ValueError) as dup:
        ToolRegistry.register_value("v_dup", object())
    assert isinstance(dup.value, DuplicateNameError)


# --- LLMTool never raises ----------------------------------------------------------------
class _Broken:
    engine_id = "broken"

    def __init__(self, exc: BaseException | None = None, value: Any = None) -> None:
        self.exc, self.value = exc, value

    def generate(self, messages: Any, **kwargs: Any) -> Any:
        if self.exc is not None:
            raise self.exc
        return self.value


@pytest.mark.parametrize("engine, words", [
    (_Broken(ConnectionError("refused")), "ConnectionError: refused"),
    (_Broken(value=object()), "returned a object"),
    (_Broken(value={"content": 3}), "malformed reply"),
])
def test_llm_tool_turns_any_engine_failure_into_a_failed_result(engine, words):
    result = LLMTool(engine=engine).execute(prompt="hi")
    assert not result.success and words in result.content


# --- dict replies at the engine boundary -------------------------------------------------
class DictEngine:
    """An engine written the OpenJarvis way: generate() returns a plain dict."""

    engine_id = "dicty"

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)

    def generate(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
        return self.replies.pop(0)

    def list_models(self) -> list[str]:
        return ["dict-model"]

    def health(self) -> bool:
        return True

    def close(self) -> None:
        pass


def test_dict_replies_work_in_agents_the_sdk_and_the_llm_tool():
    engine = DictEngine([
        {"content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "calculator", "arguments": '{"expression": "6*7"}'}}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
        {"content": "It is 42.", "usage": {"total_tokens": 4}, "model": "dict-model"},
        {"content": "plain"},
        {"content": "delegated"},
    ])
    agent = OrchestratorAgent(engine, "m", tools=[CalculatorTool()])
    result = agent.run("6*7?")
    assert result.content == "It is 42." and result.tool_results[0].content == "42"
    assert result.usage["total_tokens"] == 9
    with Jarvis(engine=engine, model="m") as j:
        assert j.ask("hi", context=False) == "plain"
    assert LLMTool(engine=engine).execute(prompt="x").content == "delegated"


def test_an_engine_without_stream_streams_its_whole_answer_once():
    """An OpenJarvis engine has generate() only: every streaming entry point falls back to it
    and shows the whole answer as one piece."""
    assert not hasattr(DictEngine, "stream")
    engine = DictEngine([{"content": "first answer"}, {"content": "second answer"},
                         {"content": "third answer"}, {"content": "fourth answer"},
                         {"content": "Thought: done.\nFinal Answer: fifth answer"},
                         {"content": ""}])
    with Jarvis(engine=engine, model="m") as j:
        assert list(j.ask_stream("q", context=False)) == ["first answer"]

        async def main() -> list[str]:
            return [p async for p in j.aask_stream("q", context=False)]

        assert asyncio.run(main()) == ["second answer"]
        seen: list[str] = []
        full = j.ask_full("q", context=False, on_token=seen.append)
        assert full["content"] == "third answer" and seen == ["third answer"]
        seen.clear()
        full = j.ask_full("q", context=False, on_token=seen.append, agent="orchestrator",
                          tools=["calculator"])
        assert full["content"] == "fourth answer" and seen == ["fourth answer"]
        seen.clear()
        full = j.ask_full("q", context=False, on_token=seen.append, agent="react",
                          tools=["calculator"])
        assert full["content"] == "fifth answer" and "".join(seen) == "fifth answer"
        seen.clear()
        assert j.ask_full("q", context=False, on_token=seen.append)["content"] == ""
        assert seen == []  # nothing to show: no empty piece


def test_an_engine_subclassing_the_protocol_without_stream_streams_too():
    from jarvis.engine import InferenceEngine

    class Subclassed(InferenceEngine):  # stream() is the protocol's empty body
        engine_id = "subclassed"

        def generate(self, messages: Any, **kwargs: Any) -> Any:
            return {"content": "from generate"}

    seen: list[str] = []
    with Jarvis(engine=Subclassed(), model="m") as j:
        assert j.ask_full("q", context=False, on_token=seen.append)["content"] == "from generate"
    assert seen == ["from generate"]


def test_jarvis_ask_streams_from_an_engine_without_stream(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from jarvis.cli import cli
    from jarvis.core.registry import EngineRegistry

    EngineRegistry.register_value("dicty", lambda model="", **_: DictEngine(
        [{"content": "streamed from generate"}]))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["ask", "-e", "dicty", "-m", "m", "hello"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "streamed from generate"


def test_message_takes_a_role_enum():
    message = Message(role=Role.USER, content="hi")
    assert message.role == "user" and type(message.role) is str
    assert message.to_openai() == {"role": "user", "content": "hi"}


# --- SDK surface -------------------------------------------------------------------------
def test_sdk_version_models_engines_and_engine_key():
    import jarvis

    engine = ScriptedEngine(models=["a", "b"])
    with Jarvis(engine=engine, model="a") as j:
        assert j.version == jarvis.__version__
        assert j.list_models() == ["a", "b"]
        assert "ollama" in j.list_engines() and "openai" in Jarvis.list_engines()
    with Jarvis(engine_key="vllm") as j:
        assert j._engine_name == "vllm"


def test_ask_stream_and_the_async_api_yield_the_answer_in_pieces():
    engine = ScriptedEngine([reply("one two three four"), reply("five six seven"),
                             reply("eight nine ten eleven")])
    with Jarvis(engine=engine, model="m") as j:
        pieces = list(j.ask_stream("count", context=False))
        assert len(pieces) > 1 and "".join(pieces) == "one two three four"

        async def main() -> tuple[dict[str, Any], list[str]]:
            full = await j.aask_full("count", context=False)
            got = [p async for p in j.aask_stream("count", context=False)]
            return full, got

        full, got = asyncio.run(main())
    assert full["content"] == "five six seven"
    assert len(got) > 1 and "".join(got) == "eight nine ten eleven"


def test_ask_stream_raises_the_runs_error():
    with Jarvis(engine=ScriptedEngine([]), model="m") as j:
        with pytest.raises(Exception, match="no scripted reply left"):
            list(j.ask_stream("x", context=False))


def test_task_scheduler_takes_poll_interval(tmp_path):
    from jarvis.errors import UserError
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(tmp_path / "s.db")
    try:
        assert TaskScheduler(store, poll_interval=0.25).poll_seconds == 0.25
        with pytest.raises(UserError, match="not both"):
            TaskScheduler(store, poll_interval=0.25, poll_seconds=1.0)
    finally:
        store.close()


# --- events and agents -------------------------------------------------------------------
def test_event_payloads_carry_openjarvis_keys():
    bus = EventBus()
    seen: dict[str, list[dict[str, Any]]] = {}
    for kind in (EventType.TOOL_CALL_START, EventType.TOOL_CALL_END,
                 EventType.AGENT_TURN_START, EventType.AGENT_TURN_END):
        bus.subscribe(kind, lambda e, k=kind: seen.setdefault(k.value, []).append(e.data))
    engine = ScriptedEngine([reply(tool_calls=[tool_call("calculator", {"expression": "1+1"})]),
                             reply("2")])
    OrchestratorAgent(engine, "m", tools=[CalculatorTool()], bus=bus).run("1+1?")
    start = seen[EventType.TOOL_CALL_START.value][0]
    end = seen[EventType.TOOL_CALL_END.value][0]
    assert start["tool"] == start["tool_name"] == "calculator" and end["tool"] == "calculator"
    assert seen[EventType.AGENT_TURN_START.value][0]["input"] == "1+1?"
    assert [e["turns"] for e in seen[EventType.AGENT_TURN_END.value]] == [1, 2]


def test_accepts_tools_mirrors_uses_tools():
    assert OrchestratorAgent.accepts_tools and ReActAgent.accepts_tools
    assert not SimpleAgent.accepts_tools

    class Mine(SimpleAgent):
        accepts_tools = True

    assert Mine.uses_tools is True


def test_orchestrator_structured_mode_uses_prompted_tools():
    engine = ScriptedEngine([
        reply('Thought: compute\nAction: calculator\nAction Input: {"expression": "3*4"}'),
        reply("Thought: done\nFinal Answer: 12"),
    ])
    agent = OrchestratorAgent(engine, "m", tools=[CalculatorTool()], mode="structured")
    result = agent.run("3*4?")
    assert result.content == "12" and result.tool_results[0].content == "12"
    first = engine.calls[0]
    assert first["tools"] is None  # no native function calling
    assert "calculator" in first["messages"][0]["content"]  # described in the system prompt
    with pytest.raises(Exception, match="unknown orchestrator mode"):
        OrchestratorAgent(engine, "m", mode="nope")


# --- memory_index on any backend, strict built-in arguments -------------------------------
class ListMemory:
    """A memory backend with the protocol only (no SQLite)."""

    def __init__(self) -> None:
        self.docs: dict[str, tuple[str, str]] = {}

    def store(self, content: str, source: str = "", metadata: Any = None) -> str:
        doc_id = str(len(self.docs) + 1)
        self.docs[doc_id] = (content, source)
        return doc_id

    def retrieve(self, query: str, top_k: int = 5, source: Any = None, metadata: Any = None):
        return []

    def delete(self, doc_id: str) -> bool:
        return self.docs.pop(doc_id, None) is not None

    def clear(self) -> None:
        self.docs.clear()

    def count(self) -> int:
        return len(self.docs)

    def close(self) -> None:
        pass


def test_memory_index_works_with_a_protocol_only_backend(tmp_path):
    from jarvis.tools.memory_tools import MemoryIndexTool

    (tmp_path / "notes.md").write_text("the launch code is tulip\n")
    backend = ListMemory()
    executor = ToolExecutor([MemoryIndexTool(backend=backend, allowed_dirs=[str(tmp_path)])],
                            approver=lambda spec, args: True)
    result = executor.execute(ToolCall("c", "memory_index", {"path": str(tmp_path)}))
    assert result.success, result.content
    assert [c for c, _ in backend.docs.values()] == ["the launch code is tulip\n"]
    assert list(backend.docs.values())[0][1] == str((tmp_path / "notes.md").resolve())


def test_built_in_tools_refuse_unknown_argument_names_with_did_you_mean(tmp_path):
    from jarvis.tools.file_read import FileReadTool

    (tmp_path / "a.txt").write_text("x\n")
    executor = ToolExecutor([FileReadTool(allowed_dirs=[str(tmp_path)])])
    result = executor.execute(ToolCall("c", "file_read", {"path": str(tmp_path / "a.txt"),
                                                          "maxline": 3}))
    assert not result.success and result.error_type.value == "invalid_args"
    assert "unknown argument 'maxline' (did you mean 'max_lines'?)" in result.content


def test_a_scheduler_without_system_or_runner_fails_its_runs_loudly(tmp_path):
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(tmp_path / "s.db")
    try:
        scheduler = TaskScheduler(store, poll_interval=0.1)
        task = scheduler.add("hello", every=3600)
        run = scheduler.run_now(task.id)
        assert run.status == "failed"
        assert "nothing to run prompts with" in run.error
    finally:
        store.close()


def test_the_scheduler_runs_prompts_through_an_injected_factory(tmp_path):
    from jarvis.scheduler.runner import SdkRunner
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    made: list[Jarvis] = []

    def factory() -> Jarvis:
        made.append(Jarvis(engine=ScriptedEngine(default=reply("done")), model="m"))
        return made[-1]

    store = SchedulerStore(tmp_path / "s.db")
    try:
        scheduler = TaskScheduler(store, runner=SdkRunner(factory=factory))
        task = scheduler.add("hello", every=3600)
        assert scheduler.run_now(task.id).answer == "done"
        assert scheduler.run_now(task.id).answer == "done"
        assert len(made) == 1  # built once, reused
    finally:
        for system in made:
            system.close()
        store.close()
