"""The event bus: a small, thread-safe publish/subscribe hub.

A subscriber that raises is logged and skipped; it never breaks the publisher. Publishing with
no subscribers is nearly free, so hot paths (the ToolExecutor) can publish unconditionally.
"""

from __future__ import annotations

import threading
import time
from collections import deque
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

    @property
    def event_type(self) -> EventType:
        """OpenJarvis's name for `type`."""
        return self.type


Subscriber = Callable[[Event], Any]


def _log_subscriber_failure(callback: Any, event_type: EventType) -> None:
    # logging is imported only here: it costs ~10 ms and is needed only when a subscriber breaks.
    import logging

    logging.getLogger("jarvis.events").exception(
        "event subscriber %r failed on %s", callback, event_type.value)


DEFAULT_MAX_HISTORY = 10_000


class EventBus:
    """Publish/subscribe by EventType; `subscribe(None, fn)` receives every event.

    Args:
        record_history: keep published events in `history` (for tests and telemetry).
        max_history: the most events kept; older ones are dropped first, so a long-lived
            bus that records costs bounded memory.
    """

    def __init__(self, *, record_history: bool = False,
                 max_history: int = DEFAULT_MAX_HISTORY) -> None:
        self._lock = threading.Lock()
        # Copy-on-write tuples: publish reads them without taking the lock.
        self._subscribers: dict[EventType | None, tuple[Subscriber, ...]] = {}
        self._history: deque[Event] | None = (
            deque(maxlen=max(1, int(max_history))) if record_history else None)

    @property
    def record_history(self) -> bool:
        return self._history is not None

    @property
    def history(self) -> list[Event]:
        """A copy of the recorded events, oldest first (empty when recording is off)."""
        if self._history is None:
            return []
        with self._lock:
            return list(self._history)

    def clear_history(self) -> None:
        """Forget the recorded events."""
        if self._history is not None:
            with self._lock:
                self._history.clear()

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
        """Whether publishing `event_type` reaches anyone (a recording bus counts)."""
        subs = self._subscribers
        return bool(subs.get(event_type) or subs.get(None)) or self._history is not None

    def publish(self, event_type: EventType, data: dict[str, Any] | None = None) -> Event | None:
        """Deliver an event to its subscribers, in subscription order.

        Returns the Event, or None when nobody listens and nothing is recorded (then no
        Event is built at all).
        """
        subs = self._subscribers
        targets = subs.get(event_type, ()) + subs.get(None, ())
        history = self._history
        if not targets and history is None:
            return None
        event = Event(event_type, data or {})
        if history is not None:
            with self._lock:
                history.append(event)
        for callback in targets:
            try:
                callback(event)
            except Exception:
                _log_subscriber_failure(callback, event_type)
        return event

    def clear(self) -> None:
        with self._lock:
            self._subscribers = {}


_default_bus: EventBus | None = None
_default_lock = threading.Lock()


def get_event_bus(*, record_history: bool = False) -> EventBus:
    """The process-wide EventBus (made on first use; `record_history` applies then).

    jarvis itself passes buses explicitly (`Jarvis(bus=...)`, `ToolExecutor(bus=...)`); this
    one is for code that shares one bus the OpenJarvis way.
    """
    global _default_bus
    with _default_lock:
        if _default_bus is None:
            _default_bus = EventBus(record_history=record_history)
        return _default_bus


def reset_event_bus() -> None:
    """Drop the process-wide EventBus; the next `get_event_bus()` makes a fresh one."""
    global _default_bus
    with _default_lock:
        _default_bus = None
