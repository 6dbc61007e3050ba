"""ToolExecutor: the only way a tool runs.

It parses and validates arguments, enforces confirmation, timeouts and output limits,
measures latency, publishes events with the call id, and never raises for a tool's failure:
every problem becomes a failed ToolResult the model can read.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from jarvis.core.events import EventBus, EventType
from jarvis.core.types import ErrorType, ToolCall, ToolCallAction, ToolResult
from jarvis.errors import DuplicateNameError, ToolArgumentError
from jarvis.tools.base import BaseTool, normalize_result, run_coroutine_sync
from jarvis.tools.context import ToolContext
from jarvis.tools.spec import ToolSpec

Approver = Callable[[ToolSpec, dict[str, Any]], bool]
CallLike = ToolCall | ToolCallAction | dict[str, Any]

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_OUTPUT_CHARS = 100_000
DEFAULT_MAX_ARGUMENT_CHARS = 1_000_000


@dataclass(slots=True)
class _Prepared:
    tool: BaseTool
    spec: ToolSpec
    call_id: str
    arguments: dict[str, Any]


def _as_call(call: CallLike) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if isinstance(call, ToolCallAction):
        return ToolCall(id=call.tool_call_id or "", name=call.tool_name, arguments=call.parameters)
    if isinstance(call, dict):  # OpenAI wire form or a plain {"name", "arguments"} dict
        fn = call.get("function", call)
        return ToolCall(id=call.get("id") or "", name=fn.get("name", ""),
                        arguments=fn.get("arguments", fn.get("parameters", "{}")))
    raise TypeError(f"expected ToolCall, ToolCallAction or dict, got {type(call).__name__}")


def _start_thread(fn: Callable[[], Any], name: str) -> Future[Any]:
    """Run `fn` in a fresh daemon thread. A hung tool only ever holds its own thread."""
    future: Future[Any] = Future()

    def runner() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            future.set_exception(exc)

    threading.Thread(target=runner, name=f"jarvis-tool-{name}", daemon=True).start()
    return future


class ToolExecutor:
    """Run tool calls: validation, confirmation, timeouts, output limits, events, stats.

    Args:
        tools: tool instances to make available.
        bus: an EventBus for TOOL_CALL_START / TOOL_CALL_END / TOOL_TIMEOUT events.
        approver: called as approver(spec, arguments) for tools that require confirmation;
            with none, such calls are denied (never auto-approved).
        default_timeout: seconds, for tools whose spec sets none.
        max_output_chars: default output limit; longer output is cut with a marker.
        max_concurrency: how many calls of one `execute_many` run at once.
        run_id: passed to tools in their ToolContext and in events.
    """

    def __init__(self, tools: Iterable[BaseTool] = (), bus: EventBus | None = None, *,
                 approver: Approver | None = None, default_timeout: float = DEFAULT_TIMEOUT,
                 max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
                 max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
                 max_concurrency: int = 8, run_id: str | None = None) -> None:
        self.bus = bus
        self.approver = approver
        self.default_timeout = default_timeout
        self.max_output_chars = max_output_chars
        self.max_argument_chars = max_argument_chars
        self.max_concurrency = max(1, max_concurrency)
        self.run_id = run_id
        self._tools: dict[str, BaseTool] = {}
        self._specs: dict[str, ToolSpec] = {}
        for t in tools:
            self.add(t)

    # --- the catalog -------------------------------------------------------------------
    def add(self, tool: BaseTool) -> None:
        spec = tool.spec  # computed once: reference-style tools build a new spec per access
        if spec.name in self._tools and self._tools[spec.name] is not tool:
            raise DuplicateNameError(f"two tools named {spec.name!r} given to one ToolExecutor")
        self._tools[spec.name] = tool
        self._specs[spec.name] = spec

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)
        self._specs.pop(name, None)

    @property
    def tools(self) -> list[BaseTool]:
        return list(self._tools.values())

    def get_tool(self, name: str) -> BaseTool | None:
        return self._tools.get(name)

    def available_tools(self) -> list[ToolSpec]:
        """Specs of every tool this executor runs."""
        return list(self._specs.values())

    def get_openai_tools(self) -> list[dict[str, Any]]:
        """Tool definitions in OpenAI function format."""
        return [spec.to_openai_function() for spec in self._specs.values()]

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per tool: calls, failures, timeouts, median latency (seconds)."""
        return {name: tool.stats.snapshot() for name, tool in self._tools.items()}

    # --- preparing a call --------------------------------------------------------------
    def _prepare(self, call: CallLike) -> _Prepared | ToolResult:
        tc = _as_call(call)
        call_id = tc.id or f"call_{uuid.uuid4().hex[:12]}"
        tool = self._tools.get(tc.name)
        if tool is None:
            names = ", ".join(sorted(self._tools)) or "(none)"
            return self._failed(tc.name, call_id, ErrorType.TOOL_NOT_FOUND,
                                f"unknown tool {tc.name!r}; available tools: {names}")
        spec = self._specs[tc.name]
        raw = tc.arguments
        if isinstance(raw, str):
            if len(raw) > self.max_argument_chars:
                return self._failed(spec.name, call_id, ErrorType.INVALID_ARGS,
                                    f"arguments for {spec.name} are {len(raw)} characters; "
                                    f"the limit is {self.max_argument_chars}")
            if not raw.strip():
                raw = "{}"
            try:
                arguments = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                return self._failed(spec.name, call_id, ErrorType.INVALID_ARGS,
                                    f"arguments for {spec.name} are not valid JSON: {exc}")
        else:
            arguments = raw
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return self._failed(spec.name, call_id, ErrorType.INVALID_ARGS,
                                f"arguments for {spec.name} must be a JSON object, "
                                f"got {type(arguments).__name__}")
        try:
            arguments = tool.validate_arguments(arguments)
        except ToolArgumentError as exc:
            return self._failed(spec.name, call_id, ErrorType.INVALID_ARGS, str(exc),
                                field=exc.field)
        except RecursionError:
            return self._failed(spec.name, call_id, ErrorType.INVALID_ARGS,
                                f"arguments for {spec.name} are nested too deeply")
        if spec.requires_confirmation:
            denial = self._confirm(spec, arguments)
            if denial is not None:
                return self._failed(spec.name, call_id, ErrorType.DENIED, denial)
        return _Prepared(tool, spec, call_id, arguments)

    def _confirm(self, spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
        if self.approver is None:
            return (f"tool {spec.name} requires confirmation and no approver is configured, "
                    f"so the call was denied (approve it interactively, pass --yes, or give the "
                    f"executor an approver)")
        try:
            approved = self.approver(spec, arguments)
        except Exception as exc:  # an approver that breaks must not approve
            return f"tool {spec.name} requires confirmation and the approver failed: {exc}"
        return None if approved else f"the call to {spec.name} was denied by the user"

    def _failed(self, name: str, call_id: str, error_type: ErrorType, message: str,
                **metadata: Any) -> ToolResult:
        result = ToolResult.failure(name, message, error_type,
                                    **{k: v for k, v in metadata.items() if v is not None})
        result.call_id = call_id
        self._publish_end(result, None)
        return result

    # --- events and bookkeeping ----------------------------------------------------------
    def _publish_start(self, prep: _Prepared) -> None:
        bus = self.bus
        if bus is not None and bus.has_subscribers(EventType.TOOL_CALL_START):
            bus.publish(EventType.TOOL_CALL_START, {
                "call_id": prep.call_id, "tool_name": prep.spec.name,
                "arguments": prep.arguments, "run_id": self.run_id})

    def _publish_end(self, result: ToolResult, arguments: dict[str, Any] | None) -> None:
        bus = self.bus
        if bus is not None and bus.has_subscribers(EventType.TOOL_CALL_END):
            bus.publish(EventType.TOOL_CALL_END, {
                "call_id": result.call_id, "tool_name": result.tool_name,
                "arguments": arguments, "success": result.success,
                "latency": result.latency_seconds, "error_type":
                result.error_type.value if result.error_type else None,
                "run_id": self.run_id, "result": result})

    def _context(self, prep: _Prepared) -> ToolContext:
        return ToolContext(run_id=self.run_id, call_id=prep.call_id, tool_name=prep.spec.name,
                           bus=self.bus)

    def _timeout_for(self, prep: _Prepared) -> float:
        timeout = prep.spec.timeout_seconds
        return self.default_timeout if timeout is None else timeout

    def _finish(self, prep: _Prepared, outcome: Any, error: BaseException | None,
                latency: float, timed_out: bool = False) -> ToolResult:
        name = prep.spec.name
        if timed_out:
            timeout = self._timeout_for(prep)
            result = ToolResult.failure(
                name, f"tool {name} timed out after {timeout:g} s and was abandoned",
                ErrorType.TIMEOUT, timeout_seconds=timeout)
            if self.bus is not None:
                self.bus.publish(EventType.TOOL_TIMEOUT, {
                    "call_id": prep.call_id, "tool_name": name, "timeout": timeout,
                    "run_id": self.run_id})
        elif error is not None:
            result = ToolResult.failure(name, f"tool {name} failed: {type(error).__name__}: {error}",
                                        ErrorType.EXECUTION, exception=type(error).__name__)
        else:
            try:
                result = normalize_result(name, outcome)
            except Exception as exc:  # a malformed return value is the tool's failure
                result = ToolResult.failure(name, f"tool {name} returned an unusable value: {exc}",
                                            ErrorType.EXECUTION)
            if not result.success and result.error_type is None:
                result.error_type = ErrorType.EXECUTION
        result.call_id = prep.call_id
        result.latency_seconds = latency
        limit = prep.spec.max_output_chars or self.max_output_chars
        content = result.content
        if len(content) > limit:
            cut = len(content) - limit
            result.content = (content[:limit] + f"\n[... output truncated: {cut} of "
                              f"{len(content)} characters cut ...]")
            result.metadata["truncated_chars"] = cut
        prep.tool.stats.record(latency, result.success, timed_out)
        self._publish_end(result, prep.arguments)
        return result

    # --- running -----------------------------------------------------------------------
    def execute(self, call: CallLike) -> ToolResult:
        """Run one call and return its ToolResult; never raises for the tool's failure."""
        prep = self._prepare(call)
        if isinstance(prep, ToolResult):
            return prep
        self._publish_start(prep)
        tool = prep.tool
        context = self._context(prep)
        start = time.perf_counter()
        if tool.inline and not tool.is_async:
            # The tool bounds its own work, so no watchdog thread is needed.
            try:
                outcome = tool.invoke(prep.arguments, context)
            except Exception as exc:
                return self._finish(prep, None, exc, time.perf_counter() - start)
            return self._finish(prep, outcome, None, time.perf_counter() - start)
        if tool.is_async:
            def job() -> Any:
                return run_coroutine_sync(tool.ainvoke(prep.arguments, context))
        else:
            def job() -> Any:
                return tool.invoke(prep.arguments, context)
        future = _start_thread(job, prep.spec.name)
        try:
            outcome = future.result(timeout=self._timeout_for(prep))
        except FutureTimeout:
            return self._finish(prep, None, None, time.perf_counter() - start, timed_out=True)
        except Exception as exc:
            return self._finish(prep, None, exc, time.perf_counter() - start)
        return self._finish(prep, outcome, None, time.perf_counter() - start)

    def execute_many(self, calls: Iterable[CallLike]) -> list[ToolResult]:
        """Run the calls of one turn concurrently; results come back in call order.

        At most `max_concurrency` run at once; calls of a `sequential` tool run one after
        another in their original order.
        """
        calls = list(calls)
        if len(calls) <= 1:
            return [self.execute(c) for c in calls]
        results: list[ToolResult | None] = [None] * len(calls)
        lanes: dict[Any, list[int]] = {}
        for index, call in enumerate(calls):
            tool = self._tools.get(_as_call(call).name)
            key = ("seq", tool.spec.name) if tool is not None and tool.sequential else index
            lanes.setdefault(key, []).append(index)
        gate = threading.BoundedSemaphore(self.max_concurrency)

        def run_lane(indices: list[int]) -> None:
            for i in indices:
                with gate:
                    results[i] = self.execute(calls[i])

        threads = [threading.Thread(target=run_lane, args=(indices,), daemon=True,
                                    name="jarvis-lane") for indices in lanes.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [r for r in results if r is not None]

    async def aexecute(self, call: CallLike) -> ToolResult:
        """Async form of `execute`: async tools run on this loop, sync tools in a thread."""
        import asyncio

        prep = self._prepare(call)
        if isinstance(prep, ToolResult):
            return prep
        self._publish_start(prep)
        tool = prep.tool
        context = self._context(prep)
        start = time.perf_counter()
        if tool.inline and not tool.is_async:
            try:
                outcome = tool.invoke(prep.arguments, context)
            except Exception as exc:
                return self._finish(prep, None, exc, time.perf_counter() - start)
            return self._finish(prep, outcome, None, time.perf_counter() - start)
        if tool.is_async:
            task: asyncio.Future[Any] = asyncio.ensure_future(tool.ainvoke(prep.arguments, context))
        else:
            task = asyncio.wrap_future(
                _start_thread(lambda: tool.invoke(prep.arguments, context), prep.spec.name))
        # asyncio.wait (not wait_for) so a tool that swallows cancellation cannot hold us.
        done, _ = await asyncio.wait({task}, timeout=self._timeout_for(prep))
        if not done:
            task.cancel()
            return self._finish(prep, None, None, time.perf_counter() - start, timed_out=True)
        error = task.exception()
        if error is not None:
            return self._finish(prep, None, error, time.perf_counter() - start)
        return self._finish(prep, task.result(), None, time.perf_counter() - start)

    async def aexecute_many(self, calls: Iterable[CallLike]) -> list[ToolResult]:
        """Async form of `execute_many` (same ordering and concurrency rules)."""
        import asyncio

        calls = list(calls)
        gate = asyncio.Semaphore(self.max_concurrency)
        locks: dict[str, asyncio.Lock] = {}

        async def run(call: CallLike) -> ToolResult:
            tool = self._tools.get(_as_call(call).name)
            lock = locks.setdefault(tool.spec.name, asyncio.Lock()) if tool and tool.sequential else None
            if lock is None:
                async with gate:
                    return await self.aexecute(call)
            async with lock, gate:  # take the tool's lock first so order is kept
                return await self.aexecute(call)

        return list(await asyncio.gather(*(run(c) for c in calls)))
