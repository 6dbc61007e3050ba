"""The Redis transport jarvis's Celery app uses: kombu's, with replies bounded before they are
read. A jarvis message (run id, attempt, epoch, and Celery's envelope) is about 2 KB; anyone who
can write to the broker can push a message of hundreds of megabytes, which the worker's
consumer would read whole into memory, copy, decode and parse as JSON (gigabytes at its peak)
before refusing it. Here a bulk string longer than MAX_MESSAGE_BYTES is read off the socket in
small pieces and thrown away as it comes: the consumer gets a tiny stand-in message that Celery
refuses in one line ("Refusing to deserialize untrusted content"), and jarvis logs the size.

Used for redis:// and rediss:// brokers (make_app sets it as Celery's broker_transport).
kombu and redis are imported only with this module, by make_app.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from redis._parsers.resp2 import _RESP2Parser
from redis._parsers.resp3 import _RESP3Parser
from redis._parsers.socket import SocketBuffer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.utils import DEFAULT_RESP_VERSION, SENTINEL

MAX_MESSAGE_BYTES = 1 << 20  # 1 MiB: ~500 times a jarvis message
REFUSED_TYPE = "application/x-jarvis-oversized"
_DISCARD_CHUNK = 1 << 16

log = logging.getLogger("jarvis.scheduler.worker")


def stand_in(size: int) -> bytes:
    """The message delivered in place of one of `size` bytes that was not read: a kombu
    envelope with a content type no worker accepts, so Celery refuses (and acknowledges) it."""
    return json.dumps({
        "body": "", "content-encoding": "utf-8", "content-type": REFUSED_TYPE,
        "headers": {"jarvis-refused": f"{size} bytes, over {MAX_MESSAGE_BYTES}"},
        "properties": {"delivery_tag": str(uuid.uuid4()), "delivery_mode": 2, "priority": 0,
                       "body_encoding": "base64",
                       "delivery_info": {"exchange": "", "routing_key": ""}}}).encode()


class BoundedSocketBuffer(SocketBuffer):
    """A reply buffer that discards, unread, any bulk string over MAX_MESSAGE_BYTES."""

    def read(self, length: int, timeout: Any = SENTINEL) -> bytes:
        if length <= MAX_MESSAGE_BYTES:
            return super().read(length, timeout)
        left = length + 2  # the string and its \r\n
        left -= len(self._buffer.read(left))  # what is buffered already
        sock = self._sock
        while left > 0:
            data = sock.recv(min(_DISCARD_CHUNK, left))
            if not data:
                raise RedisConnectionError("Connection closed by server.")
            left -= len(data)
        log.warning("refused a message of %d bytes from the broker without reading it (a "
                    "jarvis message is about 2 KB; the limit is %d): discarded", length,
                    MAX_MESSAGE_BYTES)
        return stand_in(length)


class _Bounded:
    """A parser whose buffer is a BoundedSocketBuffer."""

    def on_connect(self, connection: Any) -> None:
        super().on_connect(connection)  # type: ignore[misc]
        self._buffer = BoundedSocketBuffer(self._sock, self.socket_read_size,  # type: ignore
                                           connection.socket_timeout)


class BoundedRESP2Parser(_Bounded, _RESP2Parser):
    pass


class BoundedRESP3Parser(_Bounded, _RESP3Parser):
    pass


def _parser_for(kwargs: dict[str, Any]) -> type:
    """redis-py speaks RESP3 by default (and needs a RESP3 parser for it)."""
    try:
        protocol = int(kwargs.get("protocol") or DEFAULT_RESP_VERSION)
    except (TypeError, ValueError):
        protocol = DEFAULT_RESP_VERSION
    return BoundedRESP3Parser if protocol == 3 else BoundedRESP2Parser


class BoundedConnection(redis.Connection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["parser_class"] = _parser_for(kwargs)
        super().__init__(*args, **kwargs)


class BoundedSSLConnection(redis.SSLConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["parser_class"] = _parser_for(kwargs)
        super().__init__(*args, **kwargs)


class Channel(kombu_redis.Channel):
    connection_class = BoundedConnection
    connection_class_ssl = BoundedSSLConnection


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with bounded replies (see the module docstring)."""

    Channel = Channel
