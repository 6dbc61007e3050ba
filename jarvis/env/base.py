"""Environment: reset / step / state, where every step runs through a ToolExecutor.

An environment's actions are named operations with JSON-schema parameters (RFC 004): methods
marked `@action`, or the ToolDefinitions its `actions()` returns. `step(action)` takes a
`ToolCallAction` (or the MCP form, `CallToolAction`; `ListToolsAction` lists the actions).

Whatever the subclass writes in its own `step`, the call reaches it through a ToolExecutor
that holds one tool per action: the action's name is looked up, its parameters validated
against the schema (unknown names refused, with a did-you-mean), the step timed out after
`step_timeout` seconds and its events published. A step that fails (an unknown action, bad
parameters, an exception in the environment's code, a timeout) does not raise: it returns an
Observation whose metadata has `error_type` and `error`, and whose text says what went wrong,
the way a failed tool call comes back to a model. Only misuse of the API itself (a step that
is no action at all) raises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from jarvis.core.types import TextBlock, ToolCallAction, ToolResult
from jarvis.env.types import (
    RESERVED_TOOL_NAMES,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Observation,
    State,
    ToolDefinition,
    ToolError,
    tool_call_of,
)
from jarvis.errors import ToolDefinitionError, UserError
from jarvis.tools.base import BaseTool, check_tool_name

DEFAULT_STEP_TIMEOUT = 60.0
_INSIDE = threading.local()  # environments whose raw step runs on this thread


def action(name: str | Callable[..., Any] | None = None, description: str | None = None,
           ) -> Any:
    """Mark an environment method as an action: `@action`, `@action("name")` or
    `@action("name", "what it does")`. Its parameters' schema comes from the type hints and
    the docstring's Args section (as `@tool`'s does); a parameter without a hint is an error.
    """
    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise ToolDefinitionError(f"@action needs a method, got {func!r}")
        func._jarvis_action = (label or func.__name__, description)  # type: ignore[attr-defined]
        return func

    if callable(name):  # bare @action
        label: str | None = None
        return mark(name)
    label = name
    return mark


def _definition(func: Callable[..., Any]) -> ToolDefinition:
    from jarvis.tools.signature import derive_signature

    name, description = func._jarvis_action  # type: ignore[attr-defined]
    check_tool_name(name)
    if name in RESERVED_TOOL_NAMES:
        raise ToolDefinitionError(f"an action cannot be named {name!r}: "
                                  f"{', '.join(sorted(RESERVED_TOOL_NAMES))} are the "
                                  f"environment's own verbs")
    signature = derive_signature(func, name=name, description=description, skip_first=True)
    return ToolDefinition.from_json_schema({"name": name, "description": signature.description,
                                            "input_schema": signature.parameters})


def _action_methods(cls: type) -> dict[str, str]:
    """Action name -> method name, for the `@action` methods of `cls` and its bases."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        for attr, value in vars(klass).items():
            func = getattr(value, "__func__", value)
            if callable(func) and hasattr(func, "_jarvis_action"):
                found[func._jarvis_action[0]] = attr
    return found


class _ActionTool(BaseTool):
    """One action of one environment as a tool: the executor runs the environment's step."""

    strict_arguments = True  # a misspelled parameter is refused with a did-you-mean

    def __init__(self, env: Environment, definition: ToolDefinition, timeout: float) -> None:
        if definition.name in RESERVED_TOOL_NAMES:
            raise ToolDefinitionError(f"an action cannot be named {definition.name!r}: "
                                      f"{', '.join(sorted(RESERVED_TOOL_NAMES))} are the "
                                      f"environment's own verbs")
        check_tool_name(definition.name)
        self.env = env
        self.tool_id = definition.name
        self._spec = definition.to_spec(category="environment", timeout_seconds=timeout)

    @property
    def spec(self) -> Any:
        return self._spec

    def execute(self, **params: Any) -> ToolResult:
        call = self.env._jarvis_pending
        action_call = ToolCallAction(tool_name=self._spec.name, parameters=params,
                                     tool_call_id=call.tool_call_id if call else None,
                                     metadata=dict(call.metadata) if call else {})
        inside = getattr(_INSIDE, "envs", None)
        if inside is None:
            inside = _INSIDE.envs = set()
        inside.add(id(self.env))
        try:
            observation = self.env._jarvis_raw_step(action_call)
        finally:
            inside.discard(id(self.env))
        return _as_result(self._spec.name, observation)


def _as_result(name: str, observation: Any) -> ToolResult:
    """A step's observation as the executor's ToolResult (the observation rides along)."""
    if not isinstance(observation, Observation):
        observation = observe(observation)
    return ToolResult(tool_name=name, content=observation.text, reward=observation.reward,
                      finished=bool(observation.done), metadata={"observation": observation})


def observe(value: Any) -> Observation:
    """An action method's return value as an Observation (text as a block, data as JSON)."""
    if isinstance(value, Observation):
        return value
    if isinstance(value, str):
        return Observation(blocks=[TextBlock(value)])
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return Observation(blocks=[TextBlock(text)],
                       metadata={"result": value} if isinstance(value, dict) else {})


