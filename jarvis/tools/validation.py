"""Argument validation for tools described by a JSON schema (the reference form).

The `jsonschema` library is the authority: every rejection and every schema feature comes from
it. Most tool schemas are flat objects of strings, numbers and booleans, though, and importing
jsonschema costs ~75 ms and running it ~15 µs per call. So simple schemas are also compiled to
a small Python predicate that can only *accept*: when it says yes, jsonschema would say yes too
(it checks a strict subset of the same keywords, more strictly); when it says no or the schema
uses anything else, the call goes to jsonschema, which decides and writes the error message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jarvis.errors import ToolArgumentError, ToolDefinitionError
from jarvis.tools.spec import ToolSpec

Predicate = Callable[[Any], bool]

# Keywords that never change whether an instance is valid (draft 2020-12 annotations; `format`
# is an annotation too unless a format checker is configured, and we configure none).
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated",
                          "readOnly", "writeOnly", "format"})
_TOP_LEVEL = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
_TYPE_CHECKS: dict[str, Predicate] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,  # bool is not an integer in JSON Schema
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
}
_STRING_KEYWORDS = frozenset({"enum", "minLength", "maxLength"})
_NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_bound(value: Any) -> bool:
    return type(value) in (int, float)


def _compile_property(schema: Any) -> Predicate | None:
    """A predicate for one property's schema, or None when it uses anything we don't mirror."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if not isinstance(kind, str) or kind not in _TYPE_CHECKS:
        return None
    constraints = set(schema) - _ANNOTATIONS - {"type"}
    is_type = _TYPE_CHECKS[kind]
    if not constraints:
        return is_type
    if kind == "string" and constraints <= _STRING_KEYWORDS:
        low, high, enum = schema.get("minLength", 0), schema.get("maxLength"), schema.get("enum")
        if not _is_count(low) or (high is not None and not _is_count(high)):
            return None
        allowed: frozenset[str] | None = None
        if enum is not None:
            if not isinstance(enum, list) or not all(type(e) is str for e in enum):
                return None
            allowed = frozenset(enum)

        def check_string(v: Any) -> bool:
            if type(v) is not str or (allowed is not None and v not in allowed):
                return False
            n = len(v)
            return n >= low and (high is None or n <= high)

        return check_string
    if kind in ("integer", "number") and constraints <= _NUMBER_KEYWORDS:
        bounds = {k: schema[k] for k in constraints}
        if not all(_is_bound(b) for b in bounds.values()):
            return None
        lo, hi = bounds.get("minimum"), bounds.get("maximum")
        xlo, xhi = bounds.get("exclusiveMinimum"), bounds.get("exclusiveMaximum")

        def check(v: Any) -> bool:
            # Written so that NaN fails every comparison and falls through to jsonschema.
            return (is_type(v) and (lo is None or v >= lo) and (hi is None or v <= hi)
                    and (xlo is None or v > xlo) and (xhi is None or v < xhi))

        return check
    return None


def compile_fast_check(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """A predicate over an arguments dict that only returns True when `schema` accepts it,
    or None when the schema uses keywords this shortcut does not mirror."""
    if not isinstance(schema, dict) or set(schema) - _TOP_LEVEL or schema.get("type") != "object":
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    if not all(isinstance(r, str) for r in required) or not isinstance(additional, bool):
        return None
    checks: dict[str, Predicate] = {}
    for name, prop in properties.items():
        predicate = _compile_property(prop)
        if predicate is None:
            return None
        checks[name] = predicate
    needed = tuple(required)

    def check(arguments: dict[str, Any]) -> bool:
        for name in needed:
            if name not in arguments:
                return False
        for key, value in arguments.items():
            predicate = checks.get(key)
            if predicate is None:
                if not additional:
                    return False
            elif not predicate(value):
                return False
        return True

    return check


class SchemaValidator:
    """Validates tool arguments against a ToolSpec's JSON schema (see the module docstring)."""

    __slots__ = ("name", "schema", "fast", "_full", "known")

    def __init__(self, spec: ToolSpec, *, strict: bool = False) -> None:
        self.name = spec.name
        self.schema = spec.input_schema()
        self.fast = compile_fast_check(self.schema)
        # strict: names outside `properties` are refused even where the schema does not say
        # additionalProperties=false (a misspelled optional argument would be ignored silently).
        properties = self.schema.get("properties")
        self.known: frozenset[str] | None = None
        if (strict and isinstance(properties, dict)
                and self.schema.get("additionalProperties", False) is False):
            self.known = frozenset(properties)
        self._full: Any = None
        if self.fast is None:
            self._full = self._build_full()  # a broken schema is reported now, not at call time

    def _build_full(self) -> Any:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(self.schema)
        except SchemaError as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r} has an invalid JSON schema: {exc.message}") from exc
        return Draft202012Validator(self.schema)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return `arguments` when valid; else raise ToolArgumentError naming the field."""
        known = self.known
        if known is not None and not known.issuperset(arguments):
            self._refuse_unknown(arguments, [k for k in arguments if k not in known])
        fast = self.fast
        if fast is not None and fast(arguments):
            return arguments
        full = self._full
        if full is None:
            full = self._full = self._build_full()
        if full.is_valid(arguments):
            return arguments
        from jsonschema.exceptions import best_match

        error = best_match(full.iter_errors(arguments))
        path = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else ""
            field = missing or path
            message = f"missing required argument {field!r}"
        elif error.validator == "additionalProperties" and not path:
            properties = self.schema.get("properties")
            if isinstance(arguments, dict) and isinstance(properties, dict):
                self._refuse_unknown(arguments, [k for k in arguments if k not in properties])
            field = None
            message = error.message
        else:
            field = path or None
            message = f"{path!r}: {error.message}" if path else error.message
        raise ToolArgumentError(f"invalid arguments for {self.name}: {message}", field=field)

    def _refuse_unknown(self, arguments: dict[str, Any], unknown: list[Any]) -> None:
        from jarvis.errors import did_you_mean

        valid = sorted(self.schema.get("properties") or {})
        parts = []
        for name in unknown[:5]:
            close = did_you_mean(name, valid)
            parts.append(f"{name!r}" + (f" ({close})" if close else ""))
        plural = "s" if len(unknown) > 1 else ""
        required = self.schema.get("required") or []
        missing = [r for r in required if isinstance(r, str) and r not in arguments]
        first = f"missing required argument {missing[0]!r}; " if missing else ""
        raise ToolArgumentError(
            f"invalid arguments for {self.name}: {first}unknown argument{plural} "
            f"{', '.join(parts)}; valid arguments: {', '.join(valid) or '(none)'}",
            field=missing[0] if missing else str(unknown[0]))
