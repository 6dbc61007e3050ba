"""calculator: a safe math evaluator over Python's `ast`, with its work bounded up front.

Only whitelisted syntax, functions and constants; no names, attributes or calls outside the
whitelist. Every operation that could grow without bound (powers, shifts, products of big
integers, rounding to huge digit counts) is checked *before* it is computed, so hostile input
fails fast instead of holding the GIL where no timeout can stop it.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

MAX_EXPRESSION_CHARS = 1_000
MAX_NODES = 400
MAX_DEPTH = 100  # below CPython's own limit of 200 nested parentheses
MAX_INT_BITS = 4_096  # ~1 233 decimal digits: plenty for a calculator, cheap to compute
MAX_ROUND_DIGITS = 100


class CalculatorError(ValueError):
    """A user-facing evaluation error."""


def _sqrt(x: float) -> float:
    return math.sqrt(x)


def _round(x: float, ndigits: int | None = None) -> float:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int):
        raise CalculatorError("round() digits must be an integer")
    if abs(ndigits) > MAX_ROUND_DIGITS:
        raise CalculatorError(f"round() digits must be within ±{MAX_ROUND_DIGITS}")
    return round(x, ndigits)


def _log(x: float, base: float | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int]] = {
    # name: (function, min args, max args)
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "min": (min, 1, 64),
    "max": (max, 1, 64),
    "sqrt": (_sqrt, 1, 1),
    "log": (_log, 1, 2),
    "log10": (math.log10, 1, 1),
    "log2": (math.log2, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "floor": (math.floor, 1, 1),
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}


def _bits(value: int | float) -> int:
    return abs(int(value)).bit_length() if isinstance(value, int) else 0


def _check_int(value: Any) -> Any:
    """Every intermediate value: ints stay small, floats stay finite (no inf/nan ever leaks
    into a later step, e.g. `min(1e308*10, 1)`)."""
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise CalculatorError(f"result is too large (over {MAX_INT_BITS} bits)")
    elif isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not a finite number (overflow or undefined)")
    return value


def _pow(base: Any, exp: Any) -> Any:
    if isinstance(base, int) and isinstance(exp, int):
        if exp < 0:
            if base == 0:
                raise CalculatorError("division by zero (0 raised to a negative power)")
            return _float_pow(float(base), float(exp))
        if abs(base) > 1 and (_bits(base) - 1) * exp > MAX_INT_BITS:
            raise CalculatorError(f"result is too large: {base}**{exp} exceeds {MAX_INT_BITS} bits")
        return base**exp
    return _float_pow(float(base), float(exp))


def _float_pow(base: float, exp: float) -> float:
    if base == 0 and exp < 0:
        raise CalculatorError("division by zero (0 raised to a negative power)")
    if base < 0 and not float(exp).is_integer():
        raise CalculatorError("a negative number to a fractional power is not a real number")
    try:
        return math.pow(base, exp)
    except OverflowError:
        raise CalculatorError("result is too large for a float") from None


def _mul(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and _bits(a) + _bits(b) > MAX_INT_BITS + 1:
        raise CalculatorError(f"result is too large (over {MAX_INT_BITS} bits)")
    return a * b


def _lshift(a: Any, b: Any) -> Any:
    _require_ints("<<", a, b)
    if b < 0:
        raise CalculatorError("negative shift count")
    if _bits(a) + b > MAX_INT_BITS:
        raise CalculatorError(f"result is too large (over {MAX_INT_BITS} bits)")
    return a << b


def _rshift(a: Any, b: Any) -> Any:
    _require_ints(">>", a, b)
    if b < 0:
        raise CalculatorError("negative shift count")
    return a >> b


def _require_ints(op: str, a: Any, b: Any) -> None:
    if not (isinstance(a, int) and isinstance(b, int)):
        raise CalculatorError(f"{op} needs whole numbers")


def _div(a: Any, b: Any) -> Any:
    if b == 0:
        raise CalculatorError("division by zero")
    return a / b


def _floordiv(a: Any, b: Any) -> Any:
    if b == 0:
        raise CalculatorError("division by zero")
    return a // b


def _mod(a: Any, b: Any) -> Any:
    if b == 0:
        raise CalculatorError("modulo by zero")
    return a % b


BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _mul,
    ast.Div: _div,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _pow,
    ast.LShift: _lshift,
    ast.RShift: _rshift,
}
UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>"}


def _parse(expression: str) -> ast.Expression:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is {len(expression)} characters; "
                              f"the limit is {MAX_EXPRESSION_CHARS}")
    if not expression.strip():
        raise CalculatorError("expression is empty")
    # Nesting is checked on the text first: the parser itself recurses on deep input.
    if expression.count("(") + expression.count("[") > MAX_DEPTH:  # else it cannot be too deep
        depth = deepest = 0
        for ch in expression:
            if ch in "([":
                depth += 1
                deepest = max(deepest, depth)
            elif ch in ")]":
                depth -= 1
        if deepest > MAX_DEPTH:
            raise CalculatorError(f"expression is nested too deeply (limit {MAX_DEPTH})")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"invalid syntax: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise CalculatorError("expression is too complex to parse") from None
    nodes = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, level = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise CalculatorError(f"expression has too many parts (limit {MAX_NODES})")
        if level > MAX_DEPTH:
            raise CalculatorError(f"expression is nested too deeply (limit {MAX_DEPTH})")
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return tree


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CalculatorError(f"unsupported value: {value!r}")
        return _check_int(value)
    if isinstance(node, ast.BinOp):
        fn = BINARY.get(type(node.op))
        if fn is None:
            raise CalculatorError(f"unsupported operator: {type(node.op).__name__}")
        return _check_int(fn(_eval(node.left), _eval(node.right)))
    if isinstance(node, ast.UnaryOp):
        ufn = UNARY.get(type(node.op))
        if ufn is None:
            raise CalculatorError(f"unsupported operator: {type(node.op).__name__}")
        return _check_int(ufn(_eval(node.operand)))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}; constants: {', '.join(CONSTANTS)}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            allowed = ", ".join(FUNCTIONS)
            raise CalculatorError(f"unsupported function call; allowed functions: {allowed}")
        if node.keywords:
            raise CalculatorError("keyword arguments are not supported")
        fn, low, high = FUNCTIONS[node.func.id]
        if not low <= len(node.args) <= high:
            raise CalculatorError(f"{node.func.id}() takes {low}"
                                  f"{'' if low == high else f' to {high}'} arguments")
        args = [_eval(a) for a in node.args]
        return _check_int(fn(*args))
    raise CalculatorError(f"unsupported syntax: {type(node).__name__}")


def evaluate(expression: str) -> int | float:
    """Evaluate `expression`; raise CalculatorError with a readable message on bad input."""
    tree = _parse(expression)
    try:
        value = _eval(tree)
    except CalculatorError:
        raise
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("result is too large for a float") from None
    except (ValueError, TypeError) as exc:
        raise CalculatorError(f"math error: {exc}") from None
    except RecursionError:
        raise CalculatorError("expression is nested too deeply") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not a finite number")
    return value


def safe_eval(expression: str) -> float:
    """Evaluate `expression` to a float, as OpenJarvis's `calculator.safe_eval` does.

    The calculator's own evaluator with its bounds; `^` is a power, as in OpenJarvis (the
    calculator tool has no `^`). A bad expression, a division by zero or a result too large
    raises CalculatorError (a ValueError) with a readable message.
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, not {type(expression).__name__}")
    value = evaluate(expression.replace("^", "**"))
    try:
        return float(value)
    except OverflowError:
        raise CalculatorError("result is too large for a float") from None


