"""ToolExecutor: the only way a tool runs.

It parses and validates arguments, enforces confirmation, timeouts and output limits,
measures latency, publishes events with the call id, and never raises for a tool's failure:
every problem becomes a failed ToolResult the model can read.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jarvis.core.events import EventBus, EventType
from jarvis.core.text import find_problem
from jarvis.core.types import ErrorType, TextBlock, ToolCall, ToolCallAction, ToolResult
from jarvis.errors import DuplicateNameError, ToolArgumentError
from jarvis.tools import gate
from jarvis.tools.base import (
    BaseTool,
    ToolStats,
    _DerivedTool,
    normalize_result,
    run_coroutine_sync,
    strict_arguments,
)
from jarvis.tools.context import Grant, ToolContext
from jarvis.tools.spec import ToolSpec
from jarvis.tools.threads import (  # abandoned_threads: public here before threads.py held it
    ABANDONED,
    _start_thread,
    _Watch,
    abandoned_threads,  # noqa: F401
)
from jarvis.tools.validation import SchemaValidator
from jarvis.trust.run import RunTrust

Approver = Callable[[ToolSpec, dict[str, Any]], bool]
# egress_approver(request) -> bool; on_person_needed(request) -> Verdict (approve/deny/park)
EgressApprover = Callable[[Any], bool]
PersonNeeded = Callable[[Any], Any]
CallLike = ToolCall | ToolCallAction | dict[str, Any]

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_OUTPUT_CHARS = 100_000
DEFAULT_MAX_ARGUMENT_CHARS = 1_000_000
DEFAULT_MAX_ABANDONED_PER_TOOL = 8
DEFAULT_MAX_ABANDONED = 64
MAX_ERROR_CHARS = 2_000


@dataclass(slots=True)
class _Entry:
    """Everything the executor needs about one tool, worked out once in `add`."""

    tool: BaseTool
    spec: ToolSpec
    validate: Callable[[dict[str, Any]], dict[str, Any]]
    inline: bool  # run on the caller's thread, no watchdog
    is_async: bool
    wants_context: bool
    sequential: bool
    stats: ToolStats
    per_call_confirm: bool = False  # the tool overrides needs_confirmation(arguments)
    labels: frozenset[str] = frozenset()  # output labels applied to its results
    egress: str = "unknown"  # "none": its calls send nothing out (the guard is skipped)


@dataclass(slots=True)
class _Prepared:
    entry: _Entry
    call_id: str
    arguments: dict[str, Any]
    clean: bool = True  # sent nothing from private data: its result may be link evidence
    budget_cut: float | None = None  # seconds the run's budget left it (shorter than its timeout)

    @property
    def tool(self) -> BaseTool:
        return self.entry.tool

    @property
    def spec(self) -> ToolSpec:
        return self.entry.spec


def _as_call(call: CallLike) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if isinstance(call, ToolCallAction):
        return ToolCall(id=call.tool_call_id or "", name=call.tool_name, arguments=call.parameters)
    if isinstance(call, dict):  # OpenAI wire form or a plain {"name", "arguments"} dict
        fn = call.get("function", call)
        if not isinstance(fn, dict):
            raise TypeError(f"a tool call dict needs a 'function' object, got {fn!r}")
        return ToolCall(id=call.get("id") or "", name=fn.get("name", ""),
                        arguments=fn.get("arguments", fn.get("parameters", "{}")))
    raise TypeError(f"expected ToolCall, ToolCallAction or dict, got {type(call).__name__}")


def _new_call_id() -> str:
    return "call_" + os.urandom(6).hex()


def _wants_context(tool: BaseTool) -> bool:
    """Whether the tool can use a ToolContext (building one per call is measurable overhead)."""
    cls = type(tool)
    if cls.invoke is BaseTool.invoke and cls.ainvoke is BaseTool.ainvoke:
        return False  # the reference form: execute(**params) never sees a context
    signature = getattr(tool, "_signature", None)
    if (signature is not None and cls.invoke is _DerivedTool.invoke
            and cls.ainvoke is _DerivedTool.ainvoke):
        return signature.context_param is not None
    return True  # a custom invoke/ainvoke may want it


def _close(context: ToolContext | None) -> None:
    """End a call's context: resources a lone call (no run id) acquired are released."""
    if context is not None:
        context.close()


