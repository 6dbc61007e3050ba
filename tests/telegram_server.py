"""A loopback Telegram Bot API server for the inbound tests: the methods jarvis uses, as the
Bot API documents them (https://core.telegram.org/bots/api).

- `getMe`: the bot as a User.
- `getUpdates` (offset, limit, timeout, allowed_updates): updates with `update_id >= offset`,
  oldest first; calling it with an offset confirms (forgets) every update below it; a negative
  offset keeps only the last -offset updates; with none waiting, the call is held up to
  `timeout` seconds (long polling) and answers as soon as one arrives. A second getUpdates while
  one is held ends the held one with 409 "Conflict: terminated by other getUpdates request".
- `sendMessage` (chat_id, text, reply_parameters / reply_to_message_id, ...): 400 "Bad Request:
  message text is empty", 400 "Bad Request: message is too long" over 4096 characters (UTF-16
  code units, as Telegram counts them), 400 "Bad Request: chat not found" for a chat it has
  never seen; scripted 429 answers carry `parameters.retry_after`.
- A wrong token is 401 "Unauthorized", an unknown method 404 "Not Found"; every answer is
  `{"ok": ..., "result" | "error_code", "description"}`.

Tests read what was sent in `sent` and can hold a sendMessage after the message is recorded
as delivered (`hold_sends`), to kill a listener between "sent" and its record of it.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

MAX_TEXT = 4096


class FakeTelegram:
    def __init__(self, token: str = "123456:TEST-token", *, username: str = "jarvis_test_bot"):
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self._cond = threading.Condition()
        self._updates: list[dict[str, Any]] = []
        self._next_update = 1000
        self._next_message = 1
        self._poll_generation = 0
        self._chats: set[int] = set()
        self.sent: list[dict[str, Any]] = []
        self.send_attempts: list[tuple[float, int]] = []  # (time, status)
        self.polls: list[dict[str, Any]] = []
        self.conflicts = 0
        self._failures: list[tuple[int, dict[str, Any]]] = []
        self.hold_sends = threading.Event()  # set: sendMessage records, then waits for release
        self.release_sends = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> FakeTelegram:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:  # noqa: N802
                owner._serve(self, b"")

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                owner._serve(self, self.rfile.read(min(length, 10_000_000)))

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that went away (a killed listener) is not the server's error

        self._server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         kwargs={"poll_interval": 0.05}).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release_sends.set()
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # --- what tests do -----------------------------------------------------------------------
    def add_update(self, update: dict[str, Any]) -> int:
        with self._cond:
            update_id = self._next_update
            self._next_update += 1
            self._updates.append(dict(update, update_id=update_id))
            self._cond.notify_all()
            return update_id

    def add_message(self, user_id: int, text: str | None = None, *, chat_id: int | None = None,
                    chat_type: str = "private", **fields: Any) -> int:
        """A message from user `user_id` (in their private chat unless chat_id is given)."""
        chat = chat_id if chat_id is not None else user_id
        with self._cond:
            self._chats.add(chat)
            message_id = self._next_message
            self._next_message += 1
        message = {"message_id": message_id, "date": int(time.time()),
                   "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
                   "chat": {"id": chat, "type": chat_type}, **fields}
        if text is not None:
            message["text"] = text
        return self.add_update({"message": message})

    def fail_next_sends(self, status: int = 429, count: int = 1, **body: Any) -> None:
        """The next `count` sendMessage calls answer `status` (429: with retry_after)."""
        if status == 429:
            body.setdefault("parameters", {"retry_after": 1})
            body.setdefault("description", "Too Many Requests: retry after "
                                           f"{body['parameters']['retry_after']}")
        with self._cond:
            self._failures += [(status, body)] * count

    def wait_for_sent(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.sent) >= count, timeout), (
                f"{len(self.sent)} messages sent, expected {count}: {self.sent}")
            return list(self.sent)

    def wait_for_polls(self, count: int, timeout: float = 30.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.polls) >= count, timeout), (
                f"{len(self.polls)} getUpdates calls, expected {count}")

    @property
    def pending(self) -> list[int]:
        """Update ids not confirmed yet."""
        with self._cond:
            return [u["update_id"] for u in self._updates]

    # --- the API -----------------------------------------------------------------------------
    def _serve(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        parts = urlsplit(handler.path)
        params: dict[str, Any] = dict(parse_qsl(parts.query))
        if raw:
            ctype = handler.headers.get("Content-Type") or ""
            if "json" in ctype:
                try:
                    params.update(json.loads(raw))
                except ValueError:
                    return self._answer(handler, 400, {"ok": False, "error_code": 400,
                                                       "description": "Bad Request: can't "
                                                                      "parse JSON"})
            else:
                params.update(parse_qsl(raw.decode("utf-8", "replace")))
        segments = parts.path.strip("/").split("/")
        if len(segments) != 2 or segments[0] != f"bot{self.token}":
            return self._answer(handler, 401, {"ok": False, "error_code": 401,
                                               "description": "Unauthorized"})
        method = segments[1]
        serve = {"getMe": self._get_me, "getUpdates": self._get_updates,
                 "sendMessage": self._send_message}.get(method)
        if serve is None:
            return self._answer(handler, 404, {"ok": False, "error_code": 404,
                                               "description": "Not Found"})
        status, body = serve(params)
        self._answer(handler, status, body)

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            pass  # the client left (a killed listener)

    def _get_me(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {"ok": True, "result": {"id": self.bot_id, "is_bot": True,
                                            "first_name": "jarvis", "username": self.username}}

    def _get_updates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        try:
            offset = int(params["offset"]) if "offset" in params else None
            limit = min(max(int(params.get("limit", 100)), 1), 100)
            timeout = max(int(params.get("timeout", 0)), 0)
        except (TypeError, ValueError):
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: wrong "
                                                                         "parameter"}
        allowed = params.get("allowed_updates")
        if isinstance(allowed, str):
            allowed = json.loads(allowed)
        deadline = time.monotonic() + timeout
        with self._cond:
            self._poll_generation += 1
            generation = self._poll_generation
            self.polls.append({"offset": offset, "timeout": timeout, "at": time.time()})
            self._cond.notify_all()
            if offset is not None:
                if offset < 0:
                    self._updates = self._updates[offset:]
                else:
                    self._updates = [u for u in self._updates if u["update_id"] >= offset]
            while True:
                if self._poll_generation != generation:
                    self.conflicts += 1
                    return 409, {"ok": False, "error_code": 409, "description":
                                 "Conflict: terminated by other getUpdates request; make sure "
                                 "that only one bot instance is running"}
                ready = [u for u in self._updates
                         if not allowed or any(kind in u for kind in allowed)]
                left = deadline - time.monotonic()
                if ready or left <= 0:
                    return 200, {"ok": True, "result": ready[:limit]}
                self._cond.wait(min(left, 0.5))

    def _send_message(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            if self._failures:
                status, body = self._failures.pop(0)
                self.send_attempts.append((time.monotonic(), status))
                return status, {"ok": False, "error_code": status, **body}
        text = params.get("text")
        try:
            chat_id = int(params.get("chat_id"))
        except (TypeError, ValueError):
            return 400, {"ok": False, "error_code": 400,
                         "description": "Bad Request: chat_id is empty"}
        if not isinstance(text, str) or not text.strip():
            status, body = 400, {"ok": False, "error_code": 400,
                                 "description": "Bad Request: message text is empty"}
        elif len(text.encode("utf-16-le")) // 2 > MAX_TEXT:
            status, body = 400, {"ok": False, "error_code": 400,
                                 "description": "Bad Request: message is too long"}
        elif chat_id not in self._chats:
            status, body = 400, {"ok": False, "error_code": 400,
                                 "description": "Bad Request: chat not found"}
        else:
            status, body = 200, {}
        with self._cond:
            self.send_attempts.append((time.monotonic(), status))
            if status != 200:
                return status, body
            message_id = self._next_message
            self._next_message += 1
            record = {"chat_id": chat_id, "text": text, "message_id": message_id,
                      "params": params, "at": time.time()}
            self.sent.append(record)
            self._cond.notify_all()
        if self.hold_sends.is_set():
            # Delivered (it is in `sent`); the answer to the sender waits, so a test can kill
            # the listener between the delivery and its record of it.
            self.release_sends.wait(60)
        return 200, {"ok": True, "result": {
            "message_id": message_id, "date": int(time.time()), "text": text,
            "chat": {"id": chat_id, "type": "private"},
            "from": {"id": self.bot_id, "is_bot": True, "first_name": "jarvis"}}}
