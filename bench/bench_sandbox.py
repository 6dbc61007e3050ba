"""Benchmark: what the code sandbox costs, before (isolation = "none") and after, in one run.

  - cold `code_interpreter` call: `print(1)` through the ToolExecutor, a fresh sandbox started
    and killed by the call (target: under 300 ms median)
  - warm `repl` call: `1 + 1` in a run whose interpreter is already up (target: under 20 ms
    median); between calls the interpreter is frozen, so each call includes SIGCONT, the CPU
    limit update (prlimit), the round trip, and SIGSTOP

For each mechanism: "none" (the old plain child process: rlimits + seccomp; the baseline),
"bwrap" (bubblewrap namespaces + Landlock + seccomp) and "namespaces" (jarvis's own unshare
launcher + Landlock + seccomp). Medians over interleaved rounds, so all three see the same load.

Run:  python bench/bench_sandbox.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time

QUICK = "--quick" in sys.argv
MECHANISMS = ("none", "bwrap", "namespaces")


def main() -> None:
    from jarvis.core.types import ToolCall
    from jarvis.resources import release_run
    from jarvis.tools.code_interpreter import CodeInterpreterTool
    from jarvis.tools.executor import ToolExecutor
    from jarvis.tools.repl import ReplTool

    cold_rounds, warm_calls = (8, 50) if QUICK else (30, 200)
    cold: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    warm: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    once = {m: ToolExecutor([CodeInterpreterTool(isolation=m, requires_confirmation=False)])
            for m in MECHANISMS}
    repl = {m: ToolExecutor([ReplTool(isolation=m, requires_confirmation=False)],
                            run_id=f"bench-{m}") for m in MECHANISMS}
    call = ToolCall(id="c", name="code_interpreter", arguments={"code": "print(1)"})
    for m in MECHANISMS:  # warm-up: probes, imports, first sandbox of each kind
        assert once[m].execute(call).content.strip() == "1"
        assert repl[m].execute(ToolCall(id="w", name="repl", arguments={"code": "1"})).success
    for _ in range(cold_rounds):
        for m in MECHANISMS:
            start = time.perf_counter()
            result = once[m].execute(call)
            cold[m].append(time.perf_counter() - start)
            assert result.success and result.content.strip() == "1", result.content
    step = ToolCall(id="r", name="repl", arguments={"code": "1 + 1"})
    for _ in range(warm_calls // 10):
        for m in MECHANISMS:
            for _ in range(10):
                start = time.perf_counter()
                result = repl[m].execute(step)
                warm[m].append(time.perf_counter() - start)
                assert result.success and result.content.strip() == "2", result.content
    for m in MECHANISMS:
        release_run(f"bench-{m}")

    base_cold = statistics.median(cold["none"])
    base_warm = statistics.median(warm["none"])
    print(f"{'measure':<44} {'median ms':>10} {'p90 ms':>8} {'vs none':>8}")
    for label, data, base, target in (("cold code_interpreter print(1)", cold, base_cold, 0.300),
                                      ("warm repl 1 + 1", warm, base_warm, 0.020)):
        for m in MECHANISMS:
            values = sorted(data[m])
            median = statistics.median(values)
            p90 = values[int(len(values) * 0.9) - 1]
            flag = "" if median < target else f"  OVER the {target * 1000:.0f} ms target"
            print(f"{label + ' [' + m + ']':<44} {median * 1000:>10.1f} {p90 * 1000:>8.1f} "
                  f"{median / base:>7.2f}x{flag}")


if __name__ == "__main__":
    main()
