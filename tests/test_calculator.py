"""calculator: the reference's operators, functions and constants, and hostile input."""

from __future__ import annotations

import time

import pytest

from jarvis.core.types import ErrorType, ToolCall
from jarvis.tools.calculator import MAX_EXPRESSION_CHARS, CalculatorTool
from jarvis.tools.executor import ToolExecutor


def calc(expression: str):
    return CalculatorTool().execute(expression=expression)


def test_reference_example():
    result = calc("sqrt(144) + 3**2")
    assert result.content == "21.0"
    assert result.success is True


@pytest.mark.parametrize("expression, expected", [
    ("2+3*4", "14"), ("10-4", "6"), ("7/2", "3.5"), ("7//2", "3"), ("7%3", "1"), ("2**10", "1024"),
    ("-3 + +2", "-1"), ("abs(-3)", "3"), ("round(2.567, 2)", "2.57"), ("round(2.6)", "3"),
    ("min(4, 2, 8)", "2"), ("max(4, 2, 8)", "8"), ("sqrt(16)", "4.0"), ("log(e)", "1.0"),
    ("log(8, 2)", "3.0"), ("log10(1000)", "3.0"), ("log2(8)", "3.0"), ("sin(0)", "0.0"),
    ("cos(0)", "1.0"), ("tan(0)", "0.0"), ("ceil(2.1)", "3"), ("floor(2.9)", "2"),
    ("pi", "3.141592653589793"), ("e", "2.718281828459045"), ("2**-1", "0.5"),
    ("1 << 4", "16"), ("256 >> 2", "64"), ("(1 + 2) * (3 + 4)", "21"), ("0.1 + 0.2", "0.30000000000000004"),
    ("+".join(["1"] * 90), "90"),
])
def test_supported_operations(expression, expected):
    result = calc(expression)
    assert result.success, result.content
    assert result.content == expected


HOSTILE = [
    ("9**9**9", "too large"),
    ("10**10**10", "too large"),
    ("1<<10**9", "too large"),
    ("2**4096", "too large"),
    ("*".join(["9**999"] * 40), "too large"),
    ("9**999 * 9**999", "too large"),
    ("(" * 100_000 + "1" + ")" * 100_000, "characters"),
    ("-" * 100_000 + "1", "characters"),
    ("(" * 100_000, "characters"),
    ("(" * 150 + "1" + ")" * 150, "nested too deeply"),
    ("-" * 900 + "1", "nested too deeply"),
    ("+".join(["1"] * 150), "nested too deeply"),
    ("+".join(["max(" + ",".join(["1"] * 64) + ")"] * 7), "too many parts"),
    ("round(1, 10**9)", "round() digits"),
    ("__import__('os')", "unsupported function call"),
    ("__import__('os').system('true')", "unsupported"),
    ("(1).real", "unsupported syntax: Attribute"),
    ("pi.__class__", "unsupported syntax: Attribute"),
    ("(lambda: 1)()", "unsupported function call"),
    ("lambda: 1", "unsupported syntax: Lambda"),
    ("[x for x in (1, 2)]", "unsupported syntax: ListComp"),
    ("{x: 1 for x in (1,)}", "unsupported syntax: DictComp"),
    ("x", "unknown name 'x'"),
    ("open", "unknown name 'open'"),
    ("sqrt(x=4)", "keyword arguments"),
    ("max(*[1, 2])", "unsupported syntax"),
    ("1/0", "division by zero"),
    ("1//0", "division by zero"),
    ("1%0", "modulo by zero"),
    ("0**-1", "division by zero"),
    ("1e308*10", "not a finite number"),
    ("1e308+1e308", "not a finite number"),
    ("min(1e308*10, 1)", "not a finite number"),
    ("2**4000 / 3", "too large"),
    ("sqrt(2**4000)", "too large"),
    ("sqrt(-1)", "math error"),
    ("log(0)", "math error"),
    ("(-8) ** (1/3)", "not a real number"),
    ("'text'", "unsupported value"),
    ("True", "unsupported value"),
    ("1j", "unsupported value"),
    ("~1", "unsupported operator"),
    ("1 < 2", "unsupported syntax: Compare"),
    ("1; 2", "invalid syntax"),
    ("import os", "invalid syntax"),
    ("", "empty"),
    ("   ", "empty"),
    ("sqrt()", "takes 1 arguments"),
]


@pytest.mark.parametrize("expression, words", HOSTILE, ids=[h[0][:40] for h in HOSTILE])
def test_hostile_input_fails_clearly_and_fast(expression, words):
    start = time.perf_counter()
    result = calc(expression)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0  # a safety property: bounded before computing, not by a timeout
    assert not result.success
    assert result.error_type is ErrorType.EXECUTION
    assert words in result.content, result.content
    assert result.content.startswith("Error: ")
    assert "inf" not in result.content.split("Error: ")[1].split()[0:1]


def test_expression_length_is_also_bounded_by_the_schema():
    executor = ToolExecutor([CalculatorTool()])
    too_long = "1+" * MAX_EXPRESSION_CHARS + "1"
    result = executor.execute(ToolCall("c", "calculator", {"expression": too_long}))
    assert result.error_type is ErrorType.INVALID_ARGS
    assert "expression" in result.content


def test_non_string_expression_is_invalid_args_when_called_directly():
    result = CalculatorTool().execute(expression=5)
    assert not result.success and result.error_type is ErrorType.INVALID_ARGS


def test_results_are_never_inf_or_nan():
    for expression in ("1e308*10", "-1e308*10", "1e308*10 - 1e308*10", "10.0**400"):
        result = calc(expression)
        assert not result.success
        assert result.content not in ("inf", "-inf", "nan")


def test_big_but_allowed_integers_are_exact():
    result = calc("2**4095")
    assert result.success and int(result.content) == 2**4095


def test_spec_matches_the_reference():
    spec = CalculatorTool().spec
    assert spec.name == "calculator" and spec.category == "math"
    assert spec.description == "Evaluate a mathematical expression safely."
    assert spec.parameters["required"] == ["expression"]
    assert spec.parameters["properties"]["expression"]["type"] == "string"
    assert spec.cost_estimate == 0.0
