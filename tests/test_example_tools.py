"""The example workspace tools shipped in tools/ (units.py, clock.py), run through the
ToolExecutor with ordinary and hostile arguments."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jarvis.core.types import ToolCall
from jarvis.tools.catalog import build_tools
from jarvis.tools.executor import ToolExecutor
from jarvis.workspace.tools import load_tool_file

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def run():
    for name in ("units.py", "clock.py"):
        report = load_tool_file(REPO / "tools" / name)
        assert report.error is None, report.error
    executor = ToolExecutor(build_tools(["convert_units", "current_time", "date_diff",
                                         "date_shift"]))

    def call(name: str, arguments: dict | str):
        return executor.execute(ToolCall(id="t", name=name, arguments=arguments))

    return call


@pytest.mark.parametrize(("value", "src", "dst", "expected"), [
    (5, "km", "mi", 3.10685596),
    (100, "F", "C", 37.7777778),
    (0, "celsius", "kelvin", 273.15),
    (3, "GiB", "MB", 3221.225472),
    (1, "mile", "feet", 5280),
    (2.5, "lbs", "kg", 1.133980925),
    (60, "mph", "km/h", 96.56064),
    (1, "kWh", "kcal", 860.42065),
    (1, "atm", "psi", 14.6959488),
    (-40, "C", "F", -40),
])
def test_convert_units(run, value, src, dst, expected) -> None:
    result = run("convert_units", {"value": value, "from_unit": src, "to_unit": dst})
    assert result.success, result.content
    assert result.metadata["value"] == pytest.approx(expected, rel=1e-6)
    assert result.content.startswith(f"{value:g} {src} = ")


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"value": 1, "from_unit": "kg", "to_unit": "m"}, "cannot convert mass (kg) to length (m)"),
    ({"value": 1, "from_unit": "C", "to_unit": "km"}, "cannot convert temperature"),
    ({"value": 1, "from_unit": "furlong", "to_unit": "m"}, "unknown unit 'furlong'"),
    ({"value": 1, "from_unit": "m" * 10_000, "to_unit": "km"}, "at most 32 characters"),
    ({"value": 1e300, "from_unit": "m", "to_unit": "km"}, "finite number"),
    ('{"value": Infinity, "from_unit": "m", "to_unit": "km"}', "finite number"),
    ('{"value": NaN, "from_unit": "m", "to_unit": "km"}', "finite number"),
    ({"value": -500, "from_unit": "K", "to_unit": "C"}, "below absolute zero"),
])
def test_convert_units_rejects_bad_input(run, arguments, expected) -> None:
    result = run("convert_units", arguments)
    assert not result.success
    assert result.error_type.value == "invalid_args"
    assert expected in result.content


def test_convert_units_schema_validation(run) -> None:
    result = run("convert_units", {"value": "lots", "from_unit": "m", "to_unit": "km"})
    assert not result.success and result.error_type.value == "invalid_args"
    missing = run("convert_units", {"value": 1, "from_unit": "m"})
    assert not missing.success and "to_unit" in missing.content


def test_current_time_in_a_zone(run) -> None:
    result = run("current_time", {"timezone": "Asia/Tokyo"})
    assert result.success, result.content
    stamp = datetime.fromisoformat(result.metadata["iso"])
    assert stamp.utcoffset().total_seconds() == 9 * 3600
    now = datetime.now(ZoneInfo("Asia/Tokyo"))
    assert abs((now - stamp).total_seconds()) < 60
    assert result.metadata["weekday"] in result.content


@pytest.mark.parametrize("zone", ["../../etc/passwd", "/etc/localtime", "Not/AZone",
                                  "x" * 1000, "UTC\x00", ""])
def test_current_time_rejects_bad_zones(run, zone) -> None:
    result = run("current_time", {"timezone": zone})
    assert not result.success
    assert result.error_type.value == "invalid_args"
    assert "time zone" in result.content


def test_date_diff(run) -> None:
    result = run("date_diff", {"start": "2024-01-01", "end": "2024-03-01T12:00"})
    assert result.success
    assert result.content.startswith("60 days, 12 hours")
    assert result.metadata["days"] == 60.5
    back = run("date_diff", {"start": "2024-03-01", "end": "2024-01-01"})
    assert back.content.startswith("-60 days") and back.metadata["days"] == -60
    # offsets are honoured: the same instant in two zones is 0 apart
    same = run("date_diff", {"start": "2024-05-01T12:00+02:00", "end": "2024-05-01T10:00Z"})
    assert same.metadata["seconds"] == 0


def test_date_shift_keeps_wall_clock_across_dst(run) -> None:
    result = run("date_shift", {"date": "2024-03-30T12:00", "days": 1,
                                "timezone": "Europe/Paris"})
    assert result.success, result.content
    assert result.metadata["iso"] == "2024-03-31T12:00:00+02:00"
    assert result.metadata["weekday"] == "Sunday"
    weeks = run("date_shift", {"date": "2024-02-26", "weeks": 1})
    assert weeks.metadata["iso"].startswith("2024-03-04")  # leap year


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"date": "9999-12-31", "days": 1}, "outside the years 1-9999"),
    ({"date": "2024-01-01", "hours": 10 ** 400}, "hours must be between"),
    ({"date": "2024-01-01", "days": -(10 ** 9)}, "days must be between"),
    ({"date": "yesterday-ish"}, "not an ISO 8601 date"),
    ({"date": "2024-01-01" * 50}, "at most 40 characters"),
    ({"date": "2024-01-01", "timezone": "Mars/Olympus"}, "unknown time zone"),
])
def test_date_shift_rejects_bad_input(run, arguments, expected) -> None:
    result = run("date_shift", arguments)
    assert not result.success
    assert result.error_type.value == "invalid_args"
    assert expected in result.content


def test_date_diff_rejects_bad_input(run) -> None:
    result = run("date_diff", json.dumps({"start": "2024-13-45", "end": "now"}))
    assert not result.success and "not an ISO 8601 date" in result.content
