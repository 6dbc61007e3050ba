"""Workspace tool: convert a quantity between units (length, mass, volume, area, time,
speed, data, energy, pressure and temperature).

Loaded by path by jarvis (this folder is not a package). Every argument comes from a model,
so the inputs are bounded before any work: unit names are short strings looked up in a fixed
table, and the value must be a finite number of sane magnitude.
"""

from __future__ import annotations

import math

from jarvis import ErrorType, ToolResult, tool

MAX_ABS_VALUE = 1e18
MAX_UNIT_CHARS = 32

# unit -> (dimension, factor to the dimension's base unit)
_UNITS: dict[str, tuple[str, float]] = {}


def _add(dimension: str, factor: float, *names: str) -> None:
    for name in names:
        _UNITS[name] = (dimension, factor)


# length (metre)
_add("length", 1.0, "m", "meter", "meters", "metre", "metres")
_add("length", 1e-3, "mm", "millimeter", "millimeters", "millimetre", "millimetres")
_add("length", 1e-2, "cm", "centimeter", "centimeters", "centimetre", "centimetres")
_add("length", 1e3, "km", "kilometer", "kilometers", "kilometre", "kilometres")
_add("length", 0.0254, "in", "inch", "inches")
_add("length", 0.3048, "ft", "foot", "feet")
_add("length", 0.9144, "yd", "yard", "yards")
_add("length", 1609.344, "mi", "mile", "miles")
_add("length", 1852.0, "nmi", "nautical_mile", "nautical_miles")
# mass (kilogram)
_add("mass", 1.0, "kg", "kilogram", "kilograms")
_add("mass", 1e-3, "g", "gram", "grams")
_add("mass", 1e-6, "mg", "milligram", "milligrams")
_add("mass", 1e3, "t", "tonne", "tonnes", "metric_ton")
_add("mass", 0.45359237, "lb", "lbs", "pound", "pounds")
_add("mass", 0.028349523125, "oz", "ounce", "ounces")
_add("mass", 6.35029318, "st", "stone", "stones")
# volume (litre)
_add("volume", 1.0, "l", "liter", "liters", "litre", "litres")
_add("volume", 1e-3, "ml", "milliliter", "milliliters", "millilitre", "millilitres")
_add("volume", 1e3, "m3", "cubic_meter", "cubic_meters")
_add("volume", 3.785411784, "gal", "gallon", "gallons", "us_gallon")
_add("volume", 0.946352946, "qt", "quart", "quarts")
_add("volume", 0.473176473, "pt", "pint", "pints")
_add("volume", 0.2365882365, "cup", "cups")
_add("volume", 0.0295735295625, "fl_oz", "floz", "fluid_ounce", "fluid_ounces")
# area (square metre)
_add("area", 1.0, "m2", "square_meter", "square_meters")
_add("area", 1e6, "km2", "square_kilometer", "square_kilometers")
_add("area", 1e4, "ha", "hectare", "hectares")
_add("area", 4046.8564224, "acre", "acres")
_add("area", 0.09290304, "ft2", "square_foot", "square_feet")
_add("area", 2589988.110336, "mi2", "square_mile", "square_miles")
# time (second)
_add("time", 1.0, "s", "sec", "second", "seconds")
_add("time", 1e-3, "ms", "millisecond", "milliseconds")
_add("time", 60.0, "min", "minute", "minutes")
_add("time", 3600.0, "h", "hr", "hour", "hours")
_add("time", 86400.0, "d", "day", "days")
_add("time", 604800.0, "wk", "week", "weeks")
_add("time", 31557600.0, "yr", "year", "years")  # Julian year
# speed (metre per second)
_add("speed", 1.0, "m/s", "mps")
_add("speed", 1000 / 3600, "km/h", "kph", "kmh")
_add("speed", 1609.344 / 3600, "mph")
_add("speed", 1852 / 3600, "kn", "knot", "knots")
# data (byte)
_add("data", 1.0, "b", "byte", "bytes")
_add("data", 0.125, "bit", "bits")
for _i, _prefix in enumerate(("k", "m", "g", "t", "p"), start=1):
    _add("data", 1000.0 ** _i, f"{_prefix}b")
    _add("data", 1024.0 ** _i, f"{_prefix}ib")
