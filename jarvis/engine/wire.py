"""Bounds on one engine request, shared by both transports: a deadline and a byte budget.

`[engine] timeout` bounds the whole request (the first byte, every gap between bytes, and the
total), not only each socket read: a server that sends keep-alive comments, empty deltas or
one byte a second would otherwise hold a caller forever. `[engine] max_response_bytes`
bounds what is read, streamed or not, so an endless answer cannot exhaust memory.

A blocked read cannot be interrupted by a flag, so the Deadline shuts the request's socket
down when it expires (armed only once the socket is known); reads then fail at once, and the
failure is reported as the timeout it is. One watchdog thread keeps every armed deadline of
the process (a timer thread per request cost more than a whole request on the built-in
client).
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import socket
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import Any


class WireError(Exception):
    """A failed request. kind: status | refused | reset | timeout | protocol | too_large."""

    def __init__(self, kind: str, message: str, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after


class Deadline:
    """The end of one request; `arm(sock)` shuts the socket down when it passes."""

    __slots__ = ("seconds", "end", "expired", "_sock", "_scheduled", "_lock")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._sock: socket.socket | None = None
        self._scheduled = False
        self._lock = threading.Lock()

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def error(self) -> WireError:
        return WireError("timeout", f"no complete reply within {self.seconds:g} s (the [engine] "
                                    f"timeout bounds the whole request)")

    def check(self) -> None:
        """Raise the timeout once the deadline has passed (between reads)."""
        if self.expired or time.monotonic() >= self.end:
            self.expired = True
            raise self.error()

    def arm(self, sock: socket.socket | None) -> None:
        """Shut `sock` down at the deadline, so a read blocked on it returns."""
        if sock is None:
            return
        with self._lock:
            self._sock = sock
            schedule = not self._scheduled
            self._scheduled = True
        if schedule:
            _WATCHDOG.add(self)

    def expire(self) -> None:
        """End the request now: what the watchdog does at the deadline (a caller that stops
        waiting calls it, so a helper thread blocked on the socket ends too)."""
        self._fire()

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed: nothing is blocked on it

    def cancel(self) -> None:
        with self._lock:
            scheduled, self._scheduled = self._scheduled, False
            self._sock = None
        if scheduled:
            _WATCHDOG.discard()


class _Watchdog:
    """One daemon thread that shuts down the socket of each armed Deadline at its end.

    Cancelled deadlines stay in the heap (unscheduled) until they reach its top, or until
    they are most of it, when it is rebuilt: a cancel costs a counter, not a search.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Deadline]] = []
        self._live = 0
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, deadline: Deadline) -> None:
        with self._cond:
            heapq.heappush(self._heap, (deadline.end, next(self._order), deadline))
            self._live += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="jarvis-engine-deadlines",
                                                daemon=True)
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._cond.notify()  # the new earliest end: the thread sleeps too long

    def discard(self) -> None:
        with self._cond:
            self._live -= 1
            if len(self._heap) > 64 and self._live * 2 < len(self._heap):
                self._heap = [e for e in self._heap if e[2]._scheduled]
                heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and not self._heap[0][2]._scheduled:
                        heapq.heappop(self._heap)  # cancelled (discard counted it)
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                _, _, due = heapq.heappop(self._heap)
                with due._lock:  # (cancel takes this lock, then ours: never both at once)
                    fire, due._scheduled = due._scheduled, False
                if fire:
                    self._live -= 1
            if fire:
                due._fire()


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):  # a forked child has no watchdog thread, maybe a held lock
    os.register_at_fork(after_in_child=_WATCHDOG._reset)


def too_large(limit: int, streamed: bool) -> WireError:
    what = "streamed reply" if streamed else "reply"
    return WireError("too_large", f"the {what} is larger than {limit} bytes (the limit is "
                                  f"[engine] max_response_bytes)")


ACCEPT_ENCODING = "gzip, deflate"  # what the openai transports ask for: BodyDecoder reads both


