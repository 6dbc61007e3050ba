"""Durations as people write them: `90` (seconds), `90s`, `15m`, `24h`, `30d`, `2w`, `1h30m`.

Used where a person gives a lifetime in config.toml or on the command line
(`[approvals] expire_after`, `jarvis grants add --expires 30d`). Bounds are the caller's.
"""

from __future__ import annotations

import math
import re

_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0,
          "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(sec|min|[smhdw])", re.IGNORECASE)


def parse_duration(value: object) -> float:
    """Seconds from `90`, `90s`, `15m`, `1.5h`, `1d`, `2w` or `1h30m`; ValueError naming the
    accepted forms for anything else (negative, NaN and infinite values included)."""
    text = str(value).strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _PART.findall(text)
        if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s+", "", text):
            raise ValueError(f"{str(value)[:40]!r} is not a duration: give seconds (90) or a "
                             f"number with a unit: 90s, 15m, 24h, 30d, 1h30m") from None
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{str(value)[:40]!r} is not a duration: it must be 0 or more")
    return seconds


def describe_duration(seconds: float) -> str:
    """A duration in words, rounded to its largest unit: "45 s", "15 min", "24 h", "30 d"."""
    for size, unit in ((86400.0, "d"), (3600.0, "h"), (60.0, "min")):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"
