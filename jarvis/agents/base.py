"""BaseAgent: what every agent loop shares (engine calls, streaming, usage, events, results).

An agent alternates engine calls and tool calls. Every tool call goes through its
ToolExecutor; tool failures come back as observations the model reads, never exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from jarvis.agents.loop_guard import LoopGuard
from jarvis.core.events import EventBus, EventType
from jarvis.core.types import (
    AgentResult,
    Message,
    TextBlock,
    ToolCall,
    ToolResult,
    image_placeholder,
)
from jarvis.engine.base import (
    GenerateResult,
    InferenceEngine,
    add_usage,
    empty_usage,
    generate_reply,
    stream_reply,
)
from jarvis.tools.base import BaseTool
from jarvis.tools.budget import BudgetExhausted
from jarvis.tools.executor import ToolExecutor

TokenHandler = Callable[[str], Any]
DEFAULT_MAX_TOOL_CALLS_PER_TURN = 32


class BaseAgent:
    """Shared machinery; subclasses implement `_loop`.

    Args:
        engine: an InferenceEngine.
        model: the model name passed on every request ("" lets the engine choose).
        tools: tool instances (wrapped in a ToolExecutor), or pass `executor`.
        executor: a ToolExecutor to run tools through (its bus and approver apply).
        bus: EventBus for AGENT_TURN_* and INFERENCE_* events (default: the executor's).
        system: the system prompt.
        max_turns: engine calls allowed per run.
        max_repeats: identical tool calls allowed per run (see LoopGuard).
        max_tool_calls_per_turn: tool calls run from one model reply; each call beyond it
            gets a failed result (error_type denied) the model reads.
        on_token: called with each piece of the answer as it streams (None: no streaming).
        cancel: an event (anything with `is_set()`, e.g. threading.Event) that stops the run
            with RunCancelled at its next boundary once set: before each engine call, between
            the chunks of a streamed reply, and before each turn's tool calls. An engine or
            tool call already under way finishes first (bounded by its own timeout).
    """

    agent_id: ClassVar[str] = "base"
    uses_tools: ClassVar[bool] = True
    # Set for a structured answer (jarvis.agents.structured): the engine's response_format,
    # or the final_answer tool whose valid call ends the run.
    response_format: dict[str, Any] | None = None
    final_tool: Any = None
    accepts_tools: ClassVar[bool] = True  # OpenJarvis's name for uses_tools; kept equal

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "accepts_tools" in cls.__dict__ and "uses_tools" not in cls.__dict__:
            cls.uses_tools = cls.accepts_tools
        else:
            cls.accepts_tools = cls.uses_tools

    def __init__(self, engine: InferenceEngine, model: str = "", *,
                 tools: Iterable[BaseTool] | None = None, executor: ToolExecutor | None = None,
                 bus: EventBus | None = None, system: str | None = None, max_turns: int = 10,
                 max_repeats: int = 2, temperature: float | None = None,
                 max_tokens: int | None = None, on_token: TokenHandler | None = None,
                 max_tool_calls_per_turn: int = DEFAULT_MAX_TOOL_CALLS_PER_TURN,
                 cancel: Any = None) -> None:
        self.engine = engine
        self.model = model
        self.executor = executor if executor is not None else ToolExecutor(tools or (), bus=bus)
        if executor is not None and tools:
            for t in tools:
                self.executor.add(t)
        self.bus = bus if bus is not None else self.executor.bus
        self.system = system
        self.max_turns = max(1, int(max_turns))
        self.max_repeats = max_repeats
        self.max_tool_calls_per_turn = max(1, int(max_tool_calls_per_turn))
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.on_token = on_token
        self.cancel = cancel

    # --- the public entry point --------------------------------------------------------------
    def run(self, query: str, context: Any = None, *,
            history: Sequence[Message] | None = None) -> AgentResult:
        """Answer `query` (after the optional earlier `history`); `context` is an
        AgentContext (jarvis.agents.context: earlier messages, memory results, metadata)."""
        state = _RunState(LoopGuard(self.max_repeats))
        state.query = query
        messages = self._initial_messages(query, history, context)
        try:
            content = self._loop(messages, state)
        except BudgetExhausted as stop:  # the run cannot go on inside its budget
            state.flags["budget_exceeded"] = True
            content = f"Stopped: the budget ran out before a final answer ({stop.message})."
        metadata = state.metadata()
        if context is not None and context.metadata:
            metadata["context"] = dict(context.metadata)
        return AgentResult(content=content, tool_results=state.tool_results, turns=state.turns,
                           usage=state.usage, messages=messages, metadata=metadata)

    def resume(self, messages: list[Message], run: dict[str, Any],
               pending: Sequence[dict[str, Any]]) -> AgentResult:
        """Continue a run that parked (jarvis.approvals): `messages` is its transcript, `run`
        its state then (turns, usage, tool_results as ToolResults, tool_calls, flags, model,
        inference_seconds, query), `pending` the calls it parked on ({call_id, tool,
        arguments, message_index}). They are run again through the executor, whose
        person-needed hook now has the person's answers (approved: the call runs; denied:
        the model reads a `denied` result), their answers replace the placeholders, and the
        loop goes on with the turns left."""
        state = _RunState(LoopGuard(self.max_repeats))
        state.query = str(run.get("query") or "")
        state.turns = int(run.get("turns") or 0)
        state.usage.update(run.get("usage") or {})
        state.model = str(run.get("model") or "")
        state.flags.update(run.get("flags") or {})
        state.inference_seconds = list(run.get("inference_seconds") or [])
        state.tool_results = list(run.get("tool_results") or [])
        state.tool_calls = list(run.get("tool_calls") or [])
        calls = [ToolCall(id=str(p["call_id"]), name=str(p["tool"]), arguments=p["arguments"])
                 for p in pending]
        self._check_cancelled()
        results = self.executor.execute_many(calls)
        for item, call, result in zip(pending, calls, results, strict=True):
            index = item.get("message_index")
            if isinstance(index, int) and 0 <= index < len(messages):
                old = messages[index]
                text = observation_text(result)
                messages[index] = Message(role=old.role, content=(
                    text if old.role == "tool" else f"Observation: {text}"),
                    tool_call_id=old.tool_call_id, name=old.name)
            for i, earlier in enumerate(state.tool_results):
                if earlier.call_id == call.id:
                    state.tool_results[i] = result
                    break
            else:
                state.record(call, result)
        content = "" if self._park(messages, state) else self._loop(messages, state)
        return AgentResult(content=content, tool_results=state.tool_results, turns=state.turns,
                           usage=state.usage, messages=messages, metadata=state.metadata())

    def _park(self, messages: list[Message], state: _RunState) -> bool:
        """After a turn: whether a call of it was parked (its person-needed hook answered
        PARK); then the run stops here, and `state.flags["parked"]` lists those calls with
        where their answers go in `messages` (the caller keeps the run to continue it)."""
        pending = []
        for result, call in zip(state.tool_results, state.tool_calls, strict=False):
            if result.success or not result.metadata.get("parked"):
                continue
            index = None
            for i in range(len(messages) - 1, -1, -1):
                message = messages[i]
                if (message.role == "tool" and message.tool_call_id == result.call_id) or (
                        message.role == "user" and message.text.startswith("Observation:")):
                    index = i
                    break
            pending.append({"call_id": result.call_id or call["id"], "tool": call["name"],
                            "arguments": call["arguments"], "message_index": index,
                            "approval": result.metadata.get("approval")})
        if pending:
            state.flags["parked"] = pending
        return bool(pending)

    def _initial_messages(self, query: str, history: Sequence[Message] | None,
                          context: Any = None) -> list[Message]:
        messages: list[Message] = []
        system = self._system_prompt()
        if context is not None:
            from jarvis.agents.context import apply_context

            names = [spec.name for spec in self.executor.available_tools()]
            system, history = apply_context(context, system, history, names)
        if system:
            messages.append(Message(role="system", content=system))
        messages.extend(history or ())
        messages.append(Message(role="user", content=query))
        return messages

    def _system_prompt(self) -> str:
        return self.system or ""

    def _loop(self, messages: list[Message], state: _RunState) -> str:
        raise NotImplementedError

    # --- helpers for subclasses --------------------------------------------------------------
    def _generate(self, messages: list[Message], state: _RunState,
                  tools: list[dict[str, Any]] | None = None,
                  emit: TokenHandler | None = None) -> GenerateResult:
        """One engine call: streamed into `emit` when given, counted into the run's usage."""
        self._check_cancelled()
        fence = getattr(self.executor, "fence", None)
        if fence is not None:  # a scheduled run that lost its lease calls its model no more
            fence.check()
        budget = getattr(self.executor, "budget", None)
        if budget is not None:  # raises BudgetExhausted when the call would overrun
            budget.before_engine(messages)
        state.turns += 1
        bus = self.bus
        if bus is not None:
            bus.publish(EventType.AGENT_TURN_START, {"agent": self.agent_id, "turn": state.turns,
                                                     "input": state.query,
                                                     "run_id": self.executor.run_id})
            bus.publish(EventType.INFERENCE_START, {"model": self.model, "turn": state.turns,
                                                    "engine": getattr(self.engine, "engine_id", ""),
                                                    "run_id": self.executor.run_id})
        start = time.perf_counter()
        kwargs = {"tools": tools or None, "model": self.model or None,
                  "temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.response_format is not None:  # only then: other engines never see the key
            kwargs["response_format"] = self.response_format
        if emit is None:
            result = generate_reply(self.engine, messages, **kwargs)
        else:
            result = stream_reply(self.engine, messages, emit, check=self._check_cancelled,
                                  **kwargs)
        add_usage(state.usage, result.usage)
        state.inference_seconds.append(time.perf_counter() - start)
        if budget is not None:
            budget.after_engine(result.usage, state.inference_seconds[-1])
        if result.model:
            state.model = result.model
        if bus is not None:
            bus.publish(EventType.INFERENCE_END, {
                "model": result.model, "usage": dict(result.usage), "turn": state.turns,
                "latency": time.perf_counter() - start, "tool_calls": len(result.tool_calls),
                "finish_reason": result.finish_reason, "run_id": self.executor.run_id})
        return result

    def _check_cancelled(self) -> None:
        """Raise RunCancelled once the run's cancel event is set (called at every boundary)."""
        if self.cancel is not None and self.cancel.is_set():
            from jarvis.errors import RunCancelled

            raise RunCancelled("the run was cancelled")

    def _end_turn(self, state: _RunState) -> None:
        if self.bus is not None:
            self.bus.publish(EventType.AGENT_TURN_END, {"agent": self.agent_id, "turn": state.turns,
                                                        "turns": state.turns,
                                                        "run_id": self.executor.run_id})


def refused_call(call: ToolCall, limit: int, more: int = 0) -> ToolResult:
    """The failed result of a call beyond the per-reply limit (it never ran), standing also
    for the `more` calls after it."""
    from jarvis.core.types import ErrorType

    name = call.name if isinstance(call.name, str) else str(call.name)
    result = ToolResult.failure(
        name[:100], f"refused: more than {limit} tool calls in one reply; only the first "
        f"{limit} ran (this call and {more} more did not run). Make at most {limit} calls per "
        f"reply (the limit is [agent] max_tool_calls_per_turn)", ErrorType.DENIED, limit=limit,
        refused=more + 1)
    result.call_id = call.id
    return result


def observation_text(result: ToolResult) -> str:
    """What the model reads for a tool result (failures are marked as such). Images the tool
    returned appear as placeholders (`[image: image/png, 12 KB]`), never as their data."""
    text = result.content
    missing = [p for p in map(image_placeholder, result.images()) if p not in text]
    if missing:
        text = "\n".join([text, *missing]) if text else "\n".join(missing)
    if result.success:
        return text
    kind = result.error_type.value if result.error_type else "error"
    return f"ERROR ({kind}): {text}"


def image_message(results: Sequence[tuple[ToolCall, ToolResult]]) -> Message | None:
    """A user message carrying the images of one turn's tool results, or None without images.

    The OpenAI format takes images only in user messages (never in tool messages), so they
    follow the turn's tool messages; the engine sends them as image parts to a model that
    takes images and as placeholders to one that does not.
    """
    parts: list[Any] = []
    for call, result in results:
        images = result.images()
        if images:
            noun = "image" if len(images) == 1 else f"{len(images)} images"
            parts.append(TextBlock(f"The {noun} returned by tool {call.name} (call {call.id}):"))
            parts.extend(images)
    return Message(role="user", parts=parts) if parts else None


class _RunState:
    """Mutable bookkeeping for one run."""

    __slots__ = ("guard", "tool_results", "tool_calls", "turns", "usage", "model", "flags",
                 "inference_seconds", "query")

    def __init__(self, guard: LoopGuard) -> None:
        self.guard = guard
        self.query = ""
        self.tool_results: list[ToolResult] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.turns = 0
        self.usage: dict[str, int] = empty_usage()
        self.model = ""
        self.flags: dict[str, Any] = {}
        self.inference_seconds: list[float] = []

    def record(self, call: ToolCall, result: ToolResult) -> None:
        self.tool_results.append(result)
        self.tool_calls.append({"id": result.call_id or call.id, "name": call.name,
                                "arguments": call.arguments})

    def metadata(self) -> dict[str, Any]:
        data = dict(self.flags)
        data.setdefault("max_turns_exceeded", False)
        data["tool_calls"] = self.tool_calls
        data["inference_seconds"] = [round(s, 6) for s in self.inference_seconds]
        if self.guard.blocked:
            data["blocked_calls"] = list(self.guard.blocked)
        if self.model:
            data["model"] = self.model
        return data
