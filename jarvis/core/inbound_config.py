"""The config tables of conversations and inbound channels: [conversations], [inbound.NAME].

Kept apart from jarvis.core.config (which includes them) because an inbound table has a
dozen keys of its own; validated the same way (unknown keys and wrong types are errors naming
the key).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ConversationsConfig(_Section):
    """[conversations]: how much history a conversation's next run gets."""

    history_tokens: int = Field(8_000, ge=200, le=2_000_000, description="estimated tokens of "
                                "earlier turns sent with a new question; older turns are left "
                                "out, with a marker the model sees")


class InboundConfig(_Section):
    """[inbound.NAME]: messages in from Telegram or e-mail, each one a run in its sender's
    conversation, answered in the same chat or thread (see docs/inbound.md)."""

    type: Literal["telegram", "email"] = Field(description="telegram or email")
    enabled: bool = True
    allow: list[str] = Field(default_factory=list, description="who may talk to jarvis here: "
                             "Telegram user ids, or e-mail addresses; everyone else is ignored "
                             "and logged")
    agent: str = Field("", description="agent for the runs (default: [agent] default)")
    tools: list[str] = Field(default_factory=list, description="tools the runs may use (none "
                             "unless listed: a chat on a phone may have fewer than the terminal)")
    approved_tools: list[str] = Field(default_factory=list, description="tools that require "
                                      "confirmation, approved here (nobody is at a terminal)")
    system: str = Field("", description="system prompt (default: [agent] system)")
    max_turns: int | None = Field(None, ge=1, le=100)
    max_message_chars: int = Field(20_000, ge=100, le=1_000_000, description="longest text "
                                   "of a message that is read; the rest is cut, saying so")
    # --- telegram ---
    token: str = Field("", description="telegram: the bot token (write ${ENV})")
    api_url: str = Field("https://api.telegram.org", description="telegram: the Bot API server")
    poll_timeout: int = Field(30, ge=0, le=50, description="telegram: seconds one getUpdates "
                              "long poll waits for messages")
    allow_chats: list[str] = Field(default_factory=list, description="telegram: group chat ids "
                                   "where allowed users may talk too (default: private chats "
                                   "only; everyone in a group reads the answers)")
    # --- email ---
    address: str = Field("", description="email: jarvis's address (From: of the replies)")
    imap_host: str = ""
    imap_port: int = Field(993, ge=1, le=65535)
    imap_security: Literal["ssl", "starttls", "none"] = "ssl"
    username: str = Field("", description="email: the IMAP login (default: address)")
    password: str = Field("", description="email: the IMAP password (write ${ENV})")
    folder: str = Field("INBOX", description="email: the folder new messages arrive in")
    poll_seconds: float = Field(30.0, ge=0.05, le=3600, description="email: seconds between "
                                "checks for new mail")
    smtp_host: str = ""
    smtp_port: int = Field(465, ge=1, le=65535)
    smtp_security: Literal["ssl", "starttls", "none"] = "ssl"
    smtp_username: str = Field("", description="email: the SMTP login (default: username)")
    smtp_password: str = Field("", description="email: the SMTP password (default: password)")
    max_message_bytes: int = Field(2_000_000, ge=10_000, le=100_000_000, description="email: "
                                   "larger messages are not read (their headers only, to say so)")
    authserv_id: str = Field("", description="email: trust the Authentication-Results header "
                             "your receiving mail system adds under this id (DKIM/DMARC pass "
                             "for the From: domain)")
    secret_address: str = Field("", description="email: accept only mail sent to this secret "
                                "plus-address, e.g. jarvis+${JARVIS_MAIL_SECRET}@example.org")

    def model_post_init(self, __context: Any) -> None:
        if self.type == "telegram" and not self.token:
            raise ValueError("a telegram inbound needs token = \"${TELEGRAM_BOT_TOKEN}\" (the "
                             "bot's token, from the environment)")
        if self.type == "email":
            missing = [k for k in ("address", "imap_host", "smtp_host") if not getattr(self, k)]
            if missing:
                raise ValueError(f"an email inbound needs {', '.join(missing)}")
            if not (self.authserv_id or self.secret_address):
                raise ValueError("an email inbound needs authserv_id (trust your mail system's "
                                 "DKIM/DMARC results) or secret_address (a secret "
                                 "plus-address): a From: header alone can be forged")
        if self.enabled and not self.allow:
            raise ValueError("allow is empty: nobody could talk to jarvis here; list the "
                             "Telegram user ids or e-mail addresses that may")
