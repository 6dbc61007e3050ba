"""The Jarvis SDK: ask / ask_full against the ScriptedEngine and the loopback server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from jarvis import Jarvis
from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ToolResult
from jarvis.errors import UnknownNameError, UserError
from jarvis.runlog import RunLog
from jarvis.testing import FakeOpenAIServer, ScriptedEngine, reply, tool_call
from jarvis.tools.base import BaseTool, tool
from jarvis.tools.spec import ToolSpec

AREA = [
    reply(tool_calls=[tool_call("think", {"thought": "area is pi r^2"}),
                      tool_call("calculator", {"expression": "pi * 7**2"})],
          usage={"prompt_tokens": 40, "completion_tokens": 10}),
    reply("About 153.94.", usage={"prompt_tokens": 60, "completion_tokens": 5}),
]


def test_reference_example_against_the_loopback_server(monkeypatch, jarvis_home):
    with FakeOpenAIServer(AREA, models=["qwen3:8b"]) as server:
        monkeypatch.setenv("JARVIS_ENGINE", "ollama")
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        j = Jarvis()
        result = j.ask_full("What is the area of a circle with radius 7?", agent="orchestrator",
                            tools=["calculator", "think"])
        j.close()
    assert result["content"] == "About 153.94."
    assert [(t["tool_name"], t["success"]) for t in result["tool_results"]] == [
        ("think", True), ("calculator", True)]
    assert result["tool_results"][1]["content"].startswith("153.93")
    for tr in result["tool_results"]:
        assert set(tr) >= {"tool_name", "content", "success", "latency_seconds", "cost_usd"}
    assert result["usage"] == {"prompt_tokens": 100, "completion_tokens": 15, "total_tokens": 115}
    assert result["turns"] == 2
    assert result["model"] == "qwen3:8b" and result["engine"] == "ollama"
    assert server.requests[0]["model"] == "qwen3:8b"  # the engine's first model
    assert result["run_id"] and (jarvis_home / "runs.db").exists()


def test_ask_returns_text_and_default_agent_uses_requested_tools():
    engine = ScriptedEngine(list(AREA) + ["plain answer"])
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("area?", tools="calculator,think")
        assert result["agent"] == "orchestrator"
        assert {t["function"]["name"] for t in engine.calls[0]["tools"]} == {"calculator", "think"}
        assert j.ask("hello") == "plain answer"
    assert engine.calls[-1]["tools"] is None  # no tools: the simple agent
    assert not engine.closed  # an engine passed in is the caller's to close


def test_unknown_tool_and_agent_list_the_valid_names():
    with Jarvis(engine=ScriptedEngine([]), model="m") as j:
        with pytest.raises(UnknownNameError) as info:
            j.ask_full("x", tools=["calculater"])
        assert "calculator" in str(info.value) and "think" in str(info.value)
        with pytest.raises(UnknownNameError) as info:
            j.ask_full("x", agent="orchestrater")
        for name in ("orchestrator", "react", "simple"):
            assert name in str(info.value)
        with pytest.raises(UserError, match="empty"):
            j.ask_full("   ")


def test_simple_agent_with_tools_is_an_error():
    with Jarvis(engine=ScriptedEngine([]), model="m") as j, pytest.raises(UserError,
                                                                          match="orchestrator"):
        j.ask_full("x", agent="simple", tools=["calculator"])


def test_tool_results_carry_arguments_and_failures():
    engine = ScriptedEngine([reply(tool_calls=[tool_call("calculator", {"expression": "1/0"})]),
                             "cannot divide by zero"])
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("1/0", tools=["calculator"])
    tr = result["tool_results"][0]
    assert tr["success"] is False and tr["error_type"] == "execution"
    assert tr["arguments"] == {"expression": "1/0"}


def _danger_tool(ran: list[str]) -> Any:
    @tool(name="danger", requires_confirmation=True, register=False)
    def danger(target: str) -> str:
        """Do something that needs approval."""
        ran.append(target)
        return f"did {target}"

    ToolRegistry.register_value("danger", danger)
    return danger


@pytest.mark.parametrize("kwargs,expected", [
    ({}, False),
    ({"approver": lambda spec, args: args["target"] == "ok"}, True),
    ({"approver": lambda spec, args: False}, False),
    ({"approved_tools": ["danger"]}, True),
])
def test_confirmation_tools_need_an_approver(kwargs, expected):
    ran: list[str] = []
    _danger_tool(ran)
    engine = ScriptedEngine([reply(tool_calls=[tool_call("danger", {"target": "ok"})]), "done"])
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("do it", tools=["danger"], **kwargs)
    assert bool(ran) is expected
    assert result["tool_results"][0]["success"] is expected
    if not expected:
        assert result["tool_results"][0]["error_type"] == "denied"


def test_llm_tool_gets_the_engine_and_model():
    engine = ScriptedEngine([
        reply(tool_calls=[tool_call("llm", {"prompt": "Summarize: long text", "system": "Be short"})]),
        "short",  # answered by the llm tool's own request
        "Summary: short",
    ])
    with Jarvis(engine=engine, model="my-model") as j:
        result = j.ask_full("summarize", tools=["llm"])
    assert result["content"] == "Summary: short"
    assert result["tool_results"][0]["content"] == "short"
    assert result["tool_results"][0]["usage"]["total_tokens"] > 0
    sub = engine.calls[1]
    assert sub["model"] == "my-model"
    assert sub["messages"] == [{"role": "system", "content": "Be short"},
                               {"role": "user", "content": "Summarize: long text"}]


def test_services_are_built_only_when_a_tool_declares_them(jarvis_home):
    seen: dict[str, Any] = {}

    class Needy(BaseTool):
        needs = ("config", "bus", "model")

        def __init__(self, config: Any = None, bus: Any = None, model: str = "",
                     backend: Any = None, scheduler: Any = None) -> None:
            # backend and scheduler are named like services but not declared: never filled.
            seen.update(config=config, bus=bus, model=model, backend=backend,
                        scheduler=scheduler)

        @property
        def spec(self) -> ToolSpec:
            return ToolSpec(name="needy", description="needs things")

        def execute(self, **params: Any) -> ToolResult:
            return ToolResult("needy", "ok")

    ToolRegistry.register_value("needy", Needy)
    with Jarvis(engine=ScriptedEngine(["x"]), model="m") as j:
        j.ask_full("q", agent="orchestrator", tools=["needy", "calculator"])
        assert seen["config"] is j.config and seen["bus"] is j.bus and seen["model"] == "m"
        assert seen["backend"] is None and seen["scheduler"] is None
        assert j._memory is None
    assert not (jarvis_home / "memory.db").exists()
    assert not (jarvis_home / "scheduler.db").exists()


def test_workspace_agent_builds_its_base_with_instructions_tools_and_model():
    Path("config.toml").write_text("")  # agents/ is relative to the config file
    Path("agents").mkdir()
    Path("agents/mathy.toml").write_text(
        'description = "does math"\nbase = "orchestrator"\ninstructions = "You are Mathy."\n'
        'tools = ["calculator"]\nmax_turns = 2\nmodel = "math-model"\n')
    engine = ScriptedEngine(default=reply(tool_calls=[tool_call("calculator", {"expression": "1"})]))
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("go", agent="mathy")
        assert result["agent"] == "mathy" and result["metadata"]["max_turns_exceeded"] is True
        assert result["turns"] == 2
        with pytest.raises(UnknownNameError, match="mathy"):
            j.ask_full("go", agent="nobody")
    first = engine.calls[0]
    assert first["messages"][0] == {"role": "system", "content": "You are Mathy."}
    assert first["model"] == "math-model"
    assert [t["function"]["name"] for t in first["tools"]] == ["calculator"]


def test_runs_are_logged_with_tool_calls(jarvis_home):
    engine = ScriptedEngine(list(AREA))
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("area?", tools=["calculator", "think"], source="scheduler")
    run = RunLog(jarvis_home / "runs.db").get(result["run_id"])
    assert run["status"] == "ok" and run["source"] == "scheduler" and run["agent"] == "orchestrator"
    assert run["content"] == "About 153.94." and run["usage"]["total_tokens"] == 115
    assert [c["tool_name"] for c in run["tool_calls"]] == ["think", "calculator"]
    assert run["tool_calls"][1]["arguments"] == {"expression": "pi * 7**2"}
    assert [m["role"] for m in run["messages"]] == ["user", "assistant", "tool", "tool", "assistant"]
    assert len(run["metadata"]["inference_seconds"]) == 2 and run["duration_seconds"] > 0


def test_failed_runs_are_logged_and_logging_can_be_turned_off(monkeypatch, jarvis_home):
    from jarvis.errors import EngineError

    with Jarvis(engine=ScriptedEngine([EngineError("down")]), model="m") as j:
        with pytest.raises(EngineError):
            j.ask_full("q")
    runs = RunLog(jarvis_home / "runs.db").list()
    assert runs[0]["status"] == "error" and "down" in runs[0]["error"]
    monkeypatch.setenv("JARVIS_RUN_LOG", "0")
    with Jarvis(engine=ScriptedEngine(["a"]), model="m") as j:
        assert j.ask_full("q")["run_id"] is None
    assert len(RunLog(jarvis_home / "runs.db").list()) == 1


def test_streaming_handler_and_async_variants():
    tokens: list[str] = []
    engine = ScriptedEngine(["streamed answer here", "async answer", "async text"])
    with Jarvis(engine=engine, model="m") as j:
        assert j.ask_full("q", on_token=tokens.append)["content"] == "streamed answer here"
        assert "".join(tokens) == "streamed answer here"

        async def main():
            full = await j.aask_full("q")
            text = await j.aask("q")
            return full, text

        full, text = asyncio.run(main())
    assert full["content"] == "async answer" and text == "async text"


def test_system_prompt_and_max_turns_arguments():
    engine = ScriptedEngine(default=reply(tool_calls=[tool_call("think", {"thought": "x"})]))
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("q", tools=["think"], system="SYS", max_turns=1)
    assert result["turns"] == 1 and result["metadata"]["max_turns_exceeded"]
    assert engine.calls[0]["messages"][0] == {"role": "system", "content": "SYS"}


def test_memory_context_goes_into_the_system_prompt(jarvis_home):
    engine = ScriptedEngine(default="ok")
    with Jarvis(engine=engine, model="m") as j:
        assert j.ask_full("zebra migration facts")["context_sources"] == []
        assert not (jarvis_home / "memory.db").exists()  # an empty store is not created
        j.memory.store("Zebras migrate across the Serengeti every year.", source="notes/zebra.md")
        result = j.ask_full("zebra migration facts", system="Be brief.")
        assert result["context_sources"] == ["notes/zebra.md"]
        system = engine.calls[-1]["messages"][0]
        assert system["role"] == "system" and system["content"].startswith("Be brief.")
        assert "Serengeti" in system["content"]
        j.ask_full("zebra migration facts", context=False)
        assert engine.calls[-1]["messages"][0]["role"] == "user"


def test_retrieval_tool_gets_the_memory_store():
    engine = ScriptedEngine([reply(tool_calls=[tool_call("retrieval", {"query": "zebra"})]),
                             "Zebras migrate."])
    with Jarvis(engine=engine, model="m") as j:
        j.memory.store("Zebras migrate across the Serengeti.", source="zebra.md")
        result = j.ask_full("what do zebras do?", tools=["retrieval"], context=False)
    tr = result["tool_results"][0]
    assert tr["success"] and "Serengeti" in tr["content"]


@pytest.mark.parametrize("kwargs", [{"max_turns": 0}, {"max_turns": -1}, {"max_turns": "3"},
                                    {"max_turns": True}, {"tools": 5}])
def test_bad_max_turns_or_tools_are_user_errors_not_silently_fixed(kwargs):
    engine = ScriptedEngine(["never used"])
    with Jarvis(engine=engine) as j, pytest.raises(UserError, match="max_turns|tools must be"):
        j.ask_full("q", **kwargs)
    assert engine.calls == []


def test_close_stops_a_started_scheduler_and_closes_its_store(tmp_path):
    from jarvis.sdk import Jarvis

    (tmp_path / "config.toml").write_text("")
    j = Jarvis(config_path=tmp_path / "config.toml")
    scheduler = j.scheduler.start()
    assert scheduler.running
    j.close()
    assert not scheduler.running
    with pytest.raises(Exception, match="closed"):
        scheduler.store.list_tasks()
