"""Benchmark: the ReAct reply parser and the streamed-answer filter on hostile input, up to 1 MB,
against the old code (kept below as the baseline, measured in the same run).

  - `<tool_call>` search on '<tool_call>x' + N spaces + 'y' (an unclosed tag whose body the old
    lazy regex re-scanned from every position): old regex vs find_tool_call
  - ``` fence search on '```' + N letters (no closing fence): old regex vs find_fence
  - the Final Answer stream filter fed N one-character deltas with no marker: old class
    (re-searches the whole buffer per delta) vs _AnswerStream (the current line only)

The old code is quadratic, so it is measured on small N only and its growth shown as the ratio
between sizes; the new code is measured up to 1 MB (the filter with its usual 200 000-character
cap lifted, so it really reads all of it).

Run:  python bench/bench_react.py [--quick]
"""

from __future__ import annotations

import re
import sys
import time

from jarvis.agents.react import _AnswerStream
from jarvis.agents.react_parser import _ACTION, _FINAL, find_fence, find_tool_call

QUICK = "--quick" in sys.argv
OLD_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL | re.IGNORECASE)
OLD_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)


class OldAnswerStream:
    """The filter as it was: the buffer grows per delta and both markers are searched in all of
    it each time."""

    def __init__(self, sink) -> None:  # noqa: ANN001
        self.sink, self.buffer, self.started, self.blocked = sink, "", False, False

    def __call__(self, delta: str) -> None:
        if self.started:
            self.sink(delta)
            return
        if self.blocked or len(self.buffer) > 200_000:
            return
        self.buffer += delta
        final = _FINAL.search(self.buffer)
        action = _ACTION.search(self.buffer)
        if action is not None and (final is None or action.start() < final.start()):
            self.blocked = True
        elif final is not None:
            self.started = True
            self.sink(self.buffer[final.end():])


def timed(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def feed(stream, text: str) -> None:  # noqa: ANN001
    for ch in text:
        stream(ch)


def row(name: str, sizes: list[int], seconds: list[float]) -> None:
    cells = "  ".join(f"{n:>9,}: {s * 1000:9.1f} ms" for n, s in zip(sizes, seconds, strict=True))
    growth = seconds[-1] / seconds[0] if seconds[0] > 0 else float("inf")
    scale = sizes[-1] / sizes[0]
    print(f"{name:<34} {cells}   x{growth:,.0f} time for x{scale:,.0f} input")


def main() -> None:
    old_sizes = [2_000, 4_000, 8_000] if QUICK else [5_000, 10_000, 20_000]
    new_sizes = [10_000, 100_000, 1_000_000]

    print("<tool_call>x + N spaces + y")
    tag = lambda n: "<tool_call>x" + " " * n + "y"  # noqa: E731
    row("  old regex", old_sizes, [timed(lambda t=tag(n): OLD_TOOL_CALL.search(t))
                                  for n in old_sizes])
    row("  find_tool_call", new_sizes, [timed(lambda t=tag(n): find_tool_call(t))
                                       for n in new_sizes])

    print("``` + N letters, no closing fence")
    fence = lambda n: "```" + "a" * n  # noqa: E731
    row("  old regex", old_sizes, [timed(lambda t=fence(n): OLD_FENCE.search(t))
                                  for n in old_sizes])
    row("  find_fence", new_sizes, [timed(lambda t=fence(n): find_fence(t)) for n in new_sizes])

    print("stream filter, N one-character deltas, no marker (80-character lines)")
    text = lambda n: ("Thought: " + "x" * 70 + "\n") * (n // 80 + 1)  # noqa: E731
    row("  old filter", old_sizes, [timed(lambda t=text(n)[:n]: feed(OldAnswerStream(print), t))
                                   for n in old_sizes])
    row("  _AnswerStream", new_sizes,
        [timed(lambda t=text(n)[:n], n=n: feed(_AnswerStream(print, limit=2 * n), t))
         for n in new_sizes])
    print("stream filter, N one-character deltas on one line (no newline at all)")
    line = lambda n: "x" * n  # noqa: E731
    row("  old filter", old_sizes, [timed(lambda t=line(n): feed(OldAnswerStream(print), t))
                                   for n in old_sizes])
    row("  _AnswerStream", new_sizes,
        [timed(lambda t=line(n), n=n: feed(_AnswerStream(print, limit=2 * n), t))
         for n in new_sizes])


if __name__ == "__main__":
    main()
