"""ToolSpec: what a tool is, as the model and the executor see it."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(slots=True)
class ToolSpec:
    """A tool's interface (JSON-schema parameters) and characteristics.

    `timeout_seconds` None means the executor's default; `max_output_chars` None likewise.
    `cost_estimate` is USD per call; `latency_estimate` is seconds per call (0.0 = unknown,
    in which case measured latency is used where available).

    Provenance (docs/trust.md): `output_labels` says what the results are (a set of
    "private" / "untrusted"; empty: neutral) and `egress` what a call can send out ("none",
    "network", "channel", "mcp", "persist"). None means the tool said nothing: its results
    count as untrusted and its calls as able to send any argument anywhere.
    """

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    category: str = ""
    cost_estimate: float = 0.0
    latency_estimate: float = 0.0
    requires_confirmation: bool = False
    timeout_seconds: float | None = None
    max_output_chars: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    output_labels: frozenset[str] | None = None
    egress: str | None = None

    def __post_init__(self) -> None:
        if self.output_labels is not None or self.egress is not None:
            from jarvis.errors import ToolDefinitionError
            from jarvis.trust.labels import check_egress, check_labels

            try:
                self.output_labels = check_labels(self.output_labels, f"tool {self.name}: output")
                self.egress = check_egress(self.egress, f"tool {self.name}: egress")
            except ValueError as exc:
                raise ToolDefinitionError(str(exc)) from None

    def input_schema(self) -> dict[str, Any]:
        """The parameters as a complete object schema (empty object when none are given)."""
        if not self.parameters:
            return copy.deepcopy(EMPTY_SCHEMA)
        schema = copy.deepcopy(self.parameters)
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return schema

    def to_openai_function(self) -> dict[str, Any]:
        """OpenAI function-calling format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema(),
            },
        }

    def to_anthropic_tool(self) -> dict[str, Any]:
        """Anthropic / OpenEnv / ORS form: name, description, input_schema."""
        return {"name": self.name, "description": self.description,
                "input_schema": self.input_schema()}

    def to_mcp_tool(self) -> dict[str, Any]:
        """MCP `tools/list` entry: name, description, inputSchema (+ annotations)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description,
                               "inputSchema": self.input_schema()}
        annotations = self.metadata.get("mcp_annotations")
        if annotations is None and self.requires_confirmation:
            annotations = {"destructiveHint": True}
        if annotations:
            out["annotations"] = dict(annotations)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (for `jarvis tools show` and `--json` listings)."""
        return {
            "name": self.name,
            "description": self.description,
            "category": self.category,
            "parameters": self.input_schema(),
            "cost_estimate": self.cost_estimate,
            "latency_estimate": self.latency_estimate,
            "requires_confirmation": self.requires_confirmation,
            "timeout_seconds": self.timeout_seconds,
            "max_output_chars": self.max_output_chars,
            "metadata": self.metadata,
            "output_labels": (None if self.output_labels is None
                              else sorted(self.output_labels)),
            "egress": self.egress,
        }
