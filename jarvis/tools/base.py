"""BaseTool and the three ways to define a tool.

1. Subclass BaseTool with a `spec` property and `execute(**params)` (the reference form).
2. Decorate a plain or async function with `@tool`.
3. Subclass BaseTool with a typed `call(...)` method; its spec is derived like `@tool`'s.

All three end in the same ToolRegistry and run through the same ToolExecutor.
"""

from __future__ import annotations

import inspect
import re
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from jarvis.core.types import ImageBlock, TextBlock, ToolResult, block_from_dict
from jarvis.errors import ToolArgumentError, ToolDefinitionError
from jarvis.tools.context import ToolContext
from jarvis.tools.spec import ToolSpec
from jarvis.tools.validation import SchemaValidator

_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def check_tool_name(name: str) -> str:
    """Tool names must be valid OpenAI function names: [a-zA-Z0-9_-], 1..64 characters."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ToolDefinitionError(
            f"invalid tool name {name!r}: use 1-64 letters, digits, '_' or '-' "
            f"(OpenAI function names allow nothing else)"
        )
    return name


class ToolStats:
    """Measured calls, failures and latencies of one tool (kept on the tool instance)."""

    __slots__ = ("calls", "failures", "timeouts", "_latencies", "_lock")

    def __init__(self, window: int = 512) -> None:
        self.calls = 0
        self.failures = 0
        self.timeouts = 0
        self._latencies: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()

    def record(self, latency: float | None, success: bool, timed_out: bool = False) -> None:
        """Count one call. `latency` None: the call never ran (rejected arguments, denied)."""
        with self._lock:
            self.calls += 1
            if not success:
                self.failures += 1
            if timed_out:
                self.timeouts += 1
            if latency is not None:
                self._latencies.append(latency)

    @property
    def samples(self) -> int:
        """How many latencies the median is taken over (calls that ran, up to `window`)."""
        return len(self._latencies)

    @property
    def median_latency(self) -> float | None:
        """Median of the last `window` measured latencies in seconds (None: never ran)."""
        with self._lock:
            data = sorted(self._latencies)
        if not data:
            return None
        mid = len(data) // 2
        return data[mid] if len(data) % 2 else (data[mid - 1] + data[mid]) / 2

    def snapshot(self) -> dict[str, Any]:
        return {"calls": self.calls, "failures": self.failures, "timeouts": self.timeouts,
                "median_latency": self.median_latency}


def normalize_result(tool_name: str, value: Any) -> ToolResult:
    """Turn what a tool returned (ToolResult, str, dict, other) into a ToolResult.

    A dict's `observation` is the content and its `image` (base64 PNG, or a dict with `data`
    and `mimeType`) an image block; `blocks`, `reward`, `finished`, `success` are honoured;
    every other key becomes metadata.
    """
    if isinstance(value, ToolResult):
        if not value.tool_name:
            value.tool_name = tool_name
        return value
    if value is None:
        return ToolResult(tool_name=tool_name, content="")
    if isinstance(value, str):
        return ToolResult(tool_name=tool_name, content=value)
    if isinstance(value, dict):
        data = dict(value)
        observation = data.pop("observation", None)
        content = "" if observation is None else (
            observation if isinstance(observation, str) else _to_text(observation))
        blocks: list[Any] = [block_from_dict(b) if isinstance(b, dict) else b
                             for b in data.pop("blocks", None) or []]
        image = data.pop("image", None)
        if image is not None:
            if not blocks and content:
                blocks.append(TextBlock(content))
            if isinstance(image, dict):
                blocks.append(ImageBlock(data=image["data"], mimeType=image.get("mimeType", "image/png")))
            else:
                blocks.append(ImageBlock(data=str(image)))
        if not content and blocks:
            content = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
        if observation is None and not blocks:
            # A plain data dict: show it to the model as JSON, keep nothing hidden.
            return ToolResult(tool_name=tool_name, content=_to_text(value))
        return ToolResult(
            tool_name=tool_name,
            content=content,
            success=bool(data.pop("success", True)),
            reward=data.pop("reward", None),
            finished=bool(data.pop("finished", False)),
            blocks=blocks,
            metadata=data,
        )
    return ToolResult(tool_name=tool_name, content=_to_text(value))


def _to_text(value: Any) -> str:
    import json

    if isinstance(value, (int, float, bool)):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def run_coroutine_sync(coro: Any) -> Any:
    """Run a coroutine from sync code (in a fresh loop; never inside a running one)."""
    import asyncio  # lazy: asyncio costs ~25 ms of `import jarvis`

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("an async tool cannot be run synchronously inside a running event loop; "
                       "use `await executor.aexecute(...)`")


def strict_arguments(tool: Any) -> bool:
    """Whether `tool` refuses unknown argument names (see BaseTool.strict_arguments)."""
    strict = getattr(type(tool), "strict_arguments", None)
    if strict is None:
        return type(tool).__module__.startswith("jarvis.")
    return bool(strict)


class BaseTool(ABC):
    """Base class of every tool. Subclasses give `spec` and `execute(**params)`.

    Class options:
      inline      the tool bounds its own work and never blocks, so the executor runs it on
                  the caller's thread without a watchdog thread (calculator, think).
      sequential  calls of this tool never run concurrently with each other.
      strict_arguments
                  refuse argument names the schema does not list (with a did-you-mean).
                  None (default): yes for jarvis's own tools, no for other subclasses, whose
                  schemas (reference style) may rely on extra arguments being ignored.
      needs       what the tool's constructor gets from jarvis (jarvis.core.services):
                  ("engine", "model") passes the run's engine and model to the parameters
                  of those names; {"backend": "memory"} passes the memory store to
                  `backend`. A parameter not declared here gets nothing from jarvis,
                  whatever its name (only its [tools.NAME] setting, if any).
      internal_params
                  constructor parameters that are neither services nor settings (wiring
                  for tests and the SDK): never taken from a [tools.NAME] table, never
                  listed as valid keys of it.
    """

    tool_id: str = ""
    inline: ClassVar[bool] = False
    sequential: ClassVar[bool] = False
    strict_arguments: ClassVar[bool | None] = None
    needs: ClassVar[tuple[str, ...] | dict[str, str]] = ()
    internal_params: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_needs(cls)
        if "call" in cls.__dict__:
            _derive_call_tool(cls)

    @property
    @abstractmethod
    def spec(self) -> ToolSpec:
        """Return the tool specification."""

    @abstractmethod
    def execute(self, **params: Any) -> ToolResult:
        """Execute the tool with the given parameters."""

    # --- conversions -----------------------------------------------------------------
    def to_openai_function(self) -> dict[str, Any]:
        """Convert to OpenAI function-calling format."""
        return self.spec.to_openai_function()

    def to_anthropic_tool(self) -> dict[str, Any]:
        return self.spec.to_anthropic_tool()

    def to_mcp_tool(self) -> dict[str, Any]:
        return self.spec.to_mcp_tool()

    # --- what the executor uses --------------------------------------------------------
    @property
    def is_async(self) -> bool:
        return False

    @property
    def stats(self) -> ToolStats:
        stats = self.__dict__.get("_jarvis_stats")
        if stats is None:
            stats = self.__dict__.setdefault("_jarvis_stats", ToolStats())
        return stats

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check arguments against the JSON schema; raise ToolArgumentError naming the field."""
        validator = self.__dict__.get("_jarvis_validator")
        if validator is None:
            validator = self.__dict__.setdefault(
                "_jarvis_validator", SchemaValidator(self.spec, strict=strict_arguments(self)))
        return validator.validate(arguments)

    def needs_confirmation(self, arguments: dict[str, Any]) -> bool:
        """Whether this one call needs a person's approval even though the spec does not say
        so for every call (http_request: methods that change things; channel_send: channels
        that ask). Called by the executor with validated arguments, only when overridden."""
        return False

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        """What this one call sends out (a list of `jarvis.trust.Egress`; empty: nothing),
        from validated arguments, before it runs: string work only, never a lookup or a
        connection. The default follows `spec.egress` (None: every argument value may go
        anywhere); tools that know their destination (a URL's host, a channel, an MCP
        server) override it."""
        return default_egress(self.spec, arguments)

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> Any:
        """Run with validated arguments (sync tools)."""
        return self.execute(**arguments)

    async def ainvoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> Any:
        """Run with validated arguments (async tools); sync tools never get here."""
        return self.invoke(arguments, context)


