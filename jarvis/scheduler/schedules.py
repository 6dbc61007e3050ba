"""When a task fires: `once` (an ISO 8601 time), `interval` (seconds) or `cron` (5 fields).

Every instant is a POSIX timestamp (UTC). Cron expressions are read in an IANA time zone
(default UTC) with these daylight-saving rules, which never fire one occurrence twice:

- a wall-clock time that does not exist (spring forward, e.g. 02:30 in New York) fires once,
  shifted forward by the gap (03:30 local); each such time does (`0,30 2 * * *` fires at
  03:00 and 03:30), and one that lands on a time that also fires runs once;
- a wall-clock time that occurs twice (fall back, e.g. 01:30) fires once, the first time, for
  expressions with a fixed hour; expressions whose hour field is a wildcard (`*`, `*/2`) fire
  in both passes of the repeated hour, because those are different elapsed hours.

An invalid expression, an unknown zone, or an expression that can never fire (`0 0 30 2 *`)
is a UserError when the schedule is parsed, i.e. when the task is created.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal

from jarvis.errors import UserError

ScheduleType = Literal["once", "interval", "cron"]
SCHEDULE_TYPES: tuple[str, ...] = ("once", "interval", "cron")

MIN_INTERVAL_SECONDS = 1.0
MAX_INTERVAL_SECONDS = 366 * 24 * 3600.0

_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0,
          "w": 604800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(sec|min|[smhdw])", re.IGNORECASE)


def parse_duration(value: object) -> float:
    """Seconds from `90`, `90s`, `15m`, `1h`, `1.5h`, `1d`, `2w` or `1h30m`; ValueError (with
    the accepted forms) for anything else. Bounds are the caller's."""
    text = str(value).strip().lower()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s+", "", text):
        raise ValueError(f"{value!r} is not a duration: give seconds (90) or a number with a "
                         f"unit: 90s, 15m, 1h, 1d, 1h30m")
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


def describe_seconds(seconds: float) -> str:
    """A duration in words: "1 second", "90 seconds", "15 minutes", "24 hours", "366 days"."""
    for size, word in ((86400.0, "day"), (3600.0, "hour"), (60.0, "minute")):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {word}{'' if count == 1 else 's'}"
    return f"{seconds:g} second{'' if seconds == 1 else 's'}"
MAX_EXPRESSION_CHARS = 200

# croniter understands these aliases; spelled out so the hour-field rule can see them.
CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class ScheduleError(UserError):
    """A schedule that is invalid or can never fire; the message says how to write it."""


@dataclass(slots=True, frozen=True)
class Schedule:
    """A parsed, validated schedule. `value` is kept as the user wrote it."""

    type: ScheduleType
    value: str
    timezone: str = "UTC"

    def next_after(self, after: float) -> float | None:
        """The first firing instant strictly after `after` (None: never again)."""
        if self.type == "once":
            at = parse_iso(self.value, self.timezone)
            return at if at > after else None
        if self.type == "interval":
            raise ValueError("interval schedules advance from their anchor: use next_interval()")
        return _cron_next(_cron_fields(self.value), _zone(self.timezone), after)

    def next_interval(self, anchor: float, after: float) -> float:
        """For `interval`: the first `anchor + k * seconds` strictly after `after`."""
        seconds = float(self.value)
        if after < anchor:
            return anchor
        steps = math.floor((after - anchor) / seconds) + 1
        return anchor + steps * seconds

    def describe(self) -> str:
        if self.type == "once":
            try:
                return f"once at {iso(parse_iso(self.value, self.timezone))}"
            except ScheduleError:
                return f"once at {self.value} (out of range)"
        if self.type == "interval":
            return f"every {seconds_text(float(self.value))} s"
        return f"cron '{self.value}' ({self.timezone})"


def parse_schedule(schedule_type: str, value: str, timezone: str | None = "UTC", *,
                   now: float | None = None) -> Schedule:
    """Validate a schedule; raise ScheduleError naming the problem and the fix."""
    import time

    now = time.time() if now is None else now
    timezone = timezone or "UTC"
    if schedule_type not in SCHEDULE_TYPES:
        raise ScheduleError(f"unknown schedule type {schedule_type!r}; use one of: "
                            f"{', '.join(SCHEDULE_TYPES)}")
    if not isinstance(value, str):
        value = str(value)
    value = value.strip()
    if not value or len(value) > MAX_EXPRESSION_CHARS:
        raise ScheduleError(f"the {schedule_type} schedule value must be 1-{MAX_EXPRESSION_CHARS} "
                            f"characters, got {len(value)}")
    zone = _zone(timezone)
    if schedule_type == "interval":
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise ScheduleError(f"interval: {exc}") from None
        if not math.isfinite(seconds) or not (MIN_INTERVAL_SECONDS <= seconds <= MAX_INTERVAL_SECONDS):
            raise ScheduleError(f"interval must be between "
                                f"{describe_seconds(MIN_INTERVAL_SECONDS)} and "
                                f"{describe_seconds(MAX_INTERVAL_SECONDS)}, got {value}")
        return Schedule("interval", seconds_text(seconds), timezone)
    if schedule_type == "once":
        at = parse_iso(value, timezone)
        # A few seconds of slack: "now" typed by a person is already in the past.
        if at < now - 5:
            raise ScheduleError(f"the time {iso(at)} is in the past; give a future ISO 8601 time, "
                                f"e.g. {iso(now + 3600)}")
        return Schedule("once", value, timezone)
    fields = _cron_fields(value)
    if _cron_next(fields, zone, now) is None:
        raise ScheduleError(f"cron expression {value!r} can never fire (e.g. February 30th); "
                            f"check the day-of-month and month fields")
    return Schedule("cron", value, timezone)