class BodyDecoder:
    """Decodes a reply's Content-Encoding (gzip, deflate, stacked) with at most `limit`
    decoded bytes, so the byte budget holds for what a body *becomes*: left to httpx, a 1 MB
    gzip error body (which the openai client reads whole, itself) became 1 GB in memory, and
    the budget only counted the 1 MB on the wire. An encoding it cannot bound (br, zstd: not
    asked for) is a protocol error."""

    def __init__(self, header: str, limit: int, streamed: bool) -> None:
        layers = [e.strip().lower() for e in header.split(",") if e.strip()]
        layers = [e for e in layers if e != "identity"]
        unknown = [e for e in layers if e not in ("gzip", "x-gzip", "deflate")]
        if unknown:
            raise WireError("protocol", f"the reply's Content-Encoding {unknown[0][:40]!r} was "
                                        f"not asked for (jarvis asks for {ACCEPT_ENCODING})")
        # The last encoding applied is listed last: decode in reverse. 47: a gzip or zlib
        # header, detected; a deflate body without one (raw) is retried as such.
        self._layers = [[zlib.decompressobj(47), e == "deflate", True] for e in reversed(layers)]
        self.limit = limit
        self.streamed = streamed
        self.size = 0

    @property
    def active(self) -> bool:
        return bool(self._layers)

    def decode(self, data: bytes) -> bytes:
        for layer in self._layers:
            if not data:
                break
            data = self._feed(layer, data)
        self.size += len(data)
        if self.size > self.limit:
            raise too_large(self.limit, streamed=self.streamed)
        return data

    def _feed(self, layer: list[Any], data: bytes) -> bytes:
        decoder, deflate, first = layer
        room = self.limit - self.size + 1
        try:
            out = decoder.decompress(data, room)
        except zlib.error as exc:
            if not (deflate and first):
                raise WireError("protocol", f"the reply's compressed body is corrupt: "
                                            f"{exc}") from None
            layer[0] = decoder = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate
            try:
                out = decoder.decompress(data, room)
            except zlib.error as raw_exc:
                raise WireError("protocol", f"the reply's compressed body is corrupt: "
                                            f"{raw_exc}") from None
        layer[2] = False
        if decoder.unconsumed_tail or len(out) >= room:
            raise too_large(self.limit, streamed=self.streamed)
        return out


def read_body(chunks: Iterable[bytes], deadline: Deadline, limit: int) -> bytes:
    """A whole (non-streamed) body from `chunks`, within the deadline and `limit` bytes."""
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        deadline.check()
        size += len(chunk)
        if size > limit:
            raise too_large(limit, streamed=False)
        parts.append(chunk)
    deadline.check()  # a socket shut by the deadline reads as an early end
    return b"".join(parts)


def parse_json(raw: bytes, what: str = "the reply") -> Any:
    """`raw` as JSON; a body that is not JSON is the server's protocol error."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise WireError("protocol", f"{what} is not JSON: {raw[:200]!r}") from exc


def sse_events(chunks: Iterable[bytes], deadline: Deadline, limit: int,
               max_line: int, error_message: Any) -> Iterator[dict[str, Any]]:
    """The JSON events of a server-sent-event stream of byte `chunks`.

    Lines are split here (not by a readline that would wait for a newline that never comes),
    so the deadline is checked after every chunk, whatever the server sends: keep-alive
    comments, empty deltas or single bytes all count against the same deadline and budget.
    """
    buffer = bytearray()
    size = 0
    for chunk in chunks:
        deadline.check()
        size += len(chunk)
        if size > limit:
            raise too_large(limit, streamed=True)
        # Only the new bytes can hold a newline: a long line is not searched again per chunk.
        searched = len(buffer)
        buffer += chunk
        start = 0
        while True:
            end = buffer.find(b"\n", max(start, searched))
            if end < 0:
                break
            line = bytes(buffer[start:end]).strip()
            start = end + 1
            if not line.startswith(b"data:"):
                continue  # comments, event: lines, keep-alives
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            try:
                event = json.loads(payload)
            except (ValueError, RecursionError) as exc:
                raise WireError("protocol", f"bad stream chunk: {payload[:200]!r}") from exc
            if isinstance(event, dict) and "error" in event and not event.get("choices"):
                raise WireError("status", error_message(event, "stream error"), 500)
            yield event
            deadline.check()
        del buffer[:start]
        if len(buffer) > max_line:
            raise WireError("protocol", f"a stream line is longer than {max_line} bytes")
    deadline.check()  # a socket shut by the deadline reads as an early end
