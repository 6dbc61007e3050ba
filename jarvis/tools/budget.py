"""Budgets per ask: dollars, seconds and tool calls a run may spend, checked before each call.

`Budget` is the limit (`jarvis ask --budget-usd 0.05 --budget-seconds 30 --max-tool-calls 20`,
`ask_full(budget=...)`, an agent file's `budget_*` keys, a scheduled task's budget, `[agent]`
defaults). `BudgetMeter` is one run's spend against it: the ToolExecutor asks it before every
tool call and the agent before every engine call. A call whose estimate would take the spend
past a limit is not made:

- a tool call gets a failed ToolResult (error_type `budget`) the model reads, so it can answer
  with what it has; a run that calls again after such a refusal (a later reply) stops there;
- an engine call that would overrun stops the run (BudgetExhausted, caught by the agent).

Either way the run ends "incomplete" (exit code 3 on the CLI) with what was spent.

Estimates. A tool call: its cost is the measured mean `cost_usd` of its earlier calls in the
run log (when tools reported one), else the spec's `cost_estimate`; its duration is the median
latency of its earlier calls (this run's and the run log's last `HISTORY_CALLS`, so it holds
across processes), else the spec's `latency_estimate`. A finished call is charged its reported
`cost_usd`, or the spec's `cost_estimate` when it reported none. An engine call: input tokens
are about a quarter of the prompt's characters, output tokens the run's largest completion so
far (else `DEFAULT_COMPLETION_TOKENS`, at most `max_tokens`), priced from `[engine.prices]`
(USD per million tokens; 0 on local engines); its duration the median of the run's earlier
engine calls. A model with no known price cannot run under a dollar budget: that is a
UserError before any call, never a guess.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from jarvis.core.types import ErrorType, ToolResult
from jarvis.errors import UserError

MAX_USD = 1_000_000.0
MAX_SECONDS = 30 * 24 * 3600.0
MAX_TOOL_CALLS = 1_000_000
HISTORY_CALLS = 50  # earlier calls of a tool read from the run log for its estimates
DEFAULT_COMPLETION_TOKENS = 256
CHARS_PER_TOKEN = 4

# (tool name) -> [(latency_seconds, cost_usd), ...] of its recent calls in the run log
History = Callable[[str], list[tuple[float | None, float | None]]]


class BudgetExhausted(Exception):  # noqa: N818 - a stop, not an error the user made
    """The run cannot go on inside its budget (raised to the agent, which ends the run)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Budget:
    """What one ask may spend; None: no limit on that."""

    usd: float | None = None
    seconds: float | None = None
    tool_calls: int | None = None

    def __post_init__(self) -> None:
        for name, value, top in (("usd", self.usd, MAX_USD), ("seconds", self.seconds, MAX_SECONDS)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"budget {name} must be a number, not {value!r}")
            if not math.isfinite(value) or value <= 0 or value > top:
                raise UserError(f"budget {name} must be a number above 0 and at most {top:g}, "
                                f"not {value!r}")
        calls = self.tool_calls
        if calls is not None and (isinstance(calls, bool) or not isinstance(calls, int)
                                  or not 0 <= calls <= MAX_TOOL_CALLS):
            raise UserError(f"budget tool_calls (max tool calls) must be a whole number from 0 to "
                            f"{MAX_TOOL_CALLS}, not {calls!r}")

    @property
    def empty(self) -> bool:
        return self.usd is None and self.seconds is None and self.tool_calls is None

    @classmethod
    def of(cls, value: Any, default: Budget | None = None) -> Budget:
        """A Budget from a Budget, a dict ({"usd", "seconds", "tool_calls"}) or None; the keys
        it leaves out come from `default` (the agent's or config's)."""
        base = default or cls()
        if value is None:
            return base
        if isinstance(value, Budget):
            given = value.to_dict()
        elif isinstance(value, Mapping):
            unknown = set(value) - {"usd", "seconds", "tool_calls"}
            if unknown:
                raise UserError(f"unknown budget key(s) {sorted(map(str, unknown))}; the keys are "
                                f"usd, seconds and tool_calls")
            given = dict(value)
        else:
            raise UserError(f"budget must be a Budget or a dict with usd, seconds and tool_calls, "
                            f"not {type(value).__name__}")
        merged = base.to_dict()
        merged.update({k: v for k, v in given.items() if v is not None})
        return cls(**merged)

    def to_dict(self) -> dict[str, Any]:
        return {"usd": self.usd, "seconds": self.seconds, "tool_calls": self.tool_calls}


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million input and output tokens of one model."""

    input: float
    output: float

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


def find_price(prices: Mapping[str, Any], model: str, engine_id: str) -> Price | None:
    """The model's price: `[engine.prices]` by exact name, then by glob; 0 on a local engine
    (ollama, vllm, ...); None when nobody said."""
    entry = prices.get(model)
    if entry is None:
        entry = next((v for k, v in prices.items() if fnmatchcase(model, k)), None)
    if entry is not None:
        return Price(float(_get(entry, "input")), float(_get(entry, "output")))
    from jarvis.engine.backends import LOCAL_BACKENDS

    return Price(0.0, 0.0) if engine_id in LOCAL_BACKENDS else None


def _get(entry: Any, key: str) -> Any:
    return entry[key] if isinstance(entry, Mapping) else getattr(entry, key)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    data = sorted(values)
    mid = len(data) // 2
    return data[mid] if len(data) % 2 else (data[mid - 1] + data[mid]) / 2


class BudgetMeter:
    """One run's spend against its Budget (thread-safe: the calls of one reply run together).

    Args:
        budget: the limits (an empty Budget only measures).
        price: the model's Price (None: unknown; refused with a dollar limit).
        model / engine_id: named in messages and the report.
        history: `fn(tool_name)` -> recent (latency, cost) of the tool in the run log.
        max_tokens: the engine's completion limit, if any (bounds the output estimate).
    """

    def __init__(self, budget: Budget | None = None, *, price: Price | None = None,
                 model: str = "", engine_id: str = "", history: History | None = None,
                 max_tokens: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget = budget or Budget()
        if self.budget.usd is not None and price is None:
            raise UserError(f"a dollar budget needs the price of model {model!r} on engine "
                            f"{engine_id!r}, and none is known: add it to config.toml as "
                            f'[engine.prices] "{model}" = {{ input = USD, output = USD }} '
                            f"(per million tokens), or leave out the dollar budget")
        self.price = price
        self.model = model
        self.engine_id = engine_id
        self.history = history
        self.max_tokens = max_tokens
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        self.tool_usd = 0.0
        self.engine_usd = 0.0
        self.tool_calls = 0  # admitted (running or done)
        self.engine_calls = 0
        self.refused = 0
        self.stopped: str | None = None
        self._reserved: dict[str, float] = {}
        # Per tool, the last HISTORY_CALLS measured (the run log's, then this run's).
        self._latencies: dict[str, deque[float]] = {}
        self._costs: dict[str, deque[float]] = {}
        self._estimates: dict[str, tuple[float, float]] = {}  # per tool, until it is measured
        self._unseen: dict[str, int] = {}  # measurements since the tool's estimate was made
        self._engine_seconds: deque[float] = deque(maxlen=HISTORY_CALLS)
        self._max_completion = 0
        self._refused_at: int | None = None  # engine_calls when a call was first refused

    # --- tools --------------------------------------------------------------------------------
    def _known(self, name: str) -> tuple[deque[float], deque[float]]:
        """Measured latencies and reported costs of `name` (the run log's, then this run's)."""
        if name not in self._latencies:
            latencies: list[float] = []
            costs: list[float] = []
            if self.history is not None:
                try:
                    rows = self.history(name)
                except Exception:  # noqa: BLE001 - a broken log only loses the refinement
                    rows = []
                latencies = [lat for lat, _ in rows if lat is not None and lat >= 0]
                costs = [c for _, c in rows if c]
            self._latencies[name] = deque(latencies, maxlen=HISTORY_CALLS)
            self._costs[name] = deque(costs, maxlen=HISTORY_CALLS)
        return self._latencies[name], self._costs[name]

    def estimate_tool(self, spec: Any) -> tuple[float, float]:
        """(usd, seconds) one call of the tool is expected to take."""
        b = self.budget
        usd = seconds = 0.0
        known = self._estimates.get(spec.name)
        if known is not None:
            return known
        if b.usd is not None or b.seconds is not None:
            latencies, costs = self._known(spec.name)
            if costs:
                usd = sum(costs) / len(costs)
            else:
                usd = float(spec.cost_estimate or 0.0)
            measured = _median(list(latencies))
            seconds = measured if measured is not None else float(spec.latency_estimate or 0.0)
        self._estimates[spec.name] = (usd, seconds)
        return usd, seconds

    def admit_tool(self, spec: Any, call_id: str) -> str | None:
        """None: the call may run (its estimate is reserved); else why it may not."""
        b = self.budget
        with self._lock:
            if b.empty:
                self.tool_calls += 1
                return None
            usd, seconds = self.estimate_tool(spec)
            problem = None
            if b.tool_calls is not None and self.tool_calls + 1 > b.tool_calls:
                problem = (f"the run's {b.tool_calls} tool calls (--max-tool-calls) are used up")
            elif b.usd is not None and self._usd() + usd > b.usd + 1e-12:
                problem = (f"it is estimated at ${usd:.6g} and ${self._usd():.6g} of the run's "
                           f"${b.usd:g} (--budget-usd) is spent")
            elif b.seconds is not None and self.elapsed() + seconds > b.seconds:
                problem = (f"it is estimated at {seconds:.3g} s and {self.elapsed():.3g} s of the "
                           f"run's {b.seconds:g} s (--budget-seconds) have passed")
            if problem is None:
                self.tool_calls += 1
                self._reserved[call_id] = usd
                return None
            self.refused += 1
            if self._refused_at is None:
                self._refused_at = self.engine_calls
            elif self.engine_calls > self._refused_at:
                # Told once, the model called again: it cannot finish inside the budget.
                self.stopped = f"tool {spec.name} was refused again: {problem}"
                raise BudgetExhausted(self.stopped)
            return (f"not run: the budget does not allow this call of {spec.name}: {problem}. "
                    f"Answer now with what you have")

    def refusal(self, spec: Any, call_id: str, message: str) -> ToolResult:
        result = ToolResult.failure(spec.name, message, ErrorType.BUDGET,
                                    budget=self.budget.to_dict())
        result.call_id = call_id
        return result

    def settle_tool(self, spec: Any, call_id: str, result: ToolResult | None) -> None:
        """Charge a finished call (None: it never started, release what it reserved)."""
        with self._lock:
            self._reserved.pop(call_id, None)
            if result is None:
                self.tool_calls -= 1
                return
            cost = result.cost_usd if result.cost_usd else float(spec.cost_estimate or 0.0)
            self.tool_usd += cost
            known = self._latencies.get(spec.name)
            if known is not None and result.latency_seconds:
                known.append(result.latency_seconds)
                # The median is taken again after every len/8 new measurements (sorting the
                # window on every call was most of the check's cost).
                self._unseen[spec.name] = unseen = self._unseen.get(spec.name, 0) + 1
                if unseen >= max(1, len(known) // 8):
                    self._unseen[spec.name] = 0
                    self._estimates.pop(spec.name, None)
                if result.cost_usd:
                    self._costs[spec.name].append(result.cost_usd)

    def remaining(self) -> dict[str, Any] | None:
        """The limits a continuation of this run gets (a parked run resumed later): dollars
        and tool calls less what was spent; the time limit anew (the wait for a person is
        not the run's time). None without limits."""
        b = self.budget
        if b.empty:
            return None
        with self._lock:
            usd = None if b.usd is None else max(b.usd - self.tool_usd - self.engine_usd, 1e-9)
            calls = None if b.tool_calls is None else max(b.tool_calls - self.tool_calls, 0)
        return {"usd": usd, "seconds": b.seconds, "tool_calls": calls}

    def remaining_seconds(self) -> float | None:
        """Seconds left (for a tool's timeout), None without a time limit."""
        if self.budget.seconds is None:
            return None
        return max(0.001, self.budget.seconds - self.elapsed())

    # --- the engine ---------------------------------------------------------------------------
    def before_engine(self, messages: list[Any]) -> None:
        """Raise BudgetExhausted when the next engine call would overrun the budget."""
        b = self.budget
        if b.usd is None and b.seconds is None:
            return
        with self._lock:
            problem = None
            if b.usd is not None and self.price is not None:
                chars = sum(len(m.content or "") if isinstance(getattr(m, "content", None), str)
                            else 200 for m in messages)
                out = self._max_completion or DEFAULT_COMPLETION_TOKENS
                if self.max_tokens:
                    out = min(out, self.max_tokens)
                usd = self.price.cost(chars / CHARS_PER_TOKEN, out)
                if self._usd() + usd > b.usd + 1e-12:
                    problem = (f"the next call of model {self.model} is estimated at ${usd:.6g} "
                               f"and ${self._usd():.6g} of ${b.usd:g} is spent")
            if problem is None and b.seconds is not None:
                seconds = _median(list(self._engine_seconds)) or 0.0
                if self.elapsed() + seconds > b.seconds:
                    problem = (f"the next call of model {self.model} is estimated at "
                               f"{seconds:.3g} s and {self.elapsed():.3g} s of {b.seconds:g} s "
                               f"have passed")
            if problem is not None:
                self.stopped = problem
                raise BudgetExhausted(problem)

    def after_engine(self, usage: Mapping[str, Any], seconds: float) -> None:
        with self._lock:
            self.engine_calls += 1
            self._engine_seconds.append(seconds)
            completion = int(usage.get("completion_tokens") or 0)
            self._max_completion = max(self._max_completion, completion)
            if self.price is not None:
                self.engine_usd += self.price.cost(int(usage.get("prompt_tokens") or 0), completion)

    # --- the report ---------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.started

    def _usd(self) -> float:
        return self.tool_usd + self.engine_usd + sum(self._reserved.values())

    def report(self) -> dict[str, Any]:
        """The spend against the limits (in `--json`, the run log and `jarvis runs show`)."""
        with self._lock:
            engine = None if self.price is None else round(self.engine_usd, 9)
            return {"limits": self.budget.to_dict(),
                    "spent": {"usd": round(self.tool_usd + (engine or 0.0), 9),
                              "tool_usd": round(self.tool_usd, 9), "engine_usd": engine,
                              "seconds": round(self.elapsed(), 6), "tool_calls": self.tool_calls,
                              "engine_calls": self.engine_calls},
                    "refused_calls": self.refused, "exhausted": self.stopped,
                    "model_price": None if self.price is None else
                    {"input": self.price.input, "output": self.price.output}}


def spend_line(report: Mapping[str, Any]) -> str:
    """A spend report (BudgetMeter.report) in one line: `spent $0.02 of $0.05, 1.2 s, 2 tool
    calls of 2; why it stopped`."""
    spent, limits = report.get("spent") or {}, report.get("limits") or {}
    usd = "?" if spent.get("engine_usd") is None else f"{spent.get('usd') or 0:.4g}"
    parts = [f"${usd}" + (f" of ${limits['usd']:g}" if limits.get("usd") else ""),
             f"{spent.get('seconds') or 0:.1f} s" + (f" of {limits['seconds']:g} s"
                                                   if limits.get("seconds") else ""),
             f"{spent.get('tool_calls') or 0} tool calls" + (
                 f" of {limits['tool_calls']}" if limits.get("tool_calls") is not None else "")]
    why = report.get("exhausted")
    return "spent " + ", ".join(parts) + (f"; {why}" if why else "")


def meter_for(config: Any, spec: Any, given: Any, *, engine: Any, model: str,
              log: Any) -> BudgetMeter:
    """One ask's BudgetMeter: `given` (ask_full's budget) over the agent file's `budget_*`
    keys over `[agent]`'s; prices from `[engine.prices]`; measured stats from the run log."""
    a = config.agent
    budget = Budget(a.budget_usd, a.budget_seconds, a.max_tool_calls)
    if spec is not None:
        budget = Budget.of({"usd": getattr(spec, "budget_usd", None),
                            "seconds": getattr(spec, "budget_seconds", None),
                            "tool_calls": getattr(spec, "max_tool_calls", None)}, budget)
    budget = Budget.of(given, budget)
    engine_id = str(getattr(engine, "engine_id", "") or type(engine).__name__)
    price = find_price(config.engine.prices, model or "", engine_id)
    estimates = budget.usd is not None or budget.seconds is not None
    history = getattr(log, "tool_history", None) if estimates else None
    return BudgetMeter(budget, price=price, model=model, engine_id=engine_id, history=history,
                       max_tokens=config.engine.max_tokens)
