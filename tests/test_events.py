"""EventBus: subscribe / unsubscribe / publish, failing subscribers, thread safety."""

from __future__ import annotations

import logging
import threading

from jarvis.core.events import Event, EventBus, EventType


def test_event_types_cover_the_contract():
    names = {e.name for e in EventType}
    assert names >= {"TOOL_CALL_START", "TOOL_CALL_END", "TOOL_TIMEOUT", "INFERENCE_START",
                     "INFERENCE_END", "AGENT_TURN_START", "AGENT_TURN_END", "MEMORY_STORE",
                     "MEMORY_RETRIEVE", "SCHEDULER_TASK_START", "SCHEDULER_TASK_END"}


def test_publish_reaches_subscribers_of_that_type_in_order():
    bus = EventBus()
    seen: list[tuple[str, Event]] = []
    bus.subscribe(EventType.TOOL_CALL_START, lambda e: seen.append(("first", e)))
    bus.subscribe(EventType.TOOL_CALL_START, lambda e: seen.append(("second", e)))
    bus.subscribe(EventType.TOOL_CALL_END, lambda e: seen.append(("other", e)))
    event = bus.publish(EventType.TOOL_CALL_START, {"tool_name": "calculator"})
    assert [who for who, _ in seen] == ["first", "second"]
    assert seen[0][1] is event
    assert event.type is EventType.TOOL_CALL_START and event.data == {"tool_name": "calculator"}
    assert event.timestamp > 0


def test_wildcard_subscriber_gets_every_type():
    bus = EventBus()
    seen: list[EventType] = []
    bus.subscribe(None, lambda e: seen.append(e.type))
    bus.publish(EventType.INFERENCE_START)
    bus.publish(EventType.MEMORY_STORE, {"id": 1})
    assert seen == [EventType.INFERENCE_START, EventType.MEMORY_STORE]


def test_unsubscribe_stops_delivery_and_reports_whether_it_existed():
    bus = EventBus()
    seen: list[Event] = []
    callback = bus.subscribe(EventType.RUN_START, seen.append)
    assert bus.has_subscribers(EventType.RUN_START)
    assert bus.unsubscribe(EventType.RUN_START, callback) is True
    assert bus.unsubscribe(EventType.RUN_START, callback) is False
    assert bus.publish(EventType.RUN_START) is None  # nobody listens: no event is built
    assert seen == [] and not bus.has_subscribers(EventType.RUN_START)


def test_raising_subscriber_is_logged_and_never_breaks_the_publisher(caplog):
    bus = EventBus()
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    bus.subscribe(EventType.TOOL_CALL_END, broken)
    bus.subscribe(EventType.TOOL_CALL_END, seen.append)
    with caplog.at_level(logging.ERROR, logger="jarvis.events"):
        event = bus.publish(EventType.TOOL_CALL_END, {"success": True})
    assert seen == [event]  # the subscriber after the broken one still got it
    assert any("subscriber bug" in (r.exc_text or str(r.exc_info)) or "failed on" in r.getMessage()
               for r in caplog.records)
    assert "tool_call_end" in caplog.text


def test_clear_removes_everything():
    bus = EventBus()
    bus.subscribe(None, lambda e: None)
    bus.clear()
    assert bus.publish(EventType.RUN_END) is None


def test_concurrent_publish_and_subscribe_lose_nothing():
    bus = EventBus()
    counts = {"a": 0}
    count_lock = threading.Lock()

    def counter(event: Event) -> None:
        with count_lock:
            counts["a"] += 1

    bus.subscribe(EventType.TOOL_CALL_START, counter)
    extra: list[int] = []
    start = threading.Barrier(9)

    def publisher() -> None:
        start.wait()
        for i in range(2000):
            bus.publish(EventType.TOOL_CALL_START, {"i": i})

    def subscriber() -> None:
        start.wait()
        for i in range(200):
            cb = bus.subscribe(EventType.TOOL_CALL_END, lambda e, i=i: extra.append(i))
            assert bus.unsubscribe(EventType.TOOL_CALL_END, cb)

    threads = [threading.Thread(target=publisher) for _ in range(6)]
    threads += [threading.Thread(target=subscriber) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts["a"] == 6 * 2000
    # every subscribe was matched by its unsubscribe, none lost to a race
    assert not bus.has_subscribers(EventType.TOOL_CALL_END)
