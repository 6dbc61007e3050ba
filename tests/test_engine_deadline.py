"""The engine request Deadline: one watchdog thread shuts the socket of every armed deadline at
its end (no thread per request), a cancelled one is left alone, and cancelled ones do not
pile up."""

from __future__ import annotations

import socket
import threading
import time

from jarvis.engine import wire
from jarvis.engine.wire import Deadline


def test_an_armed_deadline_unblocks_a_read_at_its_end_and_a_cancelled_one_does_not():
    blocked, spare = socket.socketpair()
    kept, kept_peer = socket.socketpair()
    try:
        cancelled = Deadline(0.05)
        cancelled.arm(kept)
        cancelled.cancel()
        deadline = Deadline(0.3)
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(blocked.recv(10)))
        start = time.monotonic()
        deadline.arm(blocked)
        reader.start()
        reader.join(10)
        assert not reader.is_alive() and got == [b""]  # the shutdown ended the read
        assert deadline.expired and time.monotonic() - start >= 0.29
        # The cancelled deadline's end (0.05 s) passed long ago: its socket still works.
        assert not cancelled.expired
        kept_peer.sendall(b"ok")
        assert kept.recv(2) == b"ok"
    finally:
        for s in (blocked, spare, kept, kept_peer):
            s.close()


def test_requests_start_no_thread_and_cancelled_deadlines_do_not_pile_up():
    a, b = socket.socketpair()
    try:
        Deadline(60).arm(a)  # the watchdog is running (and holds one live deadline)
        threads = threading.active_count()
        for _ in range(5000):  # what 5000 finished requests do: arm, then cancel
            d = Deadline(60)
            d.arm(a)
            d.cancel()
        assert threading.active_count() == threads
        assert len(wire._WATCHDOG._heap) < 200
        # An earlier end armed later still fires on time (the watchdog is woken for it).
        early = Deadline(0.2)
        early.arm(b)
        assert b.recv(10) == b"" and early.expired
    finally:
        a.close()
        b.close()
