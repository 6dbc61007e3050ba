"""Timing helpers shared by the per-call benchmarks (bench_trust.py, bench_budget.py)."""

from __future__ import annotations

import gc
import time
from typing import Any


def per_call(fn: Any, n: int) -> float:
    """Mean seconds per call of `fn` over `n` calls."""
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def best(fns: dict[str, Any], n: int, rounds: int) -> dict[str, float]:
    """Best-of-`rounds` mean seconds per call of each fn, the rounds interleaved so every fn
    sees the same load (the minimum over short windows is the cost without interference)."""
    for fn in fns.values():
        per_call(fn, n)  # warm up
    found: dict[str, float] = dict.fromkeys(fns, float("inf"))
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in fns.items():
                found[name] = min(found[name], per_call(fn, n))
    finally:
        gc.enable()
    return found
