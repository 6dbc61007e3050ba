"""build_tool_descriptions: the one source of tool text for prompt-based agents."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jarvis.tools.spec import ToolSpec


def _type_name(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        schema = defs.get(ref.split("/")[-1], {})
        if "enum" in schema and "type" not in schema:
            return "string"
    for combo in ("anyOf", "oneOf"):
        if combo in schema:
            names = [_type_name(s, defs) for s in schema[combo]]
            non_null = [n for n in names if n != "null"]
            return " or ".join(dict.fromkeys(non_null or names))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(k for k in kind if k != "null") or "null"
    if kind == "array":
        items = schema.get("items")
        return f"array of {_type_name(items, defs)}" if isinstance(items, dict) else "array"
    if kind:
        return str(kind)
    if "enum" in schema:
        return "string"
    return "any"


def _enum_values(schema: dict[str, Any], defs: dict[str, Any]) -> list[Any] | None:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        schema = defs.get(ref.split("/")[-1], {})
    if "enum" in schema:
        return list(schema["enum"])
    for combo in ("anyOf", "oneOf"):
        for sub in schema.get(combo, []):
            values = _enum_values(sub, defs)
            if values:
                return values
    return None


def _parameter_lines(spec: ToolSpec) -> list[str]:
    schema = spec.input_schema()
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    defs = schema.get("$defs") or {}
    lines = []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        details = [_type_name(prop, defs), "required" if name in required else "optional"]
        values = _enum_values(prop, defs)
        if values:
            details.append("one of: " + ", ".join(json.dumps(v) for v in values))
        if "default" in prop and prop["default"] is not None:
            details.append(f"default: {json.dumps(prop['default'])}")
        line = f"- {name} ({', '.join(details)})"
        if prop.get("description"):
            line += f": {prop['description']}"
        lines.append(line)
    return lines


def _latency(tool: Any, spec: ToolSpec) -> str:
    stats = getattr(tool, "__dict__", {}).get("_jarvis_stats")
    measured = stats.median_latency if stats is not None else None
    if measured is not None:
        runs = "1 run" if stats.samples == 1 else f"median of {stats.samples} runs"
        return f"Latency: ~{measured:.3g} s ({runs})"
    if spec.latency_estimate:
        return f"Latency: ~{spec.latency_estimate:.3g} s (estimate)"
    return "Latency: unknown"


def build_tool_descriptions(tools: Iterable[Any], include_category: bool = True,
                            include_cost: bool = False) -> str:
    """Markdown sections describing `tools` (BaseTool instances or ToolSpecs) for a prompt."""
    sections = []
    for tool in tools:
        spec: ToolSpec = tool if isinstance(tool, ToolSpec) else tool.spec
        lines = [f"### {spec.name}", spec.description]
        if include_category and spec.category:
            lines.append(f"Category: {spec.category}")
        if include_cost:
            lines.append(f"Cost: ${spec.cost_estimate:.4f} per call")
            lines.append(_latency(tool, spec))
        if spec.requires_confirmation:
            lines.append("Requires user confirmation before it runs.")
        params = _parameter_lines(spec)
        if params:
            lines.append("Parameters:")
            lines.extend(params)
        else:
            lines.append("Parameters: none")
        sections.append("\n".join(lines))
    return "\n\n".join(sections)
