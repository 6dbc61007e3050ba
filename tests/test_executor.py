"""ToolExecutor: validation, confirmation, timeouts, output limits, events, stats, concurrency."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from jarvis.core.events import Event, EventBus, EventType
from jarvis.core.types import ErrorType, TextBlock, ToolCall, ToolCallAction, ToolResult
from jarvis.errors import DuplicateNameError
from jarvis.tools.base import BaseTool, tool
from jarvis.tools.calculator import CalculatorTool
from jarvis.tools.context import ToolContext
from jarvis.tools.descriptions import build_tool_descriptions
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.spec import ToolSpec
from jarvis.tools.think import ThinkTool


class Recorder(BaseTool):
    """A reference-style tool that records every run of its body."""

    def __init__(self, name: str = "record", requires_confirmation: bool = False,
                 output: str = "ok", max_output_chars: int | None = None) -> None:
        self.name = name
        self.runs: list[dict[str, Any]] = []
        self.requires_confirmation = requires_confirmation
        self.output = output
        self.max_output_chars = max_output_chars

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description="Record the call.", parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
            "required": ["text"]}, requires_confirmation=self.requires_confirmation,
            max_output_chars=self.max_output_chars)

    def execute(self, **params: Any) -> ToolResult:
        self.runs.append(params)
        return ToolResult(tool_name=self.name, content=self.output)


def call(name: str, arguments: Any = "{}", id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


# --- lookup and argument checking -------------------------------------------------------------
def test_unknown_tool_is_a_failed_result_naming_the_available_tools():
    executor = ToolExecutor([CalculatorTool(), ThinkTool()])
    result = executor.execute(call("calcuator", '{"expression": "1"}'))
    assert not result.success and result.error_type is ErrorType.TOOL_NOT_FOUND
    assert "calcuator" in result.content and "calculator, think" in result.content
    assert result.call_id == "c1"


@pytest.mark.parametrize("arguments, field, words", [
    ('{"text": ', None, "not valid JSON"),
    ("[1, 2]", None, "must be a JSON object"),
    ('"just a string"', None, "must be a JSON object"),
    ("{}", "text", "missing required argument 'text'"),
    ('{"count": 1}', "text", "missing required argument 'text'"),
    ('{"text": 5}', "text", "'text': 5 is not of type 'string'"),
    ('{"text": "x", "count": -1}', "count", "'count'"),
    ('{"text": "x", "count": true}', "count", "'count'"),
    ("[" * 100_000 + "]" * 100_000, None, "not valid JSON"),
])
def test_bad_arguments_fail_naming_the_field_and_the_body_never_runs(arguments, field, words):
    recorder = Recorder()
    result = ToolExecutor([recorder]).execute(call("record", arguments))
    assert not result.success and result.error_type is ErrorType.INVALID_ARGS
    assert words in result.content, result.content
    assert result.metadata.get("field") == field
    assert recorder.runs == []


def test_dict_arguments_and_empty_string_are_accepted():
    recorder = Recorder()
    executor = ToolExecutor([recorder])
    assert executor.execute(call("record", {"text": "a"})).success
    assert executor.execute(call("record", "   ")).error_type is ErrorType.INVALID_ARGS  # {} lacks text
    assert recorder.runs == [{"text": "a"}]


def test_oversized_argument_string_is_rejected_before_parsing():
    recorder = Recorder()
    executor = ToolExecutor([recorder], max_argument_chars=100)
    result = executor.execute(call("record", json.dumps({"text": "x" * 200})))
    assert result.error_type is ErrorType.INVALID_ARGS and "limit is 100" in result.content
    assert recorder.runs == []


def test_tool_call_action_and_openai_dicts_are_accepted():
    executor = ToolExecutor([CalculatorTool()])
    action = ToolCallAction(tool_name="calculator", parameters={"expression": "6*7"},
                            tool_call_id="act-1")
    result = executor.execute(action)
    assert result.success and result.content == "42" and result.call_id == "act-1"
    wire = {"id": "w1", "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'}}
    assert executor.execute(wire).content == "2"
    generated = executor.execute(ToolCallAction(tool_name="calculator",
                                                parameters={"expression": "1"}))
    assert generated.call_id and generated.call_id.startswith("call_")


def test_a_malformed_call_object_is_a_programming_error():
    with pytest.raises(TypeError):
        ToolExecutor([]).execute(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ToolExecutor([]).execute_many([call("x"), 42])  # type: ignore[list-item]


def test_tool_exception_becomes_an_execution_failure():
    @tool(register=False)
    def explode(reason: str) -> str:
        """Raise."""
        raise RuntimeError(reason)

    result = ToolExecutor([explode]).execute(call("explode", {"reason": "kaboom"}))
    assert not result.success and result.error_type is ErrorType.EXECUTION
    assert "RuntimeError: kaboom" in result.content
    assert result.metadata["exception"] == "RuntimeError"


def test_unusable_return_value_is_an_execution_failure():
    @tool(register=False)
    def weird(x: int) -> dict:
        """Return a broken image."""
        return {"observation": "o", "image": {"no": "data"}}

    result = ToolExecutor([weird]).execute(call("weird", {"x": 1}))
    assert result.error_type is ErrorType.EXECUTION and "unusable value" in result.content


def test_failed_result_from_the_tool_gets_an_error_type():
    @tool(register=False)
    def soft_fail(x: int) -> ToolResult:
        """Fail softly."""
        return ToolResult(tool_name="soft_fail", content="no luck", success=False)

    result = ToolExecutor([soft_fail]).execute(call("soft_fail", {"x": 1}))
    assert result.error_type is ErrorType.EXECUTION and result.content == "no luck"


def test_duplicate_names_in_one_executor_are_an_error():
    with pytest.raises(DuplicateNameError):
        ToolExecutor([Recorder(), Recorder()])
    one = Recorder()
    executor = ToolExecutor([one, one])  # the same instance twice is fine
    assert executor.tools == [one]


def test_catalog_methods():
    calc, think = CalculatorTool(), ThinkTool()
    executor = ToolExecutor([calc])
    executor.add(think)
    assert [s.name for s in executor.available_tools()] == ["calculator", "think"]
    assert executor.get_openai_tools()[1]["function"]["name"] == "think"
    assert executor.get_tool("think") is think and executor.get_tool("x") is None
    executor.remove("think")
    assert executor.tools == [calc]
    assert executor.execute(call("think", {"thought": "t"})).error_type is ErrorType.TOOL_NOT_FOUND


# --- confirmation -----------------------------------------------------------------------------
def test_confirmation_without_approver_is_denied():
    recorder = Recorder(requires_confirmation=True)
    result = ToolExecutor([recorder]).execute(call("record", {"text": "rm -rf"}))
    assert not result.success and result.error_type is ErrorType.DENIED
    assert "no approver" in result.content
    assert recorder.runs == []


def test_approver_false_denies_and_true_runs():
    recorder = Recorder(requires_confirmation=True)
    asked: list[tuple[str, dict[str, Any]]] = []

    def approver(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
        asked.append((spec.name, arguments))
        return arguments["text"] == "safe"

    executor = ToolExecutor([recorder], approver=approver)
    denied = executor.execute(call("record", {"text": "unsafe"}))
    assert denied.error_type is ErrorType.DENIED and recorder.runs == []
    allowed = executor.execute(call("record", {"text": "safe"}))
    assert allowed.success and recorder.runs == [{"text": "safe"}]
    assert asked == [("record", {"text": "unsafe"}), ("record", {"text": "safe"})]


def test_approver_that_raises_denies():
    recorder = Recorder(requires_confirmation=True)

    def broken(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
        raise OSError("no terminal")

    result = ToolExecutor([recorder], approver=broken).execute(call("record", {"text": "x"}))
    assert result.error_type is ErrorType.DENIED and "no terminal" in result.content
    assert recorder.runs == []


def test_tools_without_confirmation_never_ask():
    def approver(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
        raise AssertionError("asked")

    assert ToolExecutor([Recorder()], approver=approver).execute(call("record", {"text": "x"})).success


# --- timeouts ---------------------------------------------------------------------------------
class Hang(BaseTool):
    """Blocks until released; records that it started and whether it finished."""

    def __init__(self, timeout: float = 0.3) -> None:
        self.timeout = timeout
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="hang", description="Hang.", timeout_seconds=self.timeout)

    def execute(self, **params: Any) -> ToolResult:
        self.started.set()
        self.release.wait(30)
        self.finished.set()
        return ToolResult("hang", "released")


def test_timeout_result_arrives_on_time_while_the_tool_keeps_running():
    hang = Hang(timeout=0.3)
    bus = EventBus()
    timeouts: list[Event] = []
    bus.subscribe(EventType.TOOL_TIMEOUT, timeouts.append)
    executor = ToolExecutor([hang], bus)
    start = time.perf_counter()
    result = executor.execute(call("hang", id="h1"))
    elapsed = time.perf_counter() - start
    try:
        assert not result.success and result.error_type is ErrorType.TIMEOUT
        assert elapsed < 0.3 + 5  # the tool goes on for 30 s; the margin is for a loaded machine
        assert "timed out after 0.3 s" in result.content
        assert hang.started.is_set() and not hang.finished.is_set()  # still running
        assert timeouts[0].data["call_id"] == "h1"
        assert executor.stats()["hang"]["timeouts"] == 1
    finally:
        hang.release.set()
    assert hang.finished.wait(5)


def test_executor_default_timeout_applies_when_the_spec_has_none():
    release = threading.Event()

    @tool(register=False)
    def nap(seconds: float) -> str:
        """Sleep."""
        release.wait(seconds)
        return "done"

    executor = ToolExecutor([nap], default_timeout=0.2)
    start = time.perf_counter()
    try:
        result = executor.execute(call("nap", {"seconds": 30}))
        # Far below the 30 s nap; the margin is for a loaded machine.
        assert result.error_type is ErrorType.TIMEOUT and time.perf_counter() - start < 5
    finally:
        release.set()  # the abandoned thread ends (they are counted per process)
    assert executor.execute(call("nap", {"seconds": 0})).content == "done"


def test_hung_tool_does_not_fail_unrelated_tools_in_the_same_batch():
    hang = Hang(timeout=0.3)
    executor = ToolExecutor([hang, CalculatorTool(), ThinkTool()])
    try:
        start = time.perf_counter()
        results = executor.execute_many([
            call("hang", id="a"),
            call("calculator", {"expression": "2+2"}, id="b"),
            call("think", {"thought": "meanwhile"}, id="c"),
        ])
        assert time.perf_counter() - start < 0.3 + 5  # the hang lasts 30 s
    finally:
        hang.release.set()
    assert [r.call_id for r in results] == ["a", "b", "c"]
    assert results[0].error_type is ErrorType.TIMEOUT
    assert results[1].success and results[1].content == "4"
    assert results[2].success and results[2].content == "meanwhile"


def test_async_tool_timeout_in_sync_and_async_execution():
    release = threading.Event()

    @tool(register=False, timeout=0.2)
    async def stall(seconds: float) -> str:
        """Sleep asynchronously."""
        end = time.monotonic() + seconds
        while not release.is_set() and time.monotonic() < end:
            await asyncio.sleep(0.01)
        return "late"

    executor = ToolExecutor([stall])

    async def main() -> ToolResult:
        return await executor.aexecute(call("stall", {"seconds": 30}))

    try:
        # Far below the 30 s stall; the margin is for a loaded machine.
        start = time.perf_counter()
        assert executor.execute(call("stall", {"seconds": 30})).error_type is ErrorType.TIMEOUT
        assert time.perf_counter() - start < 5
        start = time.perf_counter()
        assert asyncio.run(main()).error_type is ErrorType.TIMEOUT
        assert time.perf_counter() - start < 5
    finally:
        release.set()  # the abandoned thread of the sync call ends


# --- output limits ----------------------------------------------------------------------------
def test_long_output_is_cut_with_a_marker_saying_how_much():
    recorder = Recorder(output="x" * 1500)
    result = ToolExecutor([recorder], max_output_chars=1000).execute(call("record", {"text": "a"}))
    assert result.success
    assert result.content.startswith("x" * 1000)
    assert "[... output truncated: 500 of 1500 characters cut ...]" in result.content
    assert result.metadata["truncated_chars"] == 500


def test_spec_output_limit_overrides_the_executor_default():
    recorder = Recorder(output="y" * 100, max_output_chars=10)
    result = ToolExecutor([recorder]).execute(call("record", {"text": "a"}))
    assert "90 of 100 characters cut" in result.content


def test_text_blocks_are_cut_too():
    @tool(register=False, max_output_chars=5)
    def chart(x: int) -> dict:
        """Chart."""
        return {"observation": "abcdefghij", "image": "aW1n"}

    result = ToolExecutor([chart]).execute(call("chart", {"x": 1}))
    text = result.blocks[0]
    assert isinstance(text, TextBlock) and text.text.startswith("abcde\n[... output truncated: 5")
    assert result.blocks[1].data == "aW1n"


def test_short_output_is_untouched():
    result = ToolExecutor([Recorder(output="short")], max_output_chars=5).execute(
        call("record", {"text": "a"}))
    assert result.content == "short" and "truncated_chars" not in result.metadata


# --- events -----------------------------------------------------------------------------------
def test_events_carry_call_id_tool_arguments_success_and_latency():
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(None, events.append)
    executor = ToolExecutor([CalculatorTool()], bus, run_id="r1")
    result = executor.execute(call("calculator", '{"expression": "2+2"}', id="call_1"))
    assert [e.type for e in events] == [EventType.TOOL_CALL_START, EventType.TOOL_CALL_END]
    start, end = events
    assert start.data["call_id"] == end.data["call_id"] == "call_1"
    assert start.data["tool_name"] == end.data["tool_name"] == "calculator"
    assert start.data["arguments"] == end.data["arguments"] == {"expression": "2+2"}
    assert end.data["success"] is True and end.data["latency"] == result.latency_seconds > 0
    assert end.data["run_id"] == "r1" and end.data["result"] is result


def test_rejected_calls_publish_an_end_event_with_the_reason():
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(EventType.TOOL_CALL_END, events.append)
    ToolExecutor([CalculatorTool()], bus).execute(call("nope", '{"a": 1}', id="x1"))
    assert events[0].data["success"] is False
    assert events[0].data["error_type"] == "tool_not_found" and events[0].data["call_id"] == "x1"


def test_a_raising_subscriber_never_breaks_execution():
    bus = EventBus()

    def broken(event: Event) -> None:
        raise ValueError("bad subscriber")

    bus.subscribe(None, broken)
    result = ToolExecutor([CalculatorTool()], bus).execute(call("calculator", {"expression": "1+2"}))
    assert result.success and result.content == "3"


# --- stats and measured latency in descriptions -------------------------------------------------
def test_stats_count_calls_failures_and_median_latency():
    @tool(register=False)
    def timed(seconds: float) -> str:
        """Sleep a bit."""
        time.sleep(seconds)
        return "ok"

    executor = ToolExecutor([timed])
    for seconds in (0.01, 0.03, 0.05):
        assert executor.execute(call("timed", {"seconds": seconds})).success
    executor.execute(call("timed", {"seconds": "soon"}))  # rejected: counted, no latency sample
    stats = executor.stats()["timed"]
    assert stats["calls"] == 4 and stats["failures"] == 1
    assert 0.025 < stats["median_latency"] < 1.0  # 0.03 s asleep; not the 0.01 s of the fastest
    text = build_tool_descriptions([timed], include_cost=True)
    assert "Cost: $0.0000 per call" in text
    assert "(median of 3 runs)" in text
    measured = float(text.split("Latency: ~")[1].split(" s")[0])
    assert measured == pytest.approx(stats["median_latency"], rel=0.01)


# --- execute_many / async -----------------------------------------------------------------------
class Meeting:
    """Calls that wait (at most 10 s) until `parties` of them are in progress at once: calls
    run one after another each wait alone. Concurrency observed, not timed (a wall-clock bound
    is flaky on a loaded machine; the bench measures the real figures)."""

    def __init__(self, parties: int) -> None:
        self.lock = threading.Lock()
        self.arrived = 0
        self.parties = parties
        self.everyone = threading.Event()

    def arrive(self) -> None:
        with self.lock:
            self.arrived += 1
            if self.arrived >= self.parties:
                self.everyone.set()

    def wait(self, tag: str) -> str:
        self.arrive()
        return tag if self.everyone.wait(10) else f"{tag} alone"

    async def await_(self, tag: str) -> str:
        self.arrive()
        end = time.monotonic() + 10
        while not self.everyone.is_set() and time.monotonic() < end:
            await asyncio.sleep(0.005)
        return tag if self.everyone.is_set() else f"{tag} alone"


def test_execute_many_runs_concurrently_and_keeps_call_order():
    meeting = Meeting(8)

    @tool(register=False)
    def meet(i: int) -> str:
        """Wait for the other calls, then finish in reverse order."""
        tag = meeting.wait(f"t{i}")
        time.sleep(0.02 * (8 - i))
        return tag

    executor = ToolExecutor([meet])
    results = executor.execute_many([call("meet", {"i": i}, id=f"id{i}") for i in range(8)])
    assert [r.content for r in results] == [f"t{i}" for i in range(8)]
    assert [r.call_id for r in results] == [f"id{i}" for i in range(8)]


class Gauge(BaseTool):
    """Tracks how many of its calls run at the same time."""

    def __init__(self, name: str = "gauge", sequential: bool = False) -> None:
        self.name = name
        self.sequential = sequential  # type: ignore[misc]
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.order: list[int] = []

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description="Gauge.", parameters={
            "type": "object", "properties": {"i": {"type": "integer"}}})

    def execute(self, **params: Any) -> ToolResult:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.order.append(params["i"])
        time.sleep(0.05)
        with self.lock:
            self.active -= 1
        return ToolResult(self.name, str(params["i"]))


def test_execute_many_bounds_concurrency():
    gauge = Gauge()
    executor = ToolExecutor([gauge], max_concurrency=2)
    results = executor.execute_many([call("gauge", {"i": i}, id=str(i)) for i in range(6)])
    assert [r.content for r in results] == [str(i) for i in range(6)]
    assert gauge.peak == 2


def test_sequential_tool_calls_never_overlap_and_keep_their_order():
    serial, free = Gauge("serial", sequential=True), Gauge("free")
    executor = ToolExecutor([serial, free])
    calls = []
    for i in range(4):
        calls.append(call("serial", {"i": i}, id=f"s{i}"))
        calls.append(call("free", {"i": i}, id=f"f{i}"))
    results = executor.execute_many(calls)
    assert [r.call_id for r in results] == [c.id for c in calls]
    assert serial.peak == 1 and serial.order == [0, 1, 2, 3]
    assert free.peak > 1


def test_execute_many_mixes_failures_in_order():
    executor = ToolExecutor([CalculatorTool()])
    results = executor.execute_many([call("calculator", {"expression": "1/0"}, id="a"),
                                     call("missing", id="b"),
                                     call("calculator", {"expression": "3"}, id="c")])
    assert [(r.call_id, r.success) for r in results] == [("a", False), ("b", False), ("c", True)]
    assert executor.execute_many([]) == []


def test_aexecute_and_aexecute_many():
    meeting = Meeting(4)  # 3 async calls and 1 thread's, in progress at once

    @tool(register=False)
    async def anap(tag: str) -> str:
        """Wait asynchronously for the others, then return the tag."""
        return await meeting.await_(tag)

    @tool(register=False)
    def tmeet(tag: str) -> str:
        """Wait in a thread for the others, then return the tag."""
        return meeting.wait(tag)

    serial = Gauge("serial", sequential=True)
    executor = ToolExecutor([anap, tmeet, serial, CalculatorTool()], max_concurrency=4)

    async def main() -> tuple[ToolResult, list[ToolResult]]:
        single = await executor.aexecute(call("calculator", {"expression": "2**10"}))
        many = await executor.aexecute_many(
            [call("anap", {"tag": f"a{i}"}, id=f"a{i}") for i in range(3)]
            + [call("tmeet", {"tag": "s"}, id="s")]
            + [call("serial", {"i": i}, id=f"q{i}") for i in range(3)]
            + [call("nope", id="n")])
        return single, many

    single, many = asyncio.run(main())
    assert single.content == "1024"
    assert [r.call_id for r in many] == ["a0", "a1", "a2", "s", "q0", "q1", "q2", "n"]
    assert [r.content for r in many[:4]] == ["a0", "a1", "a2", "s"]  # all four met
    assert many[-1].error_type is ErrorType.TOOL_NOT_FOUND
    assert serial.peak == 1 and serial.order == [0, 1, 2]


def test_sync_execute_of_async_tool_inside_a_running_loop_fails_cleanly():
    @tool(register=False)
    async def quick(x: int) -> str:
        """Return quickly."""
        return str(x)

    executor = ToolExecutor([quick])

    async def main() -> ToolResult:
        # Sync execute from inside a loop runs the coroutine on the tool's own thread.
        return executor.execute(call("quick", {"x": 1}))

    assert asyncio.run(main()).content == "1"


# --- per-call resources are released when a lone call ends ------------------------------------
class Handle:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_lone_call_resources_are_released_when_the_call_ends():
    from jarvis.resources import ResourceManager, ResourceSpec

    manager = ResourceManager()
    handles: list[Handle] = []

    def factory() -> Handle:
        handles.append(Handle())
        return handles[-1]

    spec = ResourceSpec(kind="test-handle", factory=factory, max_size=1)

    @tool(register=False)
    def use_handle(n: int, ctx: ToolContext) -> str:
        """Acquire a pooled handle."""
        ctx.resources = manager
        ctx.acquire(spec, timeout=1)
        return str(n)

    @tool(register=False)
    async def ause_handle(n: int, ctx: ToolContext) -> str:
        """Acquire a pooled handle asynchronously."""
        ctx.resources = manager
        await ctx.aacquire(spec, timeout=1)
        return str(n)

    executor = ToolExecutor([use_handle, ause_handle])
    # max_size=1: the second call could only get a handle if the first was released
    for i in range(3):
        assert executor.execute(call("use_handle", {"n": i})).content == str(i)
        assert manager.owners() == []
    assert asyncio.run(executor.aexecute(call("ause_handle", {"n": 7}))).content == "7"
    assert manager.owners() == []
    assert all(h.closed for h in handles) and len(handles) == 4


def test_rejections_quoting_huge_model_input_stay_short():
    executor = ToolExecutor([Recorder()])
    huge_name = executor.execute(call("x" * 100_000))
    assert huge_name.error_type is ErrorType.TOOL_NOT_FOUND and len(huge_name.content) < 2_500
    wrong = executor.execute(call("record", {"text": ["y" * 100_000]}))
    assert wrong.error_type is ErrorType.INVALID_ARGS and len(wrong.content) < 2_500
    assert "output truncated" in wrong.content and "'text'" in wrong.content


def test_dict_subclasses_are_accepted_as_arguments():
    from collections import OrderedDict

    recorder = Recorder()
    assert ToolExecutor([recorder]).execute(call("record", OrderedDict(text="a"))).success


def test_a_tool_calling_sys_exit_is_a_failed_result_not_the_end_of_the_run():
    import sys

    @tool(register=False)
    def quitter(code: int) -> str:
        """Exits."""
        sys.exit(code)

    executor = ToolExecutor([quitter])
    result = executor.execute(ToolCall("1", "quitter", {"code": 3}))
    assert not result.success and result.error_type is ErrorType.EXECUTION
    assert "SystemExit" in result.content
    result = asyncio.run(executor.aexecute(ToolCall("2", "quitter", {"code": 4})))
    assert not result.success and "SystemExit" in result.content


def test_approvals_of_one_turn_are_asked_one_at_a_time():
    active: list[int] = []
    overlap: list[bool] = []

    def approver(spec: ToolSpec, arguments: dict[str, Any]) -> bool:
        active.append(1)
        overlap.append(len(active) > 1)
        time.sleep(0.02)
        active.pop()
        return True

    @tool(register=False, requires_confirmation=True)
    def guarded(n: int) -> str:
        """Needs a yes."""
        return str(n)

    executor = ToolExecutor([guarded], approver=approver)
    results = executor.execute_many([ToolCall(str(i), "guarded", {"n": i}) for i in range(4)])
    assert [r.content for r in results] == ["0", "1", "2", "3"]
    assert overlap == [False] * 4
