"""ToolEnvironment: jarvis tools as an environment, one episode = one run.

    env = ToolEnvironment(tools=["calculator", "repl"], approved_tools=["repl"])
    env.reset()
    obs = env.step(ToolCallAction(tool_name="repl", parameters={"code": "x = 6 * 7"}))
    obs = env.step(ToolCallAction(tool_name="repl", parameters={"code": "x"}))   # 42
    env.reset()      # a new episode: a fresh interpreter, x is gone
    env.close()

The episode id is the run id of the tools' ToolContext, so run-scoped resources (the repl's
interpreter) live for one episode: `reset()` and `close()` release the episode's resources.
A tool's `reward` and `finished` become the observation's reward and done.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from jarvis.core.types import TextBlock
from jarvis.env.base import Environment, direct
from jarvis.env.types import (
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Observation,
    State,
    ToolDefinition,
    ToolError,
    tool_call_of,
)
from jarvis.errors import UserError


class ToolEnvironment(Environment):
    """Tools (names from the registry, or instances) as an environment.

    Args:
        tools: tool names or BaseTool instances.
        approver: `approver(spec, arguments) -> bool` for tools that require confirmation.
        approved_tools: such tools approved by name (the environment's author consents; a
            model cannot); with neither, their calls are denied (a failed observation).
        max_steps: steps per episode; the step that reaches it is `done`.
        default_timeout: seconds a call may take when its tool sets none.
        prompt: the text of the first observation (default: the tools' names).
    """

    def __init__(self, tools: Iterable[Any], *, approver: Any = None,
                 approved_tools: Sequence[str] = (), max_steps: int | None = None,
                 default_timeout: float = 30.0, prompt: str | None = None) -> None:
        from jarvis.tools.base import BaseTool
        from jarvis.tools.executor import ToolExecutor

        given = list(tools)
        names = [t for t in given if isinstance(t, str)]
        built = []
        if names:
            from jarvis.tools.catalog import build_tools

            built = iter(build_tools(names))
        instances = []
        for item in given:
            tool = next(built) if isinstance(item, str) else item
            if not isinstance(tool, BaseTool):
                raise UserError(f"ToolEnvironment takes tool names or BaseTool instances, not "
                                f"{type(item).__name__}")
            instances.append(tool)
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                      or max_steps < 1):
            raise UserError(f"max_steps must be a whole number of at least 1, not {max_steps!r}")
        decide = approver
        if approved_tools:
            approved = frozenset(approved_tools)

            def decide(spec: Any, arguments: dict[str, Any]) -> bool:
                return spec.name in approved or (approver is not None
                                                 and bool(approver(spec, arguments)))

        self._executor = ToolExecutor(instances, approver=decide, default_timeout=default_timeout,
                                      approved_tools=approved_tools)
        self.max_steps = max_steps
        self.prompt = prompt
        self._state: State | None = None

    @property
    def state(self) -> State:
        if self._state is None:
            raise UserError("no episode yet: call reset() first")
        return self._state

    def actions(self) -> list[ToolDefinition]:
        return [ToolDefinition.from_spec(spec) for spec in self._executor.available_tools()]

    def reset(self, *, episode_id: str | None = None) -> Observation:
        """End the current episode (its resources are released) and start a new one."""
        self._release()
        self._state = State(episode_id=episode_id or f"episode-{uuid.uuid4().hex}")
        self._executor.run_id = self._state.episode_id
        names = [spec.name for spec in self._executor.available_tools()]
        text = self.prompt or ("Available tools: " + (", ".join(names) or "(none)") + ".")
        return Observation(blocks=[TextBlock(text)], metadata={"tools": names,
                                                               "episode_id": self._state.episode_id})

    @direct
    def step(self, action: Any) -> Observation:
        """Run one tool call through the executor; its result is the observation."""
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=[d.to_json_schema() for d in self.actions()])
        call, mcp = tool_call_of(action, "ToolEnvironment")
        state = self.state
        result = self._executor.execute(call)
        state.step_count += 1
        done = bool(result.finished) or (self.max_steps is not None
                                         and state.step_count >= self.max_steps)
        metadata = {k: v for k, v in result.to_dict().items() if k not in ("content", "blocks")}
        if mcp:
            error = None if result.success else ToolError(
                error_type=result.error_type.value if result.error_type else "execution",
                message=result.content)
            return CallToolObservation(tool_name=call.tool_name, done=done, reward=result.reward,
                                       metadata=metadata, blocks=result.all_blocks(),
                                       result=result.to_tool_output() if result.success else None,
                                       error=error)
        return Observation(done=done, reward=result.reward, metadata=metadata,
                           blocks=result.all_blocks())

    def _release(self) -> None:
        if self._state is not None and self._state.episode_id:
            from jarvis.resources import release_run

            release_run(self._state.episode_id)

    def close(self) -> None:
        """End the episode and release its resources."""
        self._release()
        self._state = None