def default_egress(spec: ToolSpec, arguments: dict[str, Any]) -> list[Any]:
    """A call's egress from its spec alone (see BaseTool.egress_of)."""
    from jarvis.trust.labels import UNKNOWN, Egress

    kind = spec.egress
    if kind == "none":
        return []
    if kind is None:
        return [Egress.of(UNKNOWN, spec.name, payload=[arguments])]
    if kind == "channel":
        destination = arguments.get("channel") or spec.name
    elif kind == "mcp":
        destination = spec.metadata.get("mcp_server") or spec.name
    elif kind == "persist":
        destination = spec.metadata.get("persist") or spec.name
    else:
        destination = f"(a host {spec.name} chooses)"
    return [Egress.of(kind, str(destination), payload=[arguments])]


def _check_needs(cls: type) -> None:
    """A tool's `needs` must name services jarvis has and parameters its constructor takes:
    a typo would leave the tool without what it asked for, silently."""
    from jarvis.core.services import declared_needs

    try:
        needs = declared_needs(cls)
    except ValueError as exc:
        raise ToolDefinitionError(f"{cls.__qualname__}: {exc}") from None
    if not needs:
        return
    try:
        params = ({} if cls.__init__ is object.__init__
                  else inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    missing = sorted(set(needs) - set(params))
    if missing:
        raise ToolDefinitionError(f"{cls.__qualname__}: needs names constructor parameter(s) "
                                  f"{', '.join(missing)} that __init__ does not take")


class _DerivedTool(BaseTool):
    """Shared machinery for tools whose schema comes from a typed signature."""

    _signature: Any
    _spec: ToolSpec

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    @property
    def is_async(self) -> bool:
        return self._signature.is_async

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return self._signature.validate(self._spec.name, arguments)

    def _target(self) -> Callable[..., Any]:
        raise NotImplementedError

    def _call_args(self, arguments: dict[str, Any], context: ToolContext | None) -> dict[str, Any]:
        param = self._signature.context_param
        if param is None:
            return arguments
        return {**arguments, param: context or ToolContext(tool_name=self._spec.name)}

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> Any:
        result = self._target()(**self._call_args(arguments, context))
        if inspect.isawaitable(result):
            return run_coroutine_sync(result)
        return result

    async def ainvoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> Any:
        result = self._target()(**self._call_args(arguments, context))
        if inspect.isawaitable(result):
            result = await result
        return result

    def execute(self, **params: Any) -> ToolResult:
        """Validate and run directly (outside an executor); failures become a failed result."""
        from jarvis.core.types import ErrorType

        try:
            arguments = self.validate_arguments(params)
        except ToolArgumentError as exc:
            return ToolResult.failure(self._spec.name, str(exc), ErrorType.INVALID_ARGS)
        return normalize_result(self._spec.name, self.invoke(arguments))


class FunctionTool(_DerivedTool):
    """A tool made from a function by `@tool`; calling it calls the function."""

    def __init__(self, func: Callable[..., Any], spec: ToolSpec, signature: Any,
                 sequential: bool = False, inline: bool = False) -> None:
        self.func = func
        self._spec = spec
        self._signature = signature
        self.tool_id = spec.name
        self.sequential = sequential  # type: ignore[misc]
        self.inline = inline  # type: ignore[misc]
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def _target(self) -> Callable[..., Any]:
        return self.func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self._spec.name} from {self.func.__module__}.{self.func.__qualname__}>"