def _cut(text: str, limit: int) -> tuple[str, int]:
    """`text` cut to `limit` characters with a marker saying how much was cut."""
    if len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    return (text[:limit] + f"\n[... output truncated: {cut} of {len(text)} characters cut ...]",
            cut)


def _per_call_confirm(tool: BaseTool, arguments: dict[str, Any]) -> bool:
    try:
        return bool(tool.needs_confirmation(arguments))
    except Exception:  # a check that breaks must not wave the call through
        return True


class ToolExecutor:
    """Run tool calls: validation, confirmation, timeouts, output limits, events, stats.

    Args:
        tools: tool instances to make available.
        bus: an EventBus for TOOL_CALL_START / TOOL_CALL_END / TOOL_TIMEOUT events.
        approver: called as approver(spec, arguments) for tools that require confirmation;
            with none, such calls are denied (never auto-approved).
        default_timeout: seconds, for tools whose spec sets none.
        max_output_chars: default output limit; longer output is cut with a marker.
        max_argument_chars: longest JSON argument string accepted (longer: invalid_args).
        max_concurrency: how many calls of one `execute_many` run at once.
        run_id: passed to tools in their ToolContext and in events.
        approved_tools: confirmation-gated tools approved by name for the whole run (tools
            see them in `context.grant`; the approver still decides each call).
        by_person: calls come from a person (`jarvis tools run`), not from a model.
        max_abandoned_per_tool / max_abandoned: timed-out calls whose threads still run,
            allowed per tool and in all (process-wide); beyond that a call of the tool fails
            at once (error_type timeout) instead of starting another thread.
        trust: the run's RunTrust (default: a fresh one): results' labels apply to it, the
            egress guard checks calls against it (docs/trust.md).
        egress_approver: `fn(ApprovalRequest) -> bool` for calls the guard holds (approver
            and approved_tools never answer them); none: denied.
        on_person_needed: `fn(request) -> Verdict | bool`, the hook every person-needed
            decision goes through (jarvis.tools.gate); replaces both approvers.
        trusted_tools: names the person vouches for: neutral results, nothing sent out.
        fence: a scheduled run's RunFence (jarvis.tools.fence), checked before every call.
        budget: the run's BudgetMeter (jarvis.tools.budget), asked before every call.
        no_person: why nobody can be asked here, said when a call the guard holds is refused
            (default: no terminal; `jarvis mcp serve` and ORS say they answer in-call).
    """

    def __init__(self, tools: Iterable[BaseTool] = (), bus: EventBus | None = None, *,
                 approver: Approver | None = None, default_timeout: float = DEFAULT_TIMEOUT,
                 max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
                 max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
                 max_concurrency: int = 8, run_id: str | None = None,
                 approved_tools: Iterable[str] = (), by_person: bool = False,
                 max_abandoned_per_tool: int = DEFAULT_MAX_ABANDONED_PER_TOOL,
                 max_abandoned: int = DEFAULT_MAX_ABANDONED,
                 metadata: dict[str, Any] | None = None, trust: RunTrust | None = None,
                 egress_approver: EgressApprover | None = None,
                 on_person_needed: PersonNeeded | None = None,
                 trusted_tools: Iterable[str] = (), fence: Any = None, budget: Any = None,
                 no_person: str | None = None) -> None:
        self.bus = bus
        self.no_person = no_person or "no terminal; --yes does not cover this"
        self.fence, self.budget = fence, budget
        self.approver = approver
        self.egress_approver = egress_approver
        self.on_person_needed = on_person_needed
        self.trusted_tools = frozenset(trusted_tools)
        self.trust = trust if trust is not None else RunTrust(run_id=run_id)
        if self.trust.run_id is None:
            self.trust.run_id = run_id
        self.trust.on_change(self._publish_trust)
        self.default_timeout = default_timeout
        self.max_output_chars = max_output_chars
        self.max_argument_chars = max_argument_chars
        self.max_concurrency = max(1, max_concurrency)
        self.run_id = run_id
        self.approved_tools = frozenset(approved_tools)
        self.by_person = by_person
        self.max_abandoned_per_tool = max(1, int(max_abandoned_per_tool))
        self.max_abandoned = max(1, int(max_abandoned))
        self._grant: Grant | None = None
        # Facts about the run for its tools (ToolContext.metadata): a scheduled run's ids.
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._entries: dict[str, _Entry] = {}
        # One approval at a time: concurrent calls of one turn must not prompt a user at once.
        self._approve_lock = threading.Lock()
        for t in tools:
            self.add(t)

    def for_run(self, run_id: str, trust: RunTrust | None = None) -> ToolExecutor:
        """An executor for another run over the same tools, limits and counters, with its own
        trust (`trust`, or forked from this one's: rules, grants) and run facts: what one run
        reads never taints the other (`jarvis mcp serve --http` makes one per connection)."""
        import copy

        own = copy.copy(self)
        own.run_id = run_id
        own.metadata = dict(self.metadata)
        own.trust = trust if trust is not None else self.trust.fork(run_id)
        own.trust.on_change(own._publish_trust)
        return own

    # --- the catalog -------------------------------------------------------------------
    def add(self, tool: BaseTool) -> None:
        """Make `tool` available. Its spec is read once here; a second, different tool with
        the same name is a DuplicateNameError, and a broken JSON schema a ToolDefinitionError."""
        spec = tool.spec  # read once: reference-style tools build a new spec per access
        existing = self._entries.get(spec.name)
        if existing is not None:
            if existing.tool is tool:
                return
            raise DuplicateNameError(f"two tools named {spec.name!r} given to one ToolExecutor")
        if type(tool).validate_arguments is BaseTool.validate_arguments:
            validator = tool.__dict__.get("_jarvis_validator")
            if validator is None:
                validator = tool.__dict__.setdefault(
                    "_jarvis_validator", SchemaValidator(spec, strict=strict_arguments(tool)))
            validate = validator.validate
        else:
            validate = tool.validate_arguments
        is_async = bool(tool.is_async)
        labels, egress = gate.declared(tool, spec, spec.name in self.trusted_tools, self.trust)
        self._entries[spec.name] = _Entry(
            tool=tool, spec=spec, validate=validate, inline=bool(tool.inline) and not is_async,
            is_async=is_async, wants_context=_wants_context(tool),
            sequential=bool(tool.sequential), stats=tool.stats,
            per_call_confirm=type(tool).needs_confirmation is not BaseTool.needs_confirmation,
            labels=labels, egress=egress)
        self._grant = None

    def remove(self, name: str) -> None:
        self._entries.pop(name, None)
        self._grant = None

    @property
    def grant(self) -> Grant:
        """What this run was given (its tools and approvals), as tools see it in their context."""
        if self._grant is None:
            self._grant = Grant(frozenset(self._entries), self.approved_tools, self.by_person)
        return self._grant

    @property
    def tools(self) -> list[BaseTool]:
        return [entry.tool for entry in self._entries.values()]

    def get_tool(self, name: str) -> BaseTool | None:
        entry = self._entries.get(name)
        return entry.tool if entry is not None else None

    def available_tools(self) -> list[ToolSpec]:
        """Specs of every tool this executor runs."""
        return [entry.spec for entry in self._entries.values()]

    def get_openai_tools(self) -> list[dict[str, Any]]:
        """Tool definitions in OpenAI function format."""
        return [entry.spec.to_openai_function() for entry in self._entries.values()]

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per tool: calls, failures, timeouts, median latency (seconds)."""
        return {name: entry.stats.snapshot() for name, entry in self._entries.items()}

    # --- preparing a call --------------------------------------------------------------
    def _prepare(self, call: CallLike) -> _Prepared | ToolResult:
        if self.fence is not None:  # a scheduled run that lost its lease calls nothing more
            self.fence.check()
        tc = _as_call(call)
        call_id = tc.id or _new_call_id()
        raw = tc.arguments
        entry = self._entries.get(tc.name) if isinstance(tc.name, str) else None
        if entry is None:
            names = ", ".join(sorted(self._entries)) or "(none)"
            shown = repr(tc.name)[:100]  # the name comes from a model: bound what is echoed
            return self._failed(str(tc.name)[:100], call_id, ErrorType.TOOL_NOT_FOUND,
                                f"unknown tool {shown}; available tools: {names}", raw)
        name = entry.spec.name
        if isinstance(raw, str):
            if len(raw) > self.max_argument_chars:
                return self._failed(name, call_id, ErrorType.INVALID_ARGS,
                                    f"arguments for {name} are {len(raw)} characters; "
                                    f"the limit is {self.max_argument_chars}", None, entry)
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError) as exc:
                detail = exc if isinstance(exc, ValueError) else "nested too deeply"
                return self._failed(name, call_id, ErrorType.INVALID_ARGS,
                                    f"arguments for {name} are not valid JSON: {detail}",
                                    raw[:1000], entry)
        else:
            arguments = {} if raw is None else raw
        if not isinstance(arguments, dict):
            return self._failed(name, call_id, ErrorType.INVALID_ARGS,
                                f"arguments for {name} must be a JSON object, "
                                f"got {type(arguments).__name__}", None, entry)
        # A "\udc80" escape decodes to a lone surrogate, which no file, database or HTTP
        # body can hold: refused here, before any tool sees it (jarvis.core.text).
        invalid = find_problem(arguments, f"arguments for {name}")
        if invalid is not None:
            return self._failed(name, call_id, ErrorType.INVALID_ARGS, invalid, arguments, entry)
        try:
            arguments = entry.validate(arguments)
        except ToolArgumentError as exc:
            return self._failed(name, call_id, ErrorType.INVALID_ARGS, str(exc), arguments,
                                entry, field=exc.field)
        except RecursionError:
            return self._failed(name, call_id, ErrorType.INVALID_ARGS,
                                f"arguments for {name} are nested too deeply", None, entry)
        confirm = entry.spec.requires_confirmation or (
            entry.per_call_confirm and _per_call_confirm(entry.tool, arguments))
        if not confirm and (entry.egress == "none" or not self.trust.tainted_by):
            return _Prepared(entry, call_id, arguments)  # the fast path: nobody to ask
        # The one place a call is held for a person (confirmation or the egress guard).
        decided = gate.decide(self, entry, call_id, arguments, confirm)
        if decided.denial is not None:
            return self._failed(name, call_id, ErrorType.DENIED, decided.denial, arguments,
                                entry, **decided.metadata)
        return _Prepared(entry, call_id, arguments, decided.clean)

    def _admit(self, prep: _Prepared | ToolResult) -> _Prepared | ToolResult:
        """The budget's word on a call about to run (jarvis.tools.budget)."""
        if type(prep) is ToolResult:
            return prep
        refused = self.budget.admit_tool(prep.spec, prep.call_id)
        if refused is None:
            return prep
        result = self.budget.refusal(prep.spec, prep.call_id, refused)
        self._publish_end(result, prep.arguments)
        return result

    def _failed(self, name: str, call_id: str, error_type: ErrorType, message: str,
                arguments: Any = None, entry: _Entry | None = None, **metadata: Any) -> ToolResult:
        """A call rejected before it ran (the tool body never started)."""
        # Messages quote model input (a bad value, a name): keep them readable.
        message = _cut(message, MAX_ERROR_CHARS)[0]
        result = ToolResult.failure(name, message, error_type,
                                    **{k: v for k, v in metadata.items() if v is not None})
        result.call_id = call_id
        if entry is not None:
            entry.stats.record(None, False)
        self._publish_end(result, arguments)
        return result

    # --- events and bookkeeping ----------------------------------------------------------
    def _publish_start(self, prep: _Prepared) -> None:
        bus = self.bus
        if bus is not None and bus.has_subscribers(EventType.TOOL_CALL_START):
            bus.publish(EventType.TOOL_CALL_START, {
                "call_id": prep.call_id, "tool_name": prep.entry.spec.name,
                "tool": prep.entry.spec.name,  # OpenJarvis's key for the same name
                "arguments": prep.arguments, "run_id": self.run_id})

    def _publish_end(self, result: ToolResult, arguments: Any) -> None:
        bus = self.bus
        if bus is not None and bus.has_subscribers(EventType.TOOL_CALL_END):
            bus.publish(EventType.TOOL_CALL_END, {
                "call_id": result.call_id, "tool_name": result.tool_name,
                "tool": result.tool_name, "arguments": arguments, "success": result.success,
                "latency": result.latency_seconds, "error_type":
                result.error_type.value if result.error_type else None,
                "run_id": self.run_id, "result": result})

    def _publish_trust(self, change: dict[str, Any]) -> None:
        bus = self.bus
        if bus is not None:
            bus.publish(EventType.TRUST_CHANGED, {**change, "run_id": self.run_id,
                                                  "trust": self.trust.summary()})

    def _context(self, prep: _Prepared) -> ToolContext | None:
        if not prep.entry.wants_context:
            return None
        return ToolContext(run_id=self.run_id, call_id=prep.call_id,
                           tool_name=prep.entry.spec.name, bus=self.bus, grant=self.grant,
                           metadata=dict(self.metadata), trust=self.trust, fence=self.fence)

    def _over_abandoned(self, prep: _Prepared) -> ToolResult | None:
        """A failed result when too many timed-out calls still hold threads (None: go on)."""
        name = prep.entry.spec.name
        mine, total = ABANDONED.counts(name)
        if mine >= self.max_abandoned_per_tool:
            message = (f"tool {name} was not started: {mine} earlier calls of it timed out and "
                       f"are still running (the limit is {self.max_abandoned_per_tool}, "
                       f"[tools] max_abandoned_per_tool); try again later")
            cap, limit = "max_abandoned_per_tool", self.max_abandoned_per_tool
        elif total >= self.max_abandoned:
            message = (f"tool {name} was not started: {total} timed-out tool calls are still "
                       f"running (the limit is {self.max_abandoned}, [tools] "
                       f"max_abandoned_threads); try again later")
            cap, limit = "max_abandoned_threads", self.max_abandoned
        else:
            return None
        result = ToolResult.failure(name, message, ErrorType.TIMEOUT, cap=cap, limit=limit)
        result.call_id = prep.call_id
        prep.entry.stats.record(None, False)
        if self.budget is not None:
            self.budget.settle_tool(prep.spec, prep.call_id, None)
        self._publish_end(result, prep.arguments)
        return result

    def _timeout_for(self, prep: _Prepared) -> float:
        timeout = prep.entry.spec.timeout_seconds
        timeout = self.default_timeout if timeout is None else timeout
        left = None if self.budget is None else self.budget.remaining_seconds()
        if left is not None and left < timeout:  # a call ends with the run's time budget
            prep.budget_cut = timeout = left
        return timeout

    def _finish(self, prep: _Prepared, outcome: Any, error: BaseException | None,
                latency: float, timed_out: bool = False) -> ToolResult:
        entry = prep.entry
        name = entry.spec.name
        if timed_out and prep.budget_cut is not None:
            result = ToolResult.failure(
                name, f"tool {name} ran past the run's time budget (--budget-seconds; "
                f"{prep.budget_cut:.3g} s were left) and was abandoned", ErrorType.BUDGET)
        elif timed_out:
            timeout = entry.spec.timeout_seconds
            timeout = self.default_timeout if timeout is None else timeout
            result = ToolResult.failure(
                name, f"tool {name} timed out after {timeout:g} s and was abandoned",
                ErrorType.TIMEOUT, timeout_seconds=timeout)
            if self.bus is not None:
                self.bus.publish(EventType.TOOL_TIMEOUT, {
                    "call_id": prep.call_id, "tool_name": name, "tool": name, "timeout": timeout,
                    "arguments": prep.arguments, "run_id": self.run_id})
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
        limit = entry.spec.max_output_chars or self.max_output_chars
        if len(result.content) > limit:
            self._truncate(result, limit)
        gate.observe(self.trust, prep, result, ran=not timed_out)
        entry.stats.record(latency, result.success, timed_out)
        if self.budget is not None:
            self.budget.settle_tool(entry.spec, prep.call_id, result)
        self._publish_end(result, prep.arguments)
        return result

    @staticmethod
    def _truncate(result: ToolResult, limit: int) -> None:
        result.content, cut = _cut(result.content, limit)
        result.metadata["truncated_chars"] = cut
        # Text blocks carry the same text to ORS clients; they get the same limit.
        result.blocks = [TextBlock(_cut(b.text, limit)[0], b.detail) if isinstance(b, TextBlock)
                         else b for b in result.blocks]

    # --- running -----------------------------------------------------------------------
    def execute(self, call: CallLike) -> ToolResult:
        """Run one call and return its ToolResult; never raises for the tool's failure."""
        prep = self._prepare(call) if self.budget is None else self._admit(self._prepare(call))
        if type(prep) is ToolResult:
            return prep
        entry = prep.entry
        if self.bus is not None:
            self._publish_start(prep)
        context = self._context(prep) if entry.wants_context else None
        tool = entry.tool
        if entry.inline:
            # The tool bounds its own work, so no watchdog thread is needed.
            start = time.perf_counter()
            try:
                outcome = tool.invoke(prep.arguments, context)
            except (Exception, SystemExit) as exc:  # a tool's sys.exit() must not end the run
                return self._finish(prep, None, exc, time.perf_counter() - start)
            finally:
                _close(context)
            return self._finish(prep, outcome, None, time.perf_counter() - start)
        arguments = prep.arguments
        # The context is closed on the tool's own thread when it really ends (after a
        # timeout too), never while an abandoned tool may still use its resources.
        if entry.is_async:
            def job() -> Any:
                try:
                    return run_coroutine_sync(tool.ainvoke(arguments, context))
                finally:
                    _close(context)
        else:
            def job() -> Any:
                try:
                    return tool.invoke(arguments, context)
                finally:
                    _close(context)
        from concurrent.futures import TimeoutError as FutureTimeout

        refusal = self._over_abandoned(prep)
        if refusal is not None:
            _close(context)
            return refusal
        start = time.perf_counter()
        watch = _start_thread(job, entry.spec.name)
        future = watch.future
        try:
            outcome = future.result(timeout=self._timeout_for(prep))
        except FutureTimeout:
            watch.abandon()
            return self._finish(prep, None, None, time.perf_counter() - start, timed_out=True)
        except (Exception, SystemExit) as exc:  # a tool's sys.exit() must not end the run
            return self._finish(prep, None, exc, time.perf_counter() - start)
        return self._finish(prep, outcome, None, time.perf_counter() - start)

    def _lanes(self, calls: list[ToolCall]) -> list[list[int]]:
        """Group call indices into lanes: one per call, except that all calls of a
        `sequential` tool share one lane (run in their original order)."""
        lanes: dict[Any, list[int]] = {}
        for index, call in enumerate(calls):
            entry = self._entries.get(call.name) if isinstance(call.name, str) else None
            key = ("seq", entry.spec.name) if entry is not None and entry.sequential else index
            lanes.setdefault(key, []).append(index)
        return list(lanes.values())

    def execute_many(self, calls: Iterable[CallLike]) -> list[ToolResult]:
        """Run the calls of one turn concurrently; results come back in call order.

        At most `max_concurrency` calls run at once; calls of a `sequential` tool run one
        after another in their original order.
        """
        parsed = [_as_call(c) for c in calls]  # a malformed call raises here, in the caller
        if len(parsed) <= 1:
            return [self.execute(c) for c in parsed]
        results: list[ToolResult | None] = [None] * len(parsed)
        lanes = iter(self._lanes(parsed))
        take = threading.Lock()
        errors: list[BaseException] = []

        def worker() -> None:
            while True:
                with take:
                    lane = next(lanes, None)
                if lane is None:
                    return
                for i in lane:
                    try:
                        results[i] = self.execute(parsed[i])
                    except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                        errors.append(exc)
                        return

        count = min(self.max_concurrency, len(parsed))
        threads = [threading.Thread(target=worker, name="jarvis-executor", daemon=True)
                   for _ in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]

    async def aexecute(self, call: CallLike) -> ToolResult:
        """Async form of `execute`: async tools run on this loop, sync tools in a thread."""
        import asyncio

        prep = self._prepare(call) if self.budget is None else self._admit(self._prepare(call))
        if type(prep) is ToolResult:
            return prep
        entry = prep.entry
        if self.bus is not None:
            self._publish_start(prep)
        tool = entry.tool
        context = self._context(prep)
        start = time.perf_counter()
        if entry.inline:
            try:
                outcome = tool.invoke(prep.arguments, context)
            except (Exception, SystemExit) as exc:  # a tool's sys.exit() must not end the run
                return self._finish(prep, None, exc, time.perf_counter() - start)
            finally:
                _close(context)
            return self._finish(prep, outcome, None, time.perf_counter() - start)
        arguments = prep.arguments
        watch: _Watch | None = None
        if entry.is_async:
            task: asyncio.Future[Any] = asyncio.ensure_future(tool.ainvoke(arguments, context))
            if context is not None:  # runs when the coroutine really ends
                task.add_done_callback(lambda _: _close(context))
        else:
            def job() -> Any:
                try:
                    return tool.invoke(arguments, context)
                finally:
                    _close(context)

            refusal = self._over_abandoned(prep)
            if refusal is not None:
                _close(context)
                return refusal
            watch = _start_thread(job, entry.spec.name)
            task = asyncio.wrap_future(watch.future)
        # asyncio.wait (not wait_for) so a tool that swallows cancellation cannot hold us.
        done, _ = await asyncio.wait({task}, timeout=self._timeout_for(prep))
        if not done:
            task.cancel()
            if watch is not None:
                watch.abandon()
            return self._finish(prep, None, None, time.perf_counter() - start, timed_out=True)
        if task.cancelled():
            return self._finish(prep, None, RuntimeError("the tool's task was cancelled"),
                                time.perf_counter() - start)
        error = task.exception()
        if error is not None:
            return self._finish(prep, None, error, time.perf_counter() - start)
        return self._finish(prep, task.result(), None, time.perf_counter() - start)

    async def aexecute_many(self, calls: Iterable[CallLike]) -> list[ToolResult]:
        """Async form of `execute_many` (same ordering and concurrency rules)."""
        import asyncio

        parsed = [_as_call(c) for c in calls]
        gate = asyncio.Semaphore(self.max_concurrency)
        results: list[ToolResult | None] = [None] * len(parsed)

        async def run_lane(lane: list[int]) -> None:
            for i in lane:
                async with gate:
                    results[i] = await self.aexecute(parsed[i])

        await asyncio.gather(*(run_lane(lane) for lane in self._lanes(parsed)))
        return [r for r in results if r is not None]