def parse_iso(value: str, timezone: str = "UTC") -> float:
    """An ISO 8601 time as a timestamp; a time without an offset is read in `timezone`."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ScheduleError(f"{value!r} is not an ISO 8601 date-time; write e.g. "
                            f"2030-03-01T09:00:00Z or 2030-03-01T09:00:00+01:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_zone(timezone))
    # Valid ISO text can still name an instant outside what a datetime holds once moved to
    # UTC (9999-12-31T23:59:59-05:00 is in year 10000): refuse it here, or every listing
    # that shows the time fails later.
    try:
        stamp = moment.timestamp()
        datetime.fromtimestamp(stamp, UTC)
    except (OverflowError, ValueError, OSError):
        raise ScheduleError(f"{value!r} is out of range; give a time between "
                            f"0001-01-02T00:00:00Z and 9999-12-30T23:59:59Z") from None
    return stamp


def seconds_text(seconds: float) -> str:
    """A number of seconds as text that reads back exactly (1000001, not %g's 1e+06)."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def iso(ts: float | None) -> str | None:
    """A timestamp as ISO 8601 in UTC (seconds precision), e.g. 2026-02-26T08:00:00+00:00."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        # Refused on input since issue 13; a row stored before must not break every listing.
        return f"out of range ({ts!r})"


MAX_ZONE_NAME = 64


def _zone(name: str) -> tzinfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if name.upper() == "UTC":
        return UTC
    unknown = ScheduleError(f"unknown time zone {name[:MAX_ZONE_NAME]!r}; use an IANA name "
                            f"such as Europe/Paris or America/New_York")
    if len(name) > MAX_ZONE_NAME:  # the longest IANA name has 32 characters
        raise unknown
    try:
        return ZoneInfo(name)
    # A name is a path under the zoneinfo folder: a folder ("America") is IsADirectoryError,
    # a long one "File name too long"; neither may escape as an OSError traceback.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise unknown from None


def _cron_fields(expression: str) -> str:
    """The 5-field form of a cron expression, validated (aliases expanded)."""
    from croniter import croniter

    text = " ".join(expression.split())
    text = CRON_ALIASES.get(text.lower(), text)
    if len(text.split(" ")) != 5:
        raise ScheduleError(f"cron expression {expression!r} must have 5 fields "
                            f"(minute hour day-of-month month day-of-week), e.g. '0 9 * * 1-5'")
    if not croniter.is_valid(text):
        raise ScheduleError(f"invalid cron expression {expression!r}; fields are minute (0-59), "
                            f"hour (0-23), day of month (1-31), month (1-12), day of week (0-6), "
                            f"e.g. '*/15 9-17 * * 1-5'")
    return text


def _cron_next(fields: str, zone: tzinfo, after: float) -> float | None:
    """The first instant after `after` at which `fields` fires in `zone` (DST rules above)."""
    from croniter import croniter
    from croniter.croniter import CroniterBadDateError

    hour_wild = fields.split(" ")[1].startswith("*")
    moment = datetime.fromtimestamp(after, zone)
    # Near a transition, wall-clock order is not time order: the repeated hour's second pass
    # (fall back) and the shifted times of a gap (spring forward) lie *behind* the current
    # wall clock. Start the walk that much earlier (and a second before, since croniter
    # returns times strictly after its start).
    offset = moment.utcoffset() or timedelta()
    shift = max(abs(offset - (datetime.fromtimestamp(after + delta, zone).utcoffset()
                              or timedelta())) for delta in (-3 * 3600, 3 * 3600))
    start = moment.replace(tzinfo=None) - shift - timedelta(seconds=1)
    walk = croniter(fields, start, max_years_between_matches=50)
    best: float | None = None
    for _ in range(6 * 60 + 8):  # bounded: the minutes of a shifted window, then done
        try:
            wall = walk.get_next(datetime)
        except CroniterBadDateError:
            break
        # fold=0 is the first pass of a repeated time, and a gap time shifted forward by the
        # gap; fold=1 is the second pass, which only wildcard-hour expressions fire.
        first = wall.replace(tzinfo=zone, fold=0).timestamp()
        candidates = [first]
        second = wall.replace(tzinfo=zone, fold=1)
        if hour_wild and second.timestamp() != first and _exists(second):
            candidates.append(second.timestamp())
        for instant in candidates:
            if instant > after and (best is None or instant < best):
                best = instant
        # First-pass instants grow with the wall time and a second pass is later than its
        # first, so once a first pass is past `after` nothing later in the walk is earlier.
        if first > after:
            break
    return best


def _exists(moment: datetime) -> bool:
    """Whether an aware wall time round-trips (i.e. is not inside a spring-forward gap)."""
    back = datetime.fromtimestamp(moment.timestamp(), moment.tzinfo)
    return back.replace(tzinfo=None) == moment.replace(tzinfo=None)
