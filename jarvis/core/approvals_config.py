"""The config table of approvals: [approvals] (docs/approvals.md).

Kept apart from jarvis.core.config (which includes it) so that module stays one screenful of
sections per concern; validated the same way (unknown keys and wrong types are errors naming
the key).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jarvis.core.config_base import ApprovalsMethods

_CHANNEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # as jarvis.core.config


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ApprovalsConfig(_Section):
    """[approvals]: a run with nobody to ask parks until you answer (docs/approvals.md)."""

    notify: str = Field("", description="the channel each approval request is sent to "
                        "(a [channels.NAME]); empty: none (`jarvis approvals list` shows them)")
    link_base: str = Field("", description="the URL `jarvis serve` is reached at from where "
                           "you read the channel, e.g. https://jarvis.example.net; empty: "
                           "[serve] host and port when a server answers there")
    expire_after: str = Field("24h", description="how long a request waits for you before "
                              "its run ends recorded `expired`: seconds, or 90m, 24h, 7d")
    db_path: str = Field("", description="the approvals database (parked runs, requests, "
                         "grants); empty: JARVIS_HOME/approvals.db, or the scheduler's "
                         "PostgreSQL ledger when [scheduler] store names one")

    @field_validator("expire_after")
    @classmethod
    def _duration(cls, value: str) -> str:
        from jarvis.core.durations import parse_duration

        seconds = parse_duration(value)
        if not 1 <= seconds <= 366 * 86400:
            raise ValueError(f"expire_after {value!r} must be between 1 second and 366 days")
        return value

    @field_validator("notify")
    @classmethod
    def _channel(cls, value: str) -> str:
        if value and not _CHANNEL_NAME.match(value):
            raise ValueError(f"notify {value!r} is not a channel name (a [channels.NAME])")
        return value

    @field_validator("link_base")
    @classmethod
    def _link(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError(f"link_base {value!r} must be an http:// or https:// URL without "
                             f"a query")
        return value

    expire_seconds = ApprovalsMethods.expire_seconds  # shared with the cached view