def error_observation(result: ToolResult) -> Observation:
    """The Observation of a step that failed: the error as text and metadata, no reward."""
    kind = result.error_type.value if result.error_type else "execution"
    metadata = {k: v for k, v in result.metadata.items() if k != "observation"}
    metadata.update(error_type=kind, error=result.content, tool_name=result.tool_name)
    return Observation(blocks=[TextBlock(f"ERROR ({kind}): {result.content}")],
                       metadata=metadata)


def _wrap_step(raw: Callable[..., Any]) -> Callable[..., Any]:
    def step(self: Environment, action: Any) -> Observation:
        inside = getattr(_INSIDE, "envs", None)
        if inside is not None and id(self) in inside:
            return raw(self, action)  # a step calling its parent's step: already inside
        return self._jarvis_dispatch(action, lambda a: raw(self, a))

    step.__wrapped__ = raw  # type: ignore[attr-defined]
    step.__doc__ = raw.__doc__
    step._jarvis_wrapped = True  # type: ignore[attr-defined]
    return step


class Environment:
    """Base class of environments (see the module docstring).

    Subclasses implement `reset()` and the `state` property, and either mark action
    methods with `@action` (the default `step` calls them by name) or write their own
    `step(action)`. Options (class or instance attributes): `step_timeout` (seconds a step
    may take), `approver` (for actions whose spec requires confirmation), `bus` (an EventBus
    for the steps' TOOL_CALL_START / TOOL_CALL_END events).
    """

    step_timeout: float = DEFAULT_STEP_TIMEOUT
    approver: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("step")
        if own is not None and callable(own) and not getattr(own, "_jarvis_wrapped", False) \
                and not getattr(own, "_jarvis_direct", False):
            cls.step = _wrap_step(own)  # type: ignore[method-assign]

    # --- what subclasses give --------------------------------------------------------------
    def reset(self) -> Observation:
        """Start a new episode and return its first observation."""
        raise NotImplementedError(f"{type(self).__name__} must implement reset()")

    @property
    def state(self) -> State:
        """The current episode's State."""
        raise NotImplementedError(f"{type(self).__name__} must implement the state property")

    def actions(self) -> list[ToolDefinition]:
        """The actions of this environment (default: its `@action` methods)."""
        return [_definition(getattr(type(self), attr))
                for attr in _action_methods(type(self)).values()]

    def tools(self) -> list[ToolDefinition]:
        """RFC 003's name for `actions()`."""
        return self.actions()

    def close(self) -> None:
        """End the environment (release what its episodes hold)."""

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- stepping --------------------------------------------------------------------------
    def step(self, action: Any) -> Observation:
        """Take `action` (by default: call the `@action` method of that name)."""
        return self._jarvis_dispatch(action, self._call_action_method)

    def _call_action_method(self, action: ToolCallAction) -> Observation:
        attr = _action_methods(type(self)).get(action.tool_name)
        if attr is None:
            raise UserError(f"{type(self).__name__} has no @action method {action.tool_name!r}; "
                            f"write a step() for the actions that actions() lists")
        observation = observe(getattr(self, attr)(**action.parameters))
        state = self.state
        if isinstance(state, State):
            state.step_count += 1
        return observation

    def _jarvis_executor(self) -> Any:
        executor = self.__dict__.get("_jarvis_exec")
        if executor is None:
            from jarvis.tools.executor import ToolExecutor

            tools = [_ActionTool(self, d, self.step_timeout) for d in self.actions()]
            executor = ToolExecutor(tools, bus=getattr(self, "bus", None), approver=self.approver,
                                    default_timeout=self.step_timeout)
            self.__dict__["_jarvis_exec"] = executor
        return executor

    def _jarvis_dispatch(self, action: Any, raw: Callable[[Any], Any]) -> Observation:
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=[d.to_json_schema() for d in self.actions()])
        call, mcp = tool_call_of(action, type(self).__name__)
        executor = self._jarvis_executor()
        state = self.state
        executor.run_id = getattr(state, "episode_id", None)
        self.__dict__["_jarvis_raw_step"] = raw
        self.__dict__["_jarvis_pending"] = call
        try:
            result = executor.execute(call)
        finally:
            self.__dict__["_jarvis_pending"] = None
        observation = result.metadata.get("observation") if result.success else None
        if not mcp:
            return observation if observation is not None else error_observation(result)
        if observation is None:
            failed = error_observation(result)
            return CallToolObservation(tool_name=call.tool_name, metadata=failed.metadata,
                                       blocks=failed.blocks,
                                       error=ToolError(error_type=failed.metadata["error_type"],
                                                       message=result.content))
        return CallToolObservation(tool_name=call.tool_name, result=observation,
                                   done=observation.done, reward=observation.reward,
                                   metadata=dict(observation.metadata),
                                   blocks=list(observation.blocks))

    _jarvis_pending: ToolCallAction | None = None

    def _jarvis_raw_step(self, action: ToolCallAction) -> Any:  # replaced per dispatch
        raise RuntimeError("no step is being dispatched")


def direct(func: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a subclass's `step` as running its own ToolExecutor (not wrapped again)."""
    func._jarvis_direct = True  # type: ignore[attr-defined]
    return func


