"""The orchestrator agent: native function calling.

Each turn the model gets the tools in OpenAI function format; the tool calls of one turn run
together through `ToolExecutor.execute_many`, their results go back as tool messages, and
the loop ends when the model answers without calling a tool (or at max_turns).

`mode="structured"` is for engines without native function calling: the tools are described
in the system prompt (build_tool_descriptions) and the calls parsed from the reply's text, the
way the react agent does it.
"""

from __future__ import annotations

from typing import Any

from jarvis.agents.base import (
    BaseAgent,
    _RunState,
    image_message,
    observation_text,
    refused_call,
)
from jarvis.agents.hooks import ToolCallHook, check_call
from jarvis.agents.structured import final_answer
from jarvis.core.types import AgentResult, Message, ToolCall, ToolResult
from jarvis.errors import UserError

MODES = ("function_calling", "structured")


class OrchestratorAgent(BaseAgent):
    """Native tool calling through the engine's `tools` parameter (or, with
    `mode="structured"`, tools described in the prompt and calls parsed from text)."""

    agent_id = "orchestrator"

    def __init__(self, *args: Any, mode: str = "function_calling",
                 before_tool_call: ToolCallHook | None = None, parallel_tools: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if mode not in MODES:
            raise UserError(f"unknown orchestrator mode {mode!r}; valid modes: {', '.join(MODES)}")
        if before_tool_call is not None and not callable(before_tool_call):
            raise UserError("before_tool_call must be a function (tool_name, arguments) -> bool")
        self.mode = mode
        # Asked before every call, in the model's order; fails closed (jarvis.agents.hooks).
        self.before_tool_call = before_tool_call
        # False: the calls of one reply run one after another, in order.
        self.parallel_tools = bool(parallel_tools)

    def run(self, query: str, context: Any = None, *, history: Any = None) -> AgentResult:
        if self.mode != "structured":
            return super().run(query, context, history=history)
        from jarvis.agents.react import ReActAgent

        prompted = ReActAgent(self.engine, self.model, executor=self.executor, bus=self.bus,
                              system=self.system, max_turns=self.max_turns,
                              max_repeats=self.max_repeats, temperature=self.temperature,
                              max_tokens=self.max_tokens, on_token=self.on_token,
                              cancel=self.cancel)
        prompted.agent_id = self.agent_id  # events name the agent the user built
        prompted.before_tool_call = self.before_tool_call
        return prompted.run(query, context, history=history)

    def _loop(self, messages: list[Message], state: _RunState) -> str:
        tools = self.executor.get_openai_tools() or None
        last_text = ""
        streamed_before = False  # text already streamed by an earlier turn that called tools
        for _ in range(self.max_turns - state.turns):  # a continued run has fewer left
            emit = self.on_token
            if emit is not None and streamed_before:
                emit = _Separated(emit)
            result = self._generate(messages, state, tools=tools, emit=emit)
            excess = len(result.tool_calls) - self.max_tool_calls_per_turn
            if excess > 0:
                # Keep the calls that may run and the first refused one (answered with the
                # refusal): every call in the transcript is answered, and a reply of 200 000
                # calls costs no more memory, work or next-request size than one of 33.
                result.tool_calls = list(result.tool_calls[:self.max_tool_calls_per_turn + 1])
                state.flags["refused_tool_calls"] = (state.flags.get("refused_tool_calls", 0)
                                                     + excess)
            messages.append(result.to_message())
            if result.content:
                last_text = result.content
            if not result.tool_calls:
                self._end_turn(state)
                return result.content
            # Text streamed before a tool call is already shown; keep the next turn's text from
            # running into it.
            streamed_before = streamed_before or (emit is not None and bool(result.content))
            ran = self._run_calls(result.tool_calls, messages, state, max(excess, 0))
            self._end_turn(state)
            if self._park(messages, state):  # a call waits for the person: the run stops
                return ""
            answer = final_answer(self)  # a structured answer was given: the run is done
            if answer is not None:
                return answer
            if state.guard.end_turn(ran):
                state.flags["loop_detected"] = True
                return last_text or ("Stopped: the model kept repeating the same tool call "
                                     "without reaching an answer.")
        state.flags["max_turns_exceeded"] = True
        return last_text or (f"Stopped after {self.max_turns} turns without a final answer "
                             f"(raise max_turns to allow more).")

    def _run_calls(self, calls: list[ToolCall], messages: list[Message], state: _RunState,
                   excess: int = 0) -> bool:
        """Run the allowed calls of one turn; answer every call id. True if any call ran.

        Calls beyond `max_tool_calls_per_turn` never run: the first of them stands for all
        `excess` (the loop dropped the others from the transcript) with a failed result.
        """
        limit = self.max_tool_calls_per_turn
        refused: dict[int, ToolResult] = {}
        blocked: dict[int, str] = {}
        allowed: list[ToolCall] = []
        for index, call in enumerate(calls):
            if index >= limit:
                refused[index] = refused_call(call, limit, max(excess - 1, 0))
                continue
            reason = state.guard.check(call.name, call.arguments)
            if reason is not None:
                blocked[index] = reason
                continue
            denial = (check_call(self.before_tool_call, call)
                      if self.before_tool_call is not None else None)
            if denial is None:
                allowed.append(call)
            else:
                refused[index] = denial
        self._check_cancelled()
        if self.parallel_tools:
            results = iter(self.executor.execute_many(allowed))
        else:
            results = iter(self._one_by_one(allowed))
        ran: list[tuple[ToolCall, ToolResult]] = []
        for index, call in enumerate(calls):
            if index in refused:
                state.record(call, refused[index])
                text = observation_text(refused[index])
            elif index in blocked:
                text = blocked[index]
            else:
                tool_result = next(results)
                state.record(call, tool_result)
                ran.append((call, tool_result))
                text = observation_text(tool_result)
            # Every tool call id must be answered, or the next request is invalid.
            messages.append(Message(role="tool", content=text, tool_call_id=call.id, name=call.name))
        images = image_message(ran)
        if images is not None:
            messages.append(images)
        return bool(allowed)

    def _one_by_one(self, calls: list[ToolCall]) -> list[ToolResult]:
        results = []
        for call in calls:
            self._check_cancelled()
            results.append(self.executor.execute(call))
        return results


class _Separated:
    """Streams a later turn's text after a blank line, so it never runs into text an earlier
    turn streamed before calling its tools."""

    __slots__ = ("sink", "started")

    def __init__(self, sink) -> None:  # noqa: ANN001 - a TokenHandler
        self.sink = sink
        self.started = False

    def __call__(self, delta: str) -> None:
        if not self.started:
            if not delta.strip():
                return
            self.started = True
            self.sink("\n\n")
            delta = delta.lstrip()
        self.sink(delta)
