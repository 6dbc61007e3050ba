"""Benchmark: what the code sandbox costs, before (isolation = "none") and after, in one run.

  - `code_interpreter` call: `print(1)` through the ToolExecutor; every call is cold (a fresh
    sandbox started, and killed with everything in it when the call returns). Target: under
    300 ms median.
  - `repl` cold: the first call of a run, `1 + 1`, which starts the run's interpreter. Target:
    under 300 ms median.
  - `repl` warm: `1 + 1` in a run whose interpreter is up (target: under 20 ms median); between
    calls the interpreter is frozen, so each call includes SIGCONT, the CPU limit update
    (prlimit), the round trip, and SIGSTOP.

For each mechanism: "none" (a plain child process: rlimits + seccomp; the baseline), "bwrap"
(bubblewrap namespaces + Landlock + seccomp) and "namespaces" (jarvis's own unshare launcher +
Landlock + seccomp). Medians over interleaved rounds, so all three see the same load.

Run:  python bench/bench_sandbox.py [--quick] [--as-user]
  --as-user (as root): afterwards, the same benchmark as a throwaway unprivileged user with a
  venv of its own (tests/unprivileged.py), where the sandbox runs as that user's uid.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

QUICK = "--quick" in sys.argv
AS_USER = "--as-user" in sys.argv
MECHANISMS = ("none", "bwrap", "namespaces")
REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    from jarvis.core.types import ToolCall
    from jarvis.resources import release_run
    from jarvis.tools.code_interpreter import CodeInterpreterTool
    from jarvis.tools.executor import ToolExecutor
    from jarvis.tools.repl import ReplTool

    cold_rounds, warm_calls = (8, 50) if QUICK else (30, 200)
    once_ms: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    cold: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    warm: dict[str, list[float]] = {m: [] for m in MECHANISMS}
    once = {m: ToolExecutor([CodeInterpreterTool(isolation=m, requires_confirmation=False)])
            for m in MECHANISMS}
    repls = {m: ReplTool(isolation=m, requires_confirmation=False) for m in MECHANISMS}
    call = ToolCall(id="c", name="code_interpreter", arguments={"code": "print(1)"})
    step = ToolCall(id="r", name="repl", arguments={"code": "1 + 1"})
    for m in MECHANISMS:  # warm-up: probes, imports, first sandbox of each kind
        assert once[m].execute(call).content.strip() == "1"
        assert ToolExecutor([repls[m]], run_id=f"warm-up-{m}").execute(step).success
        release_run(f"warm-up-{m}")
    for n in range(cold_rounds):
        for m in MECHANISMS:
            start = time.perf_counter()
            result = once[m].execute(call)
            once_ms[m].append(time.perf_counter() - start)
            assert result.success and result.content.strip() == "1", result.content
            executor = ToolExecutor([repls[m]], run_id=f"cold-{m}-{n}")
            start = time.perf_counter()
            result = executor.execute(step)
            cold[m].append(time.perf_counter() - start)
            assert result.success and result.content.strip() == "2", result.content
            release_run(f"cold-{m}-{n}")
    runs = {m: ToolExecutor([repls[m]], run_id=f"bench-{m}") for m in MECHANISMS}
    for m in MECHANISMS:
        assert runs[m].execute(step).success
    for _ in range(warm_calls // 10):
        for m in MECHANISMS:
            for _ in range(10):
                start = time.perf_counter()
                result = runs[m].execute(step)
                warm[m].append(time.perf_counter() - start)
                assert result.success and result.content.strip() == "2", result.content
    for m in MECHANISMS:
        release_run(f"bench-{m}")

    who = f"uid {os.getuid()}" + (" (root)" if os.getuid() == 0 else "")
    print(f"as {who}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'measure':<44} {'median ms':>10} {'p90 ms':>8} {'vs none':>8}")
    for label, data, target in (("code_interpreter print(1)", once_ms, 0.300),
                                ("repl cold (first call) 1 + 1", cold, 0.300),
                                ("repl warm 1 + 1", warm, 0.020)):
        base = statistics.median(data["none"])
        for m in MECHANISMS:
            values = sorted(data[m])
            median = statistics.median(values)
            p90 = values[int(len(values) * 0.9) - 1]
            flag = "" if median < target else f"  OVER the {target * 1000:.0f} ms target"
            print(f"{label + ' [' + m + ']':<44} {median * 1000:>10.1f} {p90 * 1000:>8.1f} "
                  f"{median / base:>7.2f}x{flag}")


def as_unprivileged_user() -> None:
    """The same benchmark again as a throwaway user with a venv of its own."""
    sys.path.insert(0, str(REPO / "tests"))
    from unprivileged import ThrowawayUser

    with ThrowawayUser() as user:
        user.make_venv()
        argv = [str(user.python), "bench/bench_sandbox.py"] + (["--quick"] if QUICK else [])
        done = user.run(argv, cwd=REPO, timeout=1800)
        print(f"\n{user.name}:")
        print(done.stdout + done.stderr, end="")


if __name__ == "__main__":
    main()
    if AS_USER:
        if os.geteuid() != 0:
            sys.exit("--as-user needs root (it makes a throwaway user)")
        as_unprivileged_user()
