"""Schedule parsing and next-run computation: cron in IANA zones (DST), intervals, once."""

from __future__ import annotations

import pytest

from jarvis.errors import UserError
from jarvis.scheduler.schedules import iso, parse_iso, parse_schedule

NOW = parse_iso("2026-06-01T12:00:00Z")


def occurrences(schedule, start: str, count: int) -> list[str]:
    out, t = [], parse_iso(start)
    for _ in range(count):
        t = schedule.next_after(t)
        out.append(iso(t))
    return out


def test_cron_in_utc_by_default():
    s = parse_schedule("cron", "0 9 * * 1-5", now=NOW)
    # 2026-06-05 is a Friday: the next weekday 09:00 after it is Monday the 8th.
    assert occurrences(s, "2026-06-05T10:00:00Z", 2) == ["2026-06-08T09:00:00+00:00",
                                                        "2026-06-09T09:00:00+00:00"]


def test_cron_in_a_zone_is_stored_in_utc():
    s = parse_schedule("cron", "0 8 * * *", "Europe/Paris", now=NOW)
    assert occurrences(s, "2026-06-01T00:00:00Z", 1) == ["2026-06-01T06:00:00+00:00"]  # CEST
    assert occurrences(s, "2026-12-01T00:00:00Z", 1) == ["2026-12-01T07:00:00+00:00"]  # CET


def test_fall_back_fixed_time_fires_once():
    # 2026-11-01 01:30 happens twice in New York (EDT, then EST): fire only the first.
    s = parse_schedule("cron", "30 1 * * *", "America/New_York", now=NOW)
    assert occurrences(s, "2026-10-31T12:00:00Z", 3) == [
        "2026-11-01T05:30:00+00:00", "2026-11-02T06:30:00+00:00", "2026-11-03T06:30:00+00:00"]
    # Asked from inside the repeated hour's second pass, it does not fire again that day.
    assert occurrences(s, "2026-11-01T06:15:00Z", 1) == ["2026-11-02T06:30:00+00:00"]


def test_fall_back_hourly_fires_each_elapsed_hour_once():
    s = parse_schedule("cron", "30 * * * *", "America/New_York", now=NOW)
    assert occurrences(s, "2026-11-01T04:00:00Z", 4) == [
        "2026-11-01T04:30:00+00:00", "2026-11-01T05:30:00+00:00",  # 00:30, 01:30 EDT
        "2026-11-01T06:30:00+00:00", "2026-11-01T07:30:00+00:00"]  # 01:30 EST, 02:30 EST
    # From just before the transition, the second 01:30 is still found.
    assert occurrences(s, "2026-11-01T05:45:00Z", 1) == ["2026-11-01T06:30:00+00:00"]


def test_spring_forward_gap_fires_once_shifted():
    # 2026-03-08 02:30 does not exist in New York: it fires at 03:30 EDT (07:30 UTC), once.
    s = parse_schedule("cron", "30 2 * * *", "America/New_York", now=NOW)
    assert occurrences(s, "2026-03-07T12:00:00Z", 3) == [
        "2026-03-08T07:30:00+00:00", "2026-03-09T06:30:00+00:00", "2026-03-10T06:30:00+00:00"]
    hourly = parse_schedule("cron", "30 * * * *", "America/New_York", now=NOW)
    assert occurrences(hourly, "2026-03-08T05:00:00Z", 3) == [
        "2026-03-08T05:30:00+00:00", "2026-03-08T06:30:00+00:00", "2026-03-08T07:30:00+00:00"]
    # The spring-forward 01:30 EST exists normally.
    s130 = parse_schedule("cron", "30 1 * * *", "America/New_York", now=NOW)
    assert occurrences(s130, "2026-03-07T12:00:00Z", 2) == [
        "2026-03-08T06:30:00+00:00", "2026-03-09T05:30:00+00:00"]


@pytest.mark.parametrize("expression, message", [
    ("0 0 30 2 *", "can never fire"),
    ("0 0 31 4 *", "can never fire"),
    ("61 * * * *", "invalid cron expression"),
    ("* * * *", "must have 5 fields"),
    ("0 0 * * * *", "must have 5 fields"),
    ("every day", "must have 5 fields"),
    ("", "1-200 characters"),
])
def test_invalid_or_never_firing_cron_is_rejected(expression, message):
    with pytest.raises(UserError, match=message):
        parse_schedule("cron", expression, now=NOW)


def test_rare_but_possible_cron_is_accepted():
    s = parse_schedule("cron", "0 0 29 2 *", now=NOW)  # leap days only
    assert occurrences(s, "2026-06-01T00:00:00Z", 1) == ["2028-02-29T00:00:00+00:00"]
    assert parse_schedule("cron", "@daily", now=NOW).next_after(NOW) == parse_iso("2026-06-02T00:00:00Z")


def test_unknown_zone_is_rejected():
    with pytest.raises(UserError, match="unknown time zone 'Mars/Olympus'"):
        parse_schedule("cron", "0 8 * * *", "Mars/Olympus", now=NOW)


@pytest.mark.parametrize("zone", ["America", "Etc", "x" * 300, "../../etc/passwd", "/etc/passwd",
                                  "zone.tab", "a\x00b", "."])
