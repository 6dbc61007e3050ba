"""Telegram in: the Bot API over httpx (getUpdates long polling, sendMessage).

- Updates come from `getUpdates` with a long-poll `timeout`; an update is *confirmed* (Telegram
  forgets it) by the next call whose `offset` is above its `update_id`. The listener claims an
  update in the ledger first, and only then asks for the next ones, so a confirmed update is
  always in the ledger (a listener that dies is taken over from there, not from Telegram).
- Answers go with `sendMessage` as plain text (no parse mode: nothing in an answer is read as
  markup), link previews off (a preview makes Telegram's servers fetch a URL the model wrote),
  as a reply to the person's message, split at Telegram's limit of 4096 characters (counted as
  UTF-16 code units, as Telegram does), at a paragraph, line or word boundary when there is one.
- Errors as the API documents them: 429 with `parameters.retry_after` is waited out and the
  same part is sent again (Telegram did not take it); 409 ("terminated by other getUpdates
  request": another listener polls the same bot) is waited out; 401/404 (a wrong token) stop
  this inbound with a clear message; other 4xx of sendMessage fail the reply (recorded).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from jarvis.errors import ConfigError, JarvisError
from jarvis.inbound.message import InboundMessage, cut_text

log = logging.getLogger("jarvis.inbound")

MAX_MESSAGE_UNITS = 4096  # UTF-16 code units per sendMessage text
MAX_RETRY_AFTER = 300.0  # longest 429 wait honoured at once; longer waits fail the part
MAX_SEND_TRIES = 5


class SendFailed(JarvisError):
    """A part of a reply could not be sent (and certainly was not)."""


class SendUnknown(JarvisError):
    """A part of a reply may or may not have been sent (the request went out, no answer)."""


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def split_message(text: str, limit: int = MAX_MESSAGE_UNITS) -> list[str]:
    """`text` in parts of at most `limit` UTF-16 units, cut at a paragraph, a line or a space
    when one is in the second half of the part, else anywhere (never inside a character)."""
    parts: list[str] = []
    rest = text
    while utf16_len(rest) > limit:
        # The longest prefix within the limit (characters outside the BMP count twice).
        end = min(len(rest), limit)
        while utf16_len(rest[:end]) > limit:
            end -= max((utf16_len(rest[:end]) - limit + 1) // 2, 1)
        cut = end
        for sep in ("\n\n", "\n", " "):
            at = rest.rfind(sep, end // 2, end)
            if at > 0:
                cut = at + len(sep)
                break
        parts.append(rest[:cut].rstrip() or rest[:cut])
        rest = rest[cut:]
    if rest.strip() or not parts:
        parts.append(rest)
    return parts


class TelegramChannel:
    """One bot: fetch messages, send answers."""

    kind = "telegram"

    def __init__(self, name: str, settings: Any, *, client: Any = None) -> None:
        from jarvis.core.envvars import expand_env

        self.name = name
        self.settings = settings
        token = expand_env(settings.token, f"[inbound.{name}] token")
        if not token or "/" in token or any(c.isspace() for c in token):
            raise ConfigError(f"[inbound.{name}] token is not a bot token (it looks like "
                              f"123456:ABC...)")
        self._base = f"{settings.api_url.rstrip('/')}/bot{token}/"
        self._client = client
        self._offset: int | None = None
        self.bot_id = token.split(":", 1)[0]
        self.account = f"telegram:{self.bot_id}"
        self._conflict_logged = False

    # --- HTTP --------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            import httpx

            # The long poll holds a request open for poll_timeout seconds: read timeout above it.
            self._client = httpx.Client(timeout=httpx.Timeout(
                10.0, read=self.settings.poll_timeout + 15.0))
        return self._client

    def _call(self, method: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST a Bot API method; (HTTP status, the decoded body). Network errors raise httpx's."""
        response = self.client.post(self._base + method, json=payload)
        try:
            body = response.json()
        except ValueError:
            body = {"ok": False, "description": response.text[:200]}
        if not isinstance(body, dict):
            body = {"ok": False, "description": "not a Bot API answer"}
        return response.status_code, body

    def _fatal(self, status: int, body: dict[str, Any]) -> JarvisError:
        return ConfigError(f"[inbound.{self.name}]: the Bot API refused the token ({status} "
                           f"{str(body.get('description'))[:200]}); check token and api_url")

    def check(self) -> None:
        """getMe: the token works (else one clear error)."""
        import httpx

        try:
            status, body = self._call("getMe", {})
        except httpx.HTTPError as exc:
            raise JarvisError(f"[inbound.{self.name}]: cannot reach the Bot API at "
                              f"{self.settings.api_url}: {exc}") from None
        if status in (401, 404) or not body.get("ok"):
            raise self._fatal(status, body)

    # --- in ----------------------------------------------------------------------------------
    def fetch(self, stop: Any) -> list[InboundMessage]:
        """One long poll: the new messages (confirming the ones handed out before)."""
        import httpx

        payload: dict[str, Any] = {"timeout": self.settings.poll_timeout,
                                   "allowed_updates": ["message"]}
        if self._offset is not None:
            payload["offset"] = self._offset
        try:
            status, body = self._call("getUpdates", payload)
        except httpx.HTTPError as exc:
            log.warning("inbound %s: getUpdates failed (%s); retrying", self.name, exc)
            stop.wait(2.0)
            return []
        if status in (401, 404):
            raise self._fatal(status, body)
        if status == 409:
            if not self._conflict_logged:
                self._conflict_logged = True
                log.warning("inbound %s: another listener polls this bot (409: %s); taking "
                            "turns with it (the ledger keeps each message answered once)",
                            self.name, str(body.get("description"))[:200])
            stop.wait(1.0)
            return []
        if status == 429:
            stop.wait(min(_retry_after(body), MAX_RETRY_AFTER))
            return []
        if status != 200 or not body.get("ok"):
            log.warning("inbound %s: getUpdates answered %s: %s", self.name, status,
                        str(body.get("description"))[:200])
            stop.wait(2.0)
            return []
        messages = []
        for update in body.get("result") or []:
            if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
                continue
            update_id = update["update_id"]
            # Confirmed by the next getUpdates, which comes after these are in the ledger.
            self._offset = max(self._offset or 0, update_id + 1)
            messages.append(self.parse(update))
        return messages

    def parse(self, update: dict[str, Any]) -> InboundMessage:
        """An update as an InboundMessage: who wrote it, their words, what else it carried."""
        settings = self.settings
        message = update.get("message")
        msg = InboundMessage(self.name, "telegram", f"{self.bot_id}:{update['update_id']}",
                             sender="", chat="", received_at=time.time())
        if not isinstance(message, dict):
            msg.refusal = "not a new message (an edit, a channel post, a button...)"
            return msg
        sender = message.get("from") if isinstance(message.get("from"), dict) else {}
        chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
        msg.sender = str(sender.get("id", ""))
        msg.sender_name = str(sender.get("username") or sender.get("first_name") or "")[:100]
        msg.chat = str(chat.get("id", ""))
        msg.reply_to = {"chat_id": chat.get("id"), "message_id": message.get("message_id")}
        allowed = {str(a).strip() for a in settings.allow}
        if msg.sender not in allowed or sender.get("is_bot"):
            msg.refusal = f"sender {msg.sender or '?'} is not in [inbound.{self.name}] allow"
            return msg
        if chat.get("type") != "private" and msg.chat not in {str(c) for c in
                                                               settings.allow_chats}:
            msg.refusal = (f"a {chat.get('type') or 'non-private'} chat ({msg.chat}) not in "
                           f"[inbound.{self.name}] allow_chats")
            return msg
        msg.allowed = True
        budget = [settings.max_message_chars]
        words = message.get("text") or message.get("caption") or ""
        words = words if isinstance(words, str) else ""
        forwarded = any(k in message for k in ("forward_origin", "forward_from",
                                               "forward_from_chat", "forward_sender_name",
                                               "forward_date"))
        if forwarded:
            # Someone else's words, forwarded: none of it is the person's.
            msg.add_untrusted("forwarded message", words, budget)
        else:
            msg.text = cut_text(words, settings.max_message_chars, msg)
            budget[0] -= len(msg.text)
        quoted = message.get("quote") or {}
        if isinstance(quoted, dict) and quoted.get("text"):
            msg.add_untrusted("quoted message", str(quoted["text"]), budget)
        for field in ("reply_to_message", "external_reply"):
            earlier = message.get(field)
            if isinstance(earlier, dict):
                text = earlier.get("text") or earlier.get("caption") or ""
                msg.add_untrusted("the message this one replies to", str(text), budget)
        for kind in ("photo", "document", "audio", "voice", "video", "sticker", "location",
                     "contact"):
            if message.get(kind):
                msg.note(f"a {kind} (jarvis does not read attachments from Telegram)")
        return msg

    # --- out ---------------------------------------------------------------------------------
    def parts(self, text: str) -> list[str]:
        return split_message(text or "(no answer)")

    def send_part(self, msg: InboundMessage, part: str, index: int,
                  wait: Callable[[float], bool], before_send: Callable[[], None]) -> None:
        """Send one part; `before_send()` (the ledger's "sending") runs right before each
        request. SendFailed: it was not sent; SendUnknown: it may have been."""
        import httpx

        payload: dict[str, Any] = {"chat_id": msg.reply_to.get("chat_id"), "text": part,
                                   "link_preview_options": {"is_disabled": True}}
        if index == 0 and msg.reply_to.get("message_id") is not None:
            payload["reply_parameters"] = {"message_id": msg.reply_to["message_id"],
                                           "allow_sending_without_reply": True}
        for attempt in range(1, MAX_SEND_TRIES + 1):
            before_send()
            try:
                status, body = self._call("sendMessage", payload)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # Never reached Telegram: safe to try again.
                if attempt == MAX_SEND_TRIES or wait(2.0 * attempt):
                    raise SendFailed(f"cannot reach the Bot API: {exc}") from None
                continue
            except httpx.HTTPError as exc:
                # The request went out; whether Telegram took it is unknown.
                raise SendUnknown(f"no answer from sendMessage: {type(exc).__name__}: "
                                  f"{exc}") from None
            if status == 200 and body.get("ok"):
                return
            if status == 429 and attempt < MAX_SEND_TRIES:
                delay = _retry_after(body)
                if delay > MAX_RETRY_AFTER:
                    raise SendFailed(f"Telegram asks to wait {delay:g} s (429)")
                log.info("inbound %s: sendMessage rate limited; waiting %g s", self.name, delay)
                if wait(delay):
                    raise SendFailed("stopped while waiting out a 429")
                continue
            if status >= 500 and attempt < MAX_SEND_TRIES:
                if wait(2.0 * attempt):
                    raise SendFailed("stopped while retrying")
                continue
            if status in (401, 404):
                raise self._fatal(status, body)
            raise SendFailed(f"sendMessage answered {status}: "
                             f"{str(body.get('description'))[:300]}")
        raise SendFailed("sendMessage kept failing")

    def ack(self, msg: InboundMessage) -> None:
        """Nothing to do: the next getUpdates confirms (its offset is past this update)."""

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _retry_after(body: dict[str, Any]) -> float:
    parameters = body.get("parameters") or {}
    try:
        return max(float(parameters.get("retry_after", 1)), 0.0)
    except (TypeError, ValueError):
        return 1.0