def format_number(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    return repr(value)


@ToolRegistry.register("calculator")
class CalculatorTool(BaseTool):
    """Evaluate a mathematical expression safely."""

    tool_id = "calculator"
    inline = True  # bounds its own work: no watchdog thread per call

    _SPEC = ToolSpec(
        name="calculator",
        description="Evaluate a mathematical expression safely.",
        parameters={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "Math expression to evaluate, e.g. \"2+3*4\" or \"sqrt(16)\". "
                                   "Operators: + - * / // % ** << >>; functions: "
                                   + ", ".join(FUNCTIONS) + "; constants: pi, e",
                    "maxLength": MAX_EXPRESSION_CHARS,
                }
            },
            "required": ["expression"],
        },
        category="math",
        cost_estimate=0.0,
        latency_estimate=0.0001,
        timeout_seconds=5.0,
        output_labels=frozenset(),  # a number from the expression: neutral
        egress="none",
    )

    @property
    def spec(self) -> ToolSpec:
        return self._SPEC

    def execute(self, **params: Any) -> ToolResult:
        expression = params.get("expression")
        if not isinstance(expression, str):
            return ToolResult.failure("calculator", "expression must be a string",
                                      ErrorType.INVALID_ARGS)
        try:
            value = evaluate(expression)
        except CalculatorError as exc:
            return ToolResult.failure("calculator", f"Error: {exc}", ErrorType.EXECUTION,
                                      expression=expression[:200])
        return ToolResult(tool_name="calculator", content=format_number(value),
                          metadata={"expression": expression})