def tool(func: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None, category: str = "", cost_estimate: float = 0.0,
         latency_estimate: float = 0.0, requires_confirmation: bool = False,
         timeout: float | None = None, max_output_chars: int | None = None,
         sequential: bool = False, inline: bool = False, register: bool = True,
         metadata: dict[str, Any] | None = None, output: Any = None,
         egress: str | None = None) -> Any:
    """Make a tool from a plain or async function.

    The name is the function's, the description its docstring, per-argument descriptions its
    Google `Args:` section, and the JSON schema and validation its type hints. A parameter
    without a type hint is an error here, at definition time. With `register=True` (default)
    the tool joins ToolRegistry under its name.

    `output` ("private", "untrusted", both as a list, or "neutral") and `egress` ("none",
    "network", "channel", "mcp", "persist") declare what the results are and what a call
    sends out (docs/trust.md); left out, results count as untrusted and every argument as
    possibly sent anywhere.
    """

    def build(fn: Callable[..., Any]) -> FunctionTool:
        from jarvis.tools.signature import derive_signature

        if not callable(fn):
            raise ToolDefinitionError(f"@tool needs a function, got {fn!r}")
        tool_name = check_tool_name(name or fn.__name__)
        signature = derive_signature(fn, name=tool_name, description=description)
        spec = ToolSpec(
            name=tool_name,
            description=signature.description,
            parameters=signature.parameters,
            category=category,
            cost_estimate=cost_estimate,
            latency_estimate=latency_estimate,
            requires_confirmation=requires_confirmation,
            timeout_seconds=timeout,
            max_output_chars=max_output_chars,
            metadata=dict(metadata or {}),
            output_labels=output,
            egress=egress,
        )
        made = FunctionTool(fn, spec, signature, sequential=sequential, inline=inline)
        if register:
            from jarvis.core.registry import ToolRegistry

            ToolRegistry.register_value(tool_name, made)
        return made

    if func is not None:
        return build(func)
    return build


