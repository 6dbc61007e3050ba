"""LoopGuard: stops an agent that keeps making the same tool call.

A call identical to an earlier one (same tool, same arguments) is allowed `max_repeats` times
in a run; after that it is not run and the model is told why. A model that keeps insisting
for `max_blocked_turns` turns ends the run (metadata `loop_detected`).
"""

from __future__ import annotations

import json
from typing import Any


def call_key(name: str, arguments: str | dict[str, Any]) -> str:
    """A canonical key for a call: key order and whitespace in the JSON do not matter."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return f"{name}\x00{arguments}"
    try:
        return f"{name}\x00{json.dumps(arguments, sort_keys=True, ensure_ascii=False)}"
    except (TypeError, ValueError):
        return f"{name}\x00{arguments!r}"


class LoopGuard:
    """Counts identical calls within one run."""

    __slots__ = ("max_repeats", "max_blocked_turns", "_counts", "_blocked_turns", "blocked")

    def __init__(self, max_repeats: int = 2, max_blocked_turns: int = 2) -> None:
        self.max_repeats = max(1, max_repeats)
        self.max_blocked_turns = max(1, max_blocked_turns)
        self._counts: dict[str, int] = {}
        self._blocked_turns = 0
        self.blocked: list[dict[str, Any]] = []

    def check(self, name: str, arguments: str | dict[str, Any]) -> str | None:
        """None if the call may run; else the message the model gets instead of a result."""
        key = call_key(name, arguments)
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        if count <= self.max_repeats:
            return None
        self.blocked.append({"name": name, "arguments": arguments})
        return (f"loop guard: {name} was already called {count - 1} times with exactly these "
                f"arguments, so the call was not run again. Use the earlier result, try "
                f"different arguments, or give your final answer.")

    def end_turn(self, any_ran: bool) -> bool:
        """Record a turn's outcome; True when the run should stop (only blocked calls, again)."""
        if any_ran:
            self._blocked_turns = 0
            return False
        self._blocked_turns += 1
        return self._blocked_turns >= self.max_blocked_turns
