"""Workspace tools: the current date and time anywhere, the time between two dates, and a
date moved by a duration.

Models are notoriously bad at calendars and time zones; these tools make it exact. Loaded by
path by jarvis (this folder is not a package). Inputs are bounded before any work: time zone
names must look like IANA names and exist in the tz database, dates are short ISO 8601
strings, and durations are limited so no result leaves the supported calendar range.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jarvis import ErrorType, ToolResult, tool

MAX_DATE_CHARS = 40
MAX_SHIFT_DAYS = 3_650_000  # ~10,000 years
_TZ_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+){0,2}$")


def _zone(name: str) -> ZoneInfo:
    """A time zone by IANA name ("Europe/Paris", "UTC"); ValueError with a usable message."""
    if not isinstance(name, str) or len(name) > 64 or not _TZ_RE.match(name) or ".." in name:
        raise ValueError(f"{name!r} is not a time zone name; use an IANA name such as "
                         "'UTC', 'Europe/Paris' or 'America/New_York'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r}; use an IANA name such as 'UTC', "
                         "'Europe/Paris' or 'America/New_York'") from None


def _parse(text: str, zone: ZoneInfo, field: str) -> datetime:
    """An ISO 8601 date or date-time; naive values are taken to be in `zone`."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_DATE_CHARS:
        raise ValueError(f"{field} must be an ISO 8601 date such as 2024-03-01 or "
                         f"2024-03-01T09:30 (at most {MAX_DATE_CHARS} characters)")
    raw = text.strip()
    if raw.lower() in ("now", "today"):
        now = datetime.now(zone)
        return now if raw.lower() == "now" else now.replace(hour=0, minute=0, second=0,
                                                            microsecond=0)
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
    except ValueError:
        raise ValueError(f"{field}={text!r} is not an ISO 8601 date such as 2024-03-01 or "
                         "2024-03-01T09:30") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=zone)


def _fail(tool_name: str, message: str) -> ToolResult:
    return ToolResult.failure(tool_name, message, ErrorType.INVALID_ARGS)


def _describe(delta: timedelta) -> str:
    seconds = int(abs(delta).total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in
             ((days, "day"), (hours, "hour"), (minutes, "minute"), (secs, "second")) if n]
    return ", ".join(parts) or "0 seconds"


# Neutral results, nothing sent out (docs/trust.md): a clock and a calendar.
@tool(category="time", inline=True, latency_estimate=0.0001, output="neutral",
      egress="none")
def current_time(timezone: str = "UTC") -> ToolResult:
    """The current date, time and weekday in a time zone.

    Args:
        timezone: IANA time zone name, e.g. UTC, Europe/Paris, America/New_York.
    """
    try:
        zone = _zone(timezone)
    except ValueError as exc:
        return _fail("current_time", str(exc))
    now = datetime.now(zone)
    return ToolResult(
        tool_name="current_time",
        content=f"{now:%A, %d %B %Y, %H:%M:%S} {now.tzname()} ({now.isoformat(timespec='seconds')})",
        metadata={"iso": now.isoformat(timespec="seconds"), "timezone": timezone,
                  "weekday": now.strftime("%A"), "utc_offset": now.strftime("%z")},
    )


# Neutral results, nothing sent out (docs/trust.md): a clock and a calendar.
@tool(category="time", inline=True, latency_estimate=0.0001, output="neutral",
      egress="none")
def date_diff(start: str, end: str, timezone: str = "UTC") -> ToolResult:
    """The time between two dates (end minus start), in days and in total seconds.

    Args:
        start: ISO 8601 date or date-time (e.g. 2024-03-01 or 2024-03-01T09:30), or "now".
        end: ISO 8601 date or date-time, or "now".
        timezone: Time zone for dates given without an offset (IANA name).
    """
    try:
        zone = _zone(timezone)
        a, b = _parse(start, zone, "start"), _parse(end, zone, "end")
    except ValueError as exc:
        return _fail("date_diff", str(exc))
    delta = b - a
    sign = "-" if delta < timedelta(0) else ""
    return ToolResult(
        tool_name="date_diff",
        content=f"{sign}{_describe(delta)} ({delta.total_seconds() / 86400:.4g} days)",
        metadata={"seconds": delta.total_seconds(), "days": delta.total_seconds() / 86400},
    )


# Neutral results, nothing sent out (docs/trust.md): a clock and a calendar.
@tool(category="time", inline=True, latency_estimate=0.0001, output="neutral",
      egress="none")
def date_shift(date: str, days: int = 0, hours: int = 0, minutes: int = 0, weeks: int = 0,
               timezone: str = "UTC") -> ToolResult:
    """A date moved forward (or back, with negative numbers) by a duration.

    Args:
        date: ISO 8601 date or date-time (e.g. 2024-03-01 or 2024-03-01T09:30), or "now".
        days: Days to add (negative to go back).
        hours: Hours to add.
        minutes: Minutes to add.
        weeks: Weeks to add.
        timezone: Time zone for a date given without an offset (IANA name).
    """
    try:
        zone = _zone(timezone)
        start = _parse(date, zone, "date")
    except ValueError as exc:
        return _fail("date_shift", str(exc))
    # Check each amount before adding them up: a huge int would overflow float division.
    limits = {"days": (days, MAX_SHIFT_DAYS), "weeks": (weeks, MAX_SHIFT_DAYS // 7),
              "hours": (hours, MAX_SHIFT_DAYS * 24), "minutes": (minutes, MAX_SHIFT_DAYS * 1440)}
    for name, (amount, limit) in limits.items():
        if abs(amount) > limit:
            return _fail("date_shift", f"{name} must be between -{limit} and {limit}")
    try:
        # Wall-clock arithmetic: "+1 day" across a DST change keeps the time of day.
        moved = (start.replace(tzinfo=None) + timedelta(days=days, hours=hours, minutes=minutes,
                                                         weeks=weeks)).replace(tzinfo=start.tzinfo)
    except OverflowError:
        return _fail("date_shift", "the result is outside the years 1-9999")
    return ToolResult(
        tool_name="date_shift",
        content=f"{moved:%A, %d %B %Y, %H:%M} ({moved.isoformat(timespec='minutes')})",
        metadata={"iso": moved.isoformat(timespec="seconds"), "weekday": moved.strftime("%A")},
    )