_CALL_SPEC_FIELDS = ("category", "cost_estimate", "latency_estimate", "requires_confirmation",
                     "timeout_seconds", "max_output_chars")


def _snake(name: str) -> str:
    name = re.sub(r"Tool$", "", name) or name
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _derive_call_tool(cls: type) -> None:
    """Give a BaseTool subclass with a typed `call` method its spec and execute."""
    from jarvis.tools.signature import derive_signature

    # Only the class's own name/tool_id: a subclass with its own `call` is a different tool.
    own = cls.__dict__
    tool_name = check_tool_name(own.get("name") or own.get("tool_id") or _snake(cls.__name__))
    description = cls.__dict__.get("description")
    if description is None:
        description = inspect.getdoc(cls) if cls.__doc__ else None
    signature = derive_signature(cls.call, name=tool_name, description=description, skip_first=True)
    options = {f: getattr(cls, f) for f in _CALL_SPEC_FIELDS
               if isinstance(getattr(cls, f, None), (str, int, float, bool))}
    # Provenance as class attributes: `output = "private"` (or output_labels), `egress = "none"`.
    output = getattr(cls, "output_labels", None)
    output = getattr(cls, "output", None) if output is None else output
    if not isinstance(output, (str, list, tuple, set, frozenset)):
        output = None
    egress = getattr(cls, "egress", None)
    spec = ToolSpec(name=tool_name, description=signature.description,
                    parameters=signature.parameters, output_labels=output,
                    egress=egress if isinstance(egress, str) else None, **options)

    cls._signature = signature
    cls._spec = spec
    cls.tool_id = tool_name
    for attr in ("spec", "is_async", "validate_arguments", "_call_args", "invoke", "ainvoke", "execute"):
        if attr not in cls.__dict__:
            setattr(cls, attr, _DerivedTool.__dict__[attr])
    cls._target = lambda self: self.call
