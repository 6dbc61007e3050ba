"""The event bus: a small, thread-safe publish/subscribe hub.

A subscriber that raises is logged and skipped; it never breaks the publisher. Publishing with
no subscribers is nearly free, so hot paths (the ToolExecutor) can publish unconditionally.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    """What happened; subscribers pick the types they want."""

    TOOL_CALL_START = "tool_call_start"
    TOOL_CALL_END = "tool_call_end"
    TOOL_TIMEOUT = "tool_timeout"
    TOOL_PROGRESS = "tool_progress"  # a long tool's progress report (MCP progress notifications)
    INFERENCE_START = "inference_start"
    INFERENCE_END = "inference_end"
    AGENT_TURN_START = "agent_turn_start"
    AGENT_TURN_END = "agent_turn_end"
    MEMORY_STORE = "memory_store"
    MEMORY_RETRIEVE = "memory_retrieve"
    SCHEDULER_TASK_START = "scheduler_task_start"
    SCHEDULER_TASK_END = "scheduler_task_end"
    RUN_START = "run_start"
    RUN_END = "run_end"
    # A run became tainted (read untrusted content) or private (read private data): which
    # call, when, and the run's trust summary (jarvis.trust).
    TRUST_CHANGED = "trust_changed"


@dataclass(slots=True, frozen=True)
class Event:
    """One published event: its type, its data and when it was published (epoch seconds)."""

    type: EventType
    data: dict[str, Any] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)


Subscriber = Callable[[Event], Any]


def _log_subscriber_failure(callback: Any, event_type: EventType) -> None:
    # logging is imported only here: it costs ~10 ms and is needed only when a subscriber breaks.
    import logging

    logging.getLogger("jarvis.events").exception(
        "event subscriber %r failed on %s", callback, event_type.value)


class EventBus:
    """Publish/subscribe by EventType; `subscribe(None, fn)` receives every event."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Copy-on-write tuples: publish reads them without taking the lock.
        self._subscribers: dict[EventType | None, tuple[Subscriber, ...]] = {}

    def subscribe(self, event_type: EventType | None, callback: Subscriber) -> Subscriber:
        """Call `callback(event)` for each event of `event_type` (None: all types)."""
        with self._lock:
            self._subscribers[event_type] = self._subscribers.get(event_type, ()) + (callback,)
        return callback

    def unsubscribe(self, event_type: EventType | None, callback: Subscriber) -> bool:
        """Remove a subscription; returns whether it existed."""
        with self._lock:
            current = self._subscribers.get(event_type, ())
            if callback not in current:
                return False
            remaining = list(current)
            remaining.remove(callback)
            self._subscribers[event_type] = tuple(remaining)
            return True

    def has_subscribers(self, event_type: EventType) -> bool:
        subs = self._subscribers
        return bool(subs.get(event_type) or subs.get(None))

    def publish(self, event_type: EventType, data: dict[str, Any] | None = None) -> Event | None:
        """Deliver an event to its subscribers, in subscription order.

        Returns the Event, or None when nobody listens (then no Event is built at all).
        """
        subs = self._subscribers
        targets = subs.get(event_type, ()) + subs.get(None, ())
        if not targets:
            return None
        event = Event(event_type, data or {})
        for callback in targets:
            try:
                callback(event)
            except Exception:
                _log_subscriber_failure(callback, event_type)
        return event

    def clear(self) -> None:
        with self._lock:
            self._subscribers = {}
