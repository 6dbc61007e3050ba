"""Asserting that work grows linearly with its input, measured inside the test.

A wall-time bound ("under 10 s") passes quadratic code on a fast machine and fails linear code
on a slow one. Growth is what matters: the time at 4x the input against the time at 1x. Linear
code takes about 4x, quadratic about 16x; the assertion fails at 8x.

Against load on a shared machine: the time is this thread's CPU time (time.thread_time), not
the wall clock: under load the wall clock counts other processes' turns, and a sample of the
large input, four times longer, was interrupted more often than the small one's best (10.6x
measured for linear work, with two busy loops beside two test processes on two cores). Each
timing repeats the work until it lasts at least MIN_SAMPLE seconds (a sub-millisecond regex is
all noise otherwise), the two sizes are timed in turn, each keeps the best of its samples, and
a failing measurement is taken once more, with more samples, before failing. A sample of the
large input stops as soon as it is over the limit, so quadratic code fails in about a second
rather than running for minutes. The work measured must run on the calling thread.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from typing import Any

MIN_SAMPLE = 0.02


def _calibrate(run: Callable[[Any], Any], data: Any) -> int:
    """How many runs on `data` last at least MIN_SAMPLE seconds (from the fastest of a few
    single runs, so that a burst of load cannot make the samples too short)."""
    fastest = float("inf")
    for _ in range(5):
        start = time.thread_time()
        run(data)
        fastest = min(fastest, time.thread_time() - start)
    return max(1, min(1 << 16, math.ceil(MIN_SAMPLE / max(fastest, 1e-7))))


def _sample(run: Callable[[Any], Any], data: Any, count: int, cap: float) -> float:
    """Seconds per `count` runs on `data`, or inf once over `cap`."""
    start = time.thread_time()
    for _ in range(count):
        run(data)
        elapsed = time.thread_time() - start
        if elapsed > cap:
            return float("inf")
    return elapsed


def growth(make: Callable[[int], Any], run: Callable[[Any], Any], n: int, *, factor: int = 4,
           limit: float = 8.0, samples: int = 3) -> tuple[float, float]:
    """(best time at n, best time at factor * n) for the same number of runs each; the large
    one is inf when every sample of it went over `limit` times the small one."""
    small, large = make(n), make(factor * n)
    enabled = gc.isenabled()
    gc.disable()
    try:
        run(small)  # warm-up: imports, caches, compiled patterns
        count = _calibrate(run, small)
        best_small = best_large = float("inf")
        for _ in range(samples):
            best_small = min(best_small, _sample(run, small, count, float("inf")))
            best_large = min(best_large, _sample(run, large, count, limit * best_small))
        return best_small, best_large
    finally:
        if enabled:
            gc.enable()


def assert_linear(make: Callable[[int], Any], run: Callable[[Any], Any], n: int, *,
                  factor: int = 4, limit: float = 8.0, what: str = "the work") -> None:
    """Fail unless `run(make(factor * n))` takes under `limit` times as long as
    `run(make(n))` (measured twice before failing)."""
    for samples in (3, 5):
        small, large = growth(make, run, n, factor=factor, limit=limit, samples=samples)
        if large < limit * small:
            return
    took = (f"more than {limit}x the time" if large == float("inf")
            else f"{large / small:.1f}x the time (the limit is {limit}x)")
    raise AssertionError(f"{what} grows faster than linearly: {factor}x the input took {took}; "
                         f"linear is ~{factor}x ({small * 1000:.1f} ms for the runs at n={n})")
