"""Derive a tool's JSON schema and validator from a typed Python signature.

Used by `@tool` functions and by BaseTool subclasses with a typed `call(...)` method. The
schema and the validation both come from one pydantic model built from the type hints, so
they cannot disagree. Per-argument descriptions come from the docstring's Google `Args:`.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

from jarvis.errors import ToolArgumentError, ToolDefinitionError
from jarvis.tools.context import ToolContext

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {arg: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            current, arg_indent = None, None
            continue
        if section is None:
            description.append(line)
        elif section in ("args", "arguments", "parameters"):
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            match = _ARG_LINE.match(line)
            if match and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = match.group(1).lstrip("*")
                args[current] = match.group(3).strip()
            elif current is not None:
                args[current] = (args[current] + " " + line.strip()).strip()
    text = "\n".join(description).strip()
    return text, args


def _strip_titles(node: Any) -> Any:
    """Drop pydantic's auto-generated `title`s (noise for a model); keep property names."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
                out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
            else:
                out[key] = _strip_titles(value)
        return out
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    return node


@dataclass(slots=True)
class DerivedSignature:
    """The schema, validator and calling convention derived from one callable."""

    name: str
    description: str
    parameters: dict[str, Any]
    model: Any  # a pydantic model class
    field_names: tuple[str, ...]
    context_param: str | None
    is_async: bool

    def validate(self, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        from pydantic import ValidationError

        try:
            instance = self.model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentError(_format_validation_error(tool_name, exc),
                                    field=_first_field(exc)) from None
        return {name: getattr(instance, name) for name in self.field_names}


def _first_field(exc: Any) -> str | None:
    errors = exc.errors()
    if errors and errors[0].get("loc"):
        return ".".join(str(p) for p in errors[0]["loc"])
    return None


def _format_validation_error(tool_name: str, exc: Any) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unexpected argument"
        parts.append(f"{loc!r}: {msg}")
    return f"invalid arguments for {tool_name}: " + "; ".join(parts)


def _is_context(hint: Any) -> bool:
    """`ToolContext`, or `ToolContext | None` (the executor always passes one)."""
    if hint is ToolContext:
        return True
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and ToolContext in typing.get_args(hint)


def derive_signature(func: Any, *, name: str, description: str | None = None,
                     skip_first: bool = False) -> DerivedSignature:
    """Build the schema and validator for `func`; raise ToolDefinitionError if untyped."""
    from pydantic import ConfigDict, Field, create_model

    try:
        signature = inspect.signature(func)
        hints = typing.get_type_hints(func, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot read the signature of {func!r}: {exc}") from exc
    doc_description, arg_docs = parse_docstring(inspect.getdoc(func))
    params = list(signature.parameters.values())
    if skip_first:
        params = params[1:]
    fields: dict[str, Any] = {}
    context_param = None
    for param in params:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {name!r}: *{param.name} / **{param.name} cannot be described to a model; "
                f"declare each argument with a type hint"
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"tool {name!r}: argument {param.name!r} is positional-only; "
                                      f"tools are called with keyword arguments")
        if param.name not in hints:
            raise ToolDefinitionError(
                f"tool {name!r}: argument {param.name!r} has no type hint; add one "
                f"(e.g. `{param.name}: str`) so its JSON schema and validation can be derived"
            )
        hint = hints[param.name]
        if _is_context(hint):
            context_param = param.name
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hint, Field(default, description=arg_docs.get(param.name) or None))
    model_name = "".join(part.capitalize() for part in re.split(r"\W+", name) if part) + "Arguments"
    try:
        model = create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
        schema = _strip_titles(model.model_json_schema())
    except Exception as exc:  # pydantic raises several types for unusable hints
        raise ToolDefinitionError(f"tool {name!r}: cannot build a JSON schema: {exc}") from exc
    schema.setdefault("properties", {})
    final_description = (description if description is not None else doc_description).strip()
    if not final_description:
        raise ToolDefinitionError(
            f"tool {name!r} has no description; give it a docstring or description=..."
        )
    return DerivedSignature(
        name=name,
        description=final_description,
        parameters=schema,
        model=model,
        field_names=tuple(fields),
        context_param=context_param,
        is_async=inspect.iscoroutinefunction(func),
    )
