"""The simple and orchestrator agents and the loop guard, against the in-process ScriptedEngine."""

from __future__ import annotations

import threading

import pytest

from jarvis.agents import LoopGuard, OrchestratorAgent, SimpleAgent
from jarvis.core.events import EventBus, EventType
from jarvis.errors import EngineError, UserError
from jarvis.testing import ScriptedEngine, reply, tool_call
from jarvis.tools.base import tool
from jarvis.tools.calculator import CalculatorTool
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.think import ThinkTool


def test_simple_agent_makes_one_call_without_tools():
    engine = ScriptedEngine(["Paris."])
    result = SimpleAgent(engine, "m", system="Be brief.").run("Capital of France?")
    assert result.content == "Paris." and result.turns == 1
    call = engine.calls[0]
    assert call["tools"] is None and call["model"] == "m"
    assert [m["role"] for m in call["messages"]] == ["system", "user"]
    assert [m.role for m in result.messages] == ["system", "user", "assistant"]


def test_simple_agent_refuses_tools():
    with pytest.raises(UserError, match="orchestrator"):
        SimpleAgent(ScriptedEngine([]), tools=[CalculatorTool()])


def test_orchestrator_runs_calls_of_one_turn_together_and_feeds_results_back():
    engine = ScriptedEngine([
        reply(tool_calls=[tool_call("calculator", {"expression": "0.15*340"}, "a"),
                          tool_call("think", {"thought": "percent"}, "b")],
              usage={"prompt_tokens": 10, "completion_tokens": 5}),
        reply("15% of 340 is 51.", usage={"prompt_tokens": 20, "completion_tokens": 7}),
    ])
    result = OrchestratorAgent(engine, "m", tools=[CalculatorTool(), ThinkTool()]).run("15% of 340?")
    assert result.content == "15% of 340 is 51."
    assert result.turns == 2
    assert result.usage == {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    assert [(r.tool_name, r.content, r.success) for r in result.tool_results] == [
        ("calculator", "51.0", True), ("think", "percent", True)]
    names = {t["function"]["name"] for t in engine.calls[0]["tools"]}
    assert names == {"calculator", "think"}
    second = engine.calls[1]["messages"]
    assert second[1]["tool_calls"][0]["id"] == "a"
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in second[2:]] == [
        ("tool", "a", "51.0"), ("tool", "b", "percent")]
    assert result.metadata["max_turns_exceeded"] is False
    assert result.metadata["tool_calls"][0] == {"id": "a", "name": "calculator",
                                                "arguments": '{"expression": "0.15*340"}'}


def test_calls_of_one_turn_run_concurrently_through_execute_many():
    barrier = threading.Barrier(2, timeout=5)

    @tool(register=False)
    def meet(who: str) -> str:
        """Wait for the other call of this turn."""
        barrier.wait()  # only passes when both calls run at the same time
        return f"met {who}"

    engine = ScriptedEngine([reply(tool_calls=[tool_call("meet", {"who": "a"}),
                                               tool_call("meet", {"who": "b"})]), "both met"])
    result = OrchestratorAgent(engine, tools=[meet]).run("go")
    assert [r.content for r in result.tool_results] == ["met a", "met b"]


def test_tool_failures_are_fed_back_as_observations():
    engine = ScriptedEngine([
        reply(tool_calls=[tool_call("calculator", {"expression": "1/0"}),
                          tool_call("nope", {}), tool_call("calculator", "{not json")]),
        "Could not compute.",
    ])
    result = OrchestratorAgent(engine, tools=[CalculatorTool()]).run("1/0?")
    assert result.content == "Could not compute."
    assert [r.success for r in result.tool_results] == [False, False, False]
    fed = [m["content"] for m in engine.calls[1]["messages"] if m["role"] == "tool"]
    assert fed[0].startswith("ERROR (execution)")
    assert fed[1].startswith("ERROR (tool_not_found)") and "calculator" in fed[1]
    assert fed[2].startswith("ERROR (invalid_args)")


def test_max_turns_stops_the_loop():
    guard_free = [reply("step", tool_calls=[tool_call("calculator", {"expression": f"{i}+1"})])
                  for i in range(10)]
    engine = ScriptedEngine(guard_free)
    result = OrchestratorAgent(engine, tools=[CalculatorTool()], max_turns=3).run("loop")
    assert result.turns == 3 and len(engine.calls) == 3
    assert result.metadata["max_turns_exceeded"] is True
    assert result.content == "step"


def test_loop_guard_blocks_repeated_identical_calls_then_stops():
    same = reply(tool_calls=[tool_call("calculator", {"expression": "2+2"})])
    same_reordered = reply(tool_calls=[tool_call("calculator", '{ "expression" : "2+2" }')])
    engine = ScriptedEngine([same, same_reordered, same, same, "never reached"])
    result = OrchestratorAgent(engine, tools=[CalculatorTool()], max_repeats=2,
                               max_turns=10).run("2+2?")
    assert len(result.tool_results) == 2  # the 3rd and 4th identical calls never ran
    assert result.metadata["loop_detected"] is True
    assert len(engine.calls) == 4
    blocked = [m["content"] for m in engine.calls[3]["messages"] if m["role"] == "tool"][-1]
    assert blocked.startswith("loop guard:")


def test_loop_guard_counts_canonical_arguments():
    guard = LoopGuard(max_repeats=1)
    assert guard.check("t", {"a": 1, "b": 2}) is None
    assert guard.check("t", '{"b": 2, "a": 1}') is not None
    assert guard.check("t", {"a": 2}) is None
    assert guard.end_turn(False) is False and guard.end_turn(False) is True


def test_streaming_sends_answer_tokens_and_events_are_published():
    bus = EventBus()
    seen: list[str] = []
    bus.subscribe(None, lambda e: seen.append(e.type.value))
    tokens: list[str] = []
    engine = ScriptedEngine([reply(tool_calls=[tool_call("calculator", {"expression": "3*3"})]),
                             "The answer is nine."])
    executor = ToolExecutor([CalculatorTool()], bus=bus)
    result = OrchestratorAgent(engine, executor=executor, on_token=tokens.append).run("3*3?")
    assert len(tokens) > 1 and "".join(tokens) == "The answer is nine." == result.content
    assert all(c["stream"] for c in engine.calls)
    assert seen.count(EventType.INFERENCE_START.value) == 2
    assert seen.count(EventType.AGENT_TURN_END.value) == 2
    assert EventType.TOOL_CALL_END.value in seen


def test_engine_errors_propagate():
    engine = ScriptedEngine([EngineError("engine down")])
    with pytest.raises(EngineError, match="engine down"):
        OrchestratorAgent(engine).run("x")


def test_streamed_text_before_a_tool_call_does_not_run_into_the_answer():
    tokens: list[str] = []
    engine = ScriptedEngine([reply("Let me check.",
                                   tool_calls=[tool_call("calculator", {"expression": "3*3"})]),
                             "It is nine."])
    executor = ToolExecutor([CalculatorTool()])
    result = OrchestratorAgent(engine, executor=executor, on_token=tokens.append).run("3*3?")
    assert "".join(tokens) == "Let me check.\n\nIt is nine."
    assert result.content == "It is nine."