# energy (joule)
_add("energy", 1.0, "j", "joule", "joules")
_add("energy", 1e3, "kj", "kilojoule", "kilojoules")
_add("energy", 4.184, "cal", "calorie", "calories")
_add("energy", 4184.0, "kcal", "kilocalorie", "kilocalories")
_add("energy", 3.6e6, "kwh", "kilowatt_hour", "kilowatt_hours")
# pressure (pascal)
_add("pressure", 1.0, "pa", "pascal", "pascals")
_add("pressure", 1e3, "kpa")
_add("pressure", 1e5, "bar")
_add("pressure", 101325.0, "atm")
_add("pressure", 6894.757293168, "psi")

# temperature is affine: (to kelvin, from kelvin)
_TEMPERATURE = {
    "c": (lambda v: v + 273.15, lambda k: k - 273.15),
    "f": (lambda v: (v - 32) * 5 / 9 + 273.15, lambda k: (k - 273.15) * 9 / 5 + 32),
    "k": (lambda v: v, lambda k: k),
}
_TEMPERATURE_ALIASES = {
    "c": "c", "°c": "c", "celsius": "c", "degc": "c",
    "f": "f", "°f": "f", "fahrenheit": "f", "degf": "f",
    "k": "k", "kelvin": "k",
}


def _normalize(unit: str) -> str:
    return unit.strip().lower().replace(" ", "_").replace("-", "_")


def _fail(message: str) -> ToolResult:
    return ToolResult.failure("convert_units", message, ErrorType.INVALID_ARGS)


def _format(number: float) -> str:
    return f"{number:.10g}"


# Neutral results, nothing sent out (docs/trust.md): arithmetic on its arguments.
@tool(category="math", inline=True, latency_estimate=0.0001, output="neutral",
      egress="none")
def convert_units(value: float, from_unit: str, to_unit: str) -> ToolResult:
    """Convert a quantity between units, e.g. 5 km to mi, 100 F to C, 3 GiB to MB.

    Args:
        value: The number to convert.
        from_unit: The unit of `value` (e.g. km, lb, l, C, MiB, mph, kWh, psi).
        to_unit: The unit to convert to (same kind of quantity).
    """
    if isinstance(value, bool) or not math.isfinite(value) or abs(value) > MAX_ABS_VALUE:
        return _fail(f"value must be a finite number with magnitude at most {MAX_ABS_VALUE:g}")
    if len(from_unit) > MAX_UNIT_CHARS or len(to_unit) > MAX_UNIT_CHARS:
        return _fail(f"unit names are at most {MAX_UNIT_CHARS} characters")
    src, dst = _normalize(from_unit), _normalize(to_unit)

    t_src, t_dst = _TEMPERATURE_ALIASES.get(src), _TEMPERATURE_ALIASES.get(dst)
    if t_src and t_dst:
        kelvin = _TEMPERATURE[t_src][0](value)
        if kelvin < 0:
            return _fail(f"{_format(value)} {from_unit} is below absolute zero")
        result = _TEMPERATURE[t_dst][1](kelvin)
        return ToolResult(tool_name="convert_units",
                          content=f"{_format(value)} {from_unit} = {_format(result)} {to_unit}",
                          metadata={"value": result, "unit": to_unit, "dimension": "temperature"})

    # "c", "f", "k" only mean temperatures; other units come from the table.
    known_src = _UNITS.get(src) if not t_src else None
    known_dst = _UNITS.get(dst) if not t_dst else None
    for raw, known, is_temp in ((from_unit, known_src, t_src), (to_unit, known_dst, t_dst)):
        if known is None and not is_temp:
            return _fail(f"unknown unit {raw!r}; known units include m, km, mi, ft, kg, lb, "
                         "l, gal, m2, acre, s, h, day, km/h, mph, B, KiB, MB, J, kWh, Pa, psi, "
                         "C, F, K")
    if known_src is None or known_dst is None or known_src[0] != known_dst[0]:
        kind_src = "temperature" if t_src else known_src[0]  # type: ignore[index]
        kind_dst = "temperature" if t_dst else known_dst[0]  # type: ignore[index]
        return _fail(f"cannot convert {kind_src} ({from_unit}) to {kind_dst} ({to_unit})")
    result = value * known_src[1] / known_dst[1]
    return ToolResult(tool_name="convert_units",
                      content=f"{_format(value)} {from_unit} = {_format(result)} {to_unit}",
                      metadata={"value": result, "unit": to_unit, "dimension": known_src[0]})
