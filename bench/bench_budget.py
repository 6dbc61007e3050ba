"""Benchmark: what the budget check costs per call (issue 26, item 3), against the same calls
with no budget, measured in the same run.

A tool that does nothing (inline, so only the machinery is measured) runs through
ToolExecutor.execute:

  no budget           the executor without a meter (the baseline)
  measuring only      a meter with no limits (what every ask without a budget pays: it counts
                      the spend for the report)
  full budget         usd, seconds and tool-call limits that never refuse: the estimate (spec,
                      measured latencies), the reservation and the settlement per call
  refused             a meter whose tool-call budget is used up: the refusal result

and per engine call: BudgetMeter.before_engine + after_engine with a 20-message transcript
(the price estimate over the prompt's characters, the time estimate), against nothing.
Once per run and tool: reading the tool's last 50 calls from a run log on disk (SQLite).

Run:  python bench/bench_budget.py [--quick]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import best  # noqa: E402

QUICK = "--quick" in sys.argv


def main() -> None:
    from jarvis.core.types import Message, ToolCall, ToolResult
    from jarvis.runlog import RunLog
    from jarvis.tools.base import BaseTool
    from jarvis.tools.budget import Budget, BudgetMeter, Price
    from jarvis.tools.executor import ToolExecutor
    from jarvis.tools.spec import ToolSpec

    class Quiet(BaseTool):
        tool_id = "quiet"
        inline = True
        _SPEC = ToolSpec(name="quiet", description="nothing", parameters={
            "type": "object", "properties": {"x": {"type": "string"}}},
            cost_estimate=0.0001, latency_estimate=0.001, output_labels=frozenset(),
            egress="none")

        @property
        def spec(self) -> ToolSpec:
            return self._SPEC

        def execute(self, **params: Any) -> ToolResult:
            return ToolResult("quiet", "ok")

    n, rounds = (2_000, 3) if QUICK else (20_000, 7)
    price = Price(0.15, 0.6)
    huge = Budget(usd=1e6, seconds=1e6, tool_calls=1_000_000)
    call = ToolCall(id="c1", name="quiet", arguments={"x": "a"})

    def executor(meter: Any) -> ToolExecutor:
        return ToolExecutor([Quiet()], budget=meter)

    plain = executor(None)
    measuring = executor(BudgetMeter(Budget(), price=price))
    limited = executor(BudgetMeter(huge, price=price, history=lambda name: [(0.001, None)] * 50))
    spent = BudgetMeter(Budget(tool_calls=0), price=price)
    refusing = executor(spent)

    fns = {"no budget": lambda: plain.execute(call),
           "measuring only": lambda: measuring.execute(call),
           "full budget": lambda: limited.execute(call),
           "refused": lambda: refusing.execute(call)}
    results = best(fns, n, rounds)

    base = results["no budget"]
    print(f"per tool call through ToolExecutor.execute (best of {rounds} rounds of {n}):")
    print(f"  {'variant':<16} {'µs/call':>8} {'extra µs':>9} {'ratio':>6}")
    for name, value in results.items():
        print(f"  {name:<16} {value * 1e6:8.2f} {(value - base) * 1e6:9.2f} "
              f"{value / base:6.2f}")

    messages = [Message(role="user" if i % 2 else "assistant", content="word " * 60)
                for i in range(20)]
    engine_meter = BudgetMeter(huge, price=price)
    usage = {"prompt_tokens": 1200, "completion_tokens": 80}

    def engine_check() -> None:
        engine_meter.before_engine(messages)
        engine_meter.after_engine(usage, 0.5)

    engine = best({"nothing": lambda: None, "engine check": engine_check}, n, rounds)
    engine_meter._engine_seconds.clear()
    print("per engine call (before_engine + after_engine, 20 messages):")
    print(f"  {(engine['engine check'] - engine['nothing']) * 1e6:.2f} µs")

    with tempfile.TemporaryDirectory() as tmp:
        log = RunLog(Path(tmp) / "runs.db")
        for i in range(200):
            log.record({"id": f"r{i}", "created_at": time.time(), "status": "ok"},
                       [{"tool_name": name, "call_id": f"c{i}", "success": True,
                         "latency_seconds": 0.01, "cost_usd": 0.0}
                        for name in ("quiet", "other", "third")])
        reads = 200 if QUICK else 2_000
        history = best({"history": lambda: log.tool_history("quiet")}, reads, rounds)["history"]
        log.close()
    print(f"once per run and tool: the run log's last 50 calls of it: {history * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