def test_a_zone_name_that_is_a_path_is_an_unknown_zone(zone):
    # A zone name is looked up as a file under the zoneinfo folder: a folder raised
    # IsADirectoryError and a long name OSError out of schedule_task and `schedule add`.
    with pytest.raises(UserError, match="unknown time zone"):
        parse_schedule("cron", "0 8 * * *", zone, now=NOW)


def test_interval_bounds_and_steps():
    s = parse_schedule("interval", "3600", now=NOW)
    assert s.next_interval(NOW, NOW) == NOW + 3600
    assert s.next_interval(NOW, NOW + 7201) == NOW + 3 * 3600
    for bad, message in (("0", "between"), ("-5", "between"), ("nan", "between"),
                         ("soon", "not a duration: give seconds"), ("1x", "90s, 15m, 1h")):
        with pytest.raises(UserError, match=message):
            parse_schedule("interval", bad, now=NOW)


def test_intervals_take_durations_and_limits_read_in_words():
    from jarvis.scheduler.schedules import describe_seconds, parse_duration

    assert [parse_duration(v) for v in ("90", "90s", "15m", "1h", "1.5h", "1d", "1h30m")] == \
        [90, 90, 900, 3600, 5400, 86400, 5400]
    assert parse_schedule("interval", "1h", now=NOW).value == "3600"
    with pytest.raises(UserError, match=r"between 1 second and 366 days, got 400d"):
        parse_schedule("interval", "400d", now=NOW)
    assert [describe_seconds(s) for s in (1, 90, 900, 86400, 366 * 86400)] == \
        ["1 second", "90 seconds", "15 minutes", "1 day", "366 days"]


def test_once_parses_offsets_zones_and_rejects_the_past():
    assert parse_schedule("once", "2026-07-01T09:00:00Z", now=NOW).next_after(NOW) == \
        parse_iso("2026-07-01T09:00:00+00:00")
    local = parse_schedule("once", "2026-07-01T09:00:00", "Europe/Paris", now=NOW)
    assert iso(local.next_after(NOW)) == "2026-07-01T07:00:00+00:00"
    with pytest.raises(UserError, match="in the past"):
        parse_schedule("once", "2026-05-01T09:00:00Z", now=NOW)
    with pytest.raises(UserError, match="not an ISO 8601"):
        parse_schedule("once", "next tuesday", now=NOW)
    with pytest.raises(UserError, match="unknown schedule type"):
        parse_schedule("weekly", "1", now=NOW)


def between(schedule, start: str, end: str) -> list[str]:
    """Every firing instant in (start, end], as the daemon walks them one by one."""
    out, t, stop = [], parse_iso(start), parse_iso(end)
    while (t := schedule.next_after(t)) is not None and t <= stop:
        out.append(iso(t))
    return out


def test_fall_back_sub_hourly_wildcard_fires_every_slot_of_both_passes():
    # 2026-11-01 in New York: 01:00-01:59 happens twice (EDT, then EST). `*/20` with a wildcard
    # hour fires in each elapsed hour: 01:00, 01:20, 01:40 twice, plus 02:00-03:00 EST.
    s = parse_schedule("cron", "*/20 * * * *", "America/New_York", now=NOW)
    assert between(s, "2026-11-01T00:50:00-04:00", "2026-11-01T03:05:00-05:00") == [
        "2026-11-01T05:00:00+00:00", "2026-11-01T05:20:00+00:00", "2026-11-01T05:40:00+00:00",
        "2026-11-01T06:00:00+00:00", "2026-11-01T06:20:00+00:00", "2026-11-01T06:40:00+00:00",
        "2026-11-01T07:00:00+00:00", "2026-11-01T07:20:00+00:00", "2026-11-01T07:40:00+00:00",
        "2026-11-01T08:00:00+00:00"]
    every_minute = parse_schedule("cron", "* * * * *", "America/New_York", now=NOW)
    fired = between(every_minute, "2026-11-01T00:59:00-04:00", "2026-11-01T02:00:00-05:00")
    assert len(fired) == len(set(fired)) == 121  # 60 + 60 minutes of the two passes, then 02:00
    assert fired == sorted(fired)


def test_spring_forward_every_time_inside_the_gap_fires_once_shifted():
    # 2026-03-29 in Paris: 02:00-02:59 does not exist (CET -> CEST). 02:00 and 02:30 both fire,
    # shifted by the gap: 03:00 and 03:30 CEST (01:00 and 01:30 UTC).
    s = parse_schedule("cron", "0,30 2 * * *", "Europe/Paris", now=NOW)
    assert between(s, "2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z") == [
        "2026-03-29T01:00:00+00:00", "2026-03-29T01:30:00+00:00",
        "2026-03-30T00:00:00+00:00", "2026-03-30T00:30:00+00:00"]
    # A shifted time that lands on a real one fires once: `*/20` keeps one 03:00, 03:20, 03:40.
    wild = parse_schedule("cron", "*/20 * * * *", "Europe/Paris", now=NOW)
    assert between(wild, "2026-03-29T00:30:00Z", "2026-03-29T01:50:00Z") == [
        "2026-03-29T00:40:00+00:00", "2026-03-29T01:00:00+00:00", "2026-03-29T01:20:00+00:00",
        "2026-03-29T01:40:00+00:00"]
