"""The react agent: tools described in the prompt, used through Thought / Action / Action
Input / Observation / Final Answer text. Works with models and servers that have no native
tool calling. The tool text comes from `build_tool_descriptions`; replies are read by the
tolerant parser in `react_parser`, and a reply it cannot read is answered with an
observation saying what was wrong, so the model can correct itself.
"""

from __future__ import annotations

import uuid

from jarvis.agents.base import BaseAgent, TokenHandler, _RunState, observation_text
from jarvis.agents.hooks import check_call
from jarvis.agents.react_parser import _ACTION, _FINAL, MAX_PARSE_CHARS, parse_react
from jarvis.agents.structured import final_answer
from jarvis.core.types import Message, ToolCall
from jarvis.tools.descriptions import build_tool_descriptions

FORMAT = """To use a tool, reply in exactly this format and then stop:
Thought: what you need to do next
Action: the tool name, one of [{names}]
Action Input: the arguments as one JSON object, e.g. {{"parameter": "value"}}

You will then get the result as "Observation: ...". Use tools as often as needed. When you
can answer, reply:
Thought: I can answer now
Final Answer: the answer for the user"""

FINAL_ONLY = """Reply in this format:
Thought: your reasoning
Final Answer: the answer for the user"""


_SEPARATORS = " \t*\r\n"
_MARKER_CHARS = 16  # a line with more non-separator characters than this is no marker line


class _AnswerStream:
    """Forwards streamed text only after a `Final Answer:` line, so Thought and Action lines
    never reach the user's answer stream. A reply with an Action before that line is a tool
    step (any answer after it is invented), so nothing of it is forwarded.

    Incremental: only the current line is kept, and it is matched against the markers only
    while it is short enough to be one (`Final Answer:` or `Action:` and separators), so the
    work per delta stays constant (re-searching the whole reply per delta was quadratic: 10 s
    for 40 000 one-character deltas; see bench/bench_react.py).
    """

    __slots__ = ("sink", "started", "emitted", "blocked", "limit", "seen", "_line", "_signs",
                 "_dead", "_stars")

    def __init__(self, sink: TokenHandler, limit: int = MAX_PARSE_CHARS) -> None:
        self.sink = sink
        self.started = False
        self.emitted = False
        self.blocked = False
        self.limit = limit  # the parser reads no further than this either
        self.seen = 0
        self._line: list[str] = []  # the current line's text (while it may be a marker)
        self._signs = 0  # its non-separator characters
        self._dead = False  # the current line can no longer be a marker
        self._stars = True  # still on the marker's line: '*' is a separator there

    def __call__(self, delta: str) -> None:
        if self.started:
            self._emit(delta)
            return
        if self.blocked or self.seen > self.limit:
            return
        self.seen += len(delta)
        pos = 0
        while pos < len(delta):
            newline = delta.find("\n", pos)
            end = len(delta) if newline < 0 else newline + 1
            piece = delta[pos:end]
            pos = end
            if not self._dead:
                self._line.append(piece)
                before = self._signs
                self._signs += len(piece) - sum(piece.count(c) for c in _SEPARATORS)
                if self._signs != before:
                    line = "".join(self._line)
                    self._line = [line]
                    if _ACTION.match(line):
                        self.blocked = True
                        return
                    final = _FINAL.match(line)
                    if final is not None:
                        self.started = True
                        self._emit(line[final.end():] + delta[pos:])
                        return
                    if self._signs > _MARKER_CHARS:
                        self._dead, self._line = True, []
            if newline >= 0:
                self._line, self._signs, self._dead = [], 0, False

    def _emit(self, text: str) -> None:
        if not self.emitted:
            # What follows the marker is skipped as the parser does: separators on its own
            # line (`**Final Answer:**`), then whitespace; they may arrive one at a time.
            if self._stars:
                kept = text.lstrip(" \t*")
                if kept[:1] in ("\r", "\n"):
                    self._stars = False
                text = kept
            text = text.lstrip()
            if not text:
                return
        self.sink(text)
        self.emitted = True


class ReActAgent(BaseAgent):
    """Prompted tool use: the model writes Action lines, jarvis answers with Observations."""

    agent_id = "react"

    def _system_prompt(self) -> str:
        intro = self.system or "You are a helpful assistant. Answer the user's question."
        tools = self.executor.tools
        if not tools:
            return f"{intro}\n\n{FINAL_ONLY}"
        names = ", ".join(t.spec.name for t in tools)
        return (f"{intro}\n\nYou can use these tools:\n\n{build_tool_descriptions(tools)}\n\n"
                f"{FORMAT.format(names=names)}")

    def _loop(self, messages: list[Message], state: _RunState) -> str:
        last_text = ""
        for _ in range(self.max_turns - state.turns):  # a continued run has fewer left
            stream = _AnswerStream(self.on_token) if self.on_token is not None else None
            result = self._generate(messages, state, emit=stream)
            step = parse_react(result.content)
            if result.tool_calls and step.kind != "action":
                # A server that returns native tool calls anyway: honour the first one.
                call = result.tool_calls[0]
                messages.append(Message(role="assistant", content=result.content or ""))
                observation = self._run(call, state)
                extra = len(result.tool_calls) - 1
                if extra:
                    # Said, not dropped silently: the model must know they never ran.
                    state.flags["refused_tool_calls"] = (state.flags.get("refused_tool_calls", 0)
                                                         + extra)
                    observation += (f"\n(refused: {extra} more tool call(s) in that reply did "
                                    f"not run; the react agent runs one tool call per reply)")
            elif step.kind == "final":
                messages.append(Message(role="assistant", content=step.text or result.content))
                self._end_turn(state)
                if stream is not None and not stream.emitted and step.answer:
                    self.on_token(step.answer)  # a plain reply had no marker to stream from
                return step.answer
            elif step.kind == "error":
                messages.append(Message(role="assistant", content=step.text or result.content))
                observation = (f"Your reply could not be used: {step.error}. Reply with an "
                               f"Action and Action Input, or with a Final Answer.")
                state.flags["parse_errors"] = state.flags.get("parse_errors", 0) + 1
            else:
                messages.append(Message(role="assistant", content=step.text))
                call = ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=step.tool,
                                arguments=step.arguments)
                observation = self._run(call, state)
                answer = final_answer(self)  # a structured answer was given: the run is done
                if answer is not None:
                    messages.append(Message(role="user", content=f"Observation: {observation}"))
                    self._end_turn(state)
                    return answer
            if step.text:
                last_text = step.text
            messages.append(Message(role="user", content=f"Observation: {observation}"))
            self._end_turn(state)
            if self._park(messages, state):  # the call waits for the person: the run stops
                return ""
            if state.flags.get("loop_detected"):
                return "Stopped: the model kept repeating the same tool call without an answer."
        state.flags["max_turns_exceeded"] = True
        return (f"Stopped after {self.max_turns} turns without a final answer (raise max_turns "
                f"to allow more).") if last_text else ""

    def _run(self, call: ToolCall, state: _RunState) -> str:
        reason = state.guard.check(call.name, call.arguments)
        if reason is not None:
            if state.guard.end_turn(False):
                state.flags["loop_detected"] = True
            return reason
        state.guard.end_turn(True)
        self._check_cancelled()
        hook = getattr(self, "before_tool_call", None)  # set by a structured orchestrator
        result = check_call(hook, call) if hook is not None else None
        if result is None:
            result = self.executor.execute(call)
        state.record(call, result)
        return observation_text(result)
