"""The records of OpenEnv-style environments (RFC 004, and the MCP form upstream moved to).

Observation and State are dataclasses with keyword-only fields, so an environment's own
observation adds fields of its own (`@dataclass(kw_only=True) class ChessObservation
(Observation): fen: str = ""`). ToolDefinition is an action as a model sees it, convertible
to and from a jarvis ToolSpec.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from jarvis.core.types import Block, TextBlock, ToolCallAction
from jarvis.errors import JarvisError

# Names an action may not take: they are the environment's own verbs (as upstream reserves).
RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})


class EnvError(JarvisError):
    """An environment could not be reached or answered outside the protocol."""


@dataclass(kw_only=True)
class Observation:
    """What a step (or reset) shows: whether the episode is over, its reward, metadata, and
    ORS content blocks (text and images)."""

    done: bool = False
    reward: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The text of the blocks, or (without blocks) the observation's own fields as JSON."""
        if self.blocks:
            return "\n".join(b.text for b in self.blocks if isinstance(b, TextBlock))
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("blocks", "metadata")}
        return json.dumps(fields, ensure_ascii=False, default=str)


@dataclass(kw_only=True)
class State:
    """The environment's own state: the episode's id and how many steps it has taken."""

    episode_id: str | None = None
    step_count: int = 0


@dataclass(kw_only=True)
class ToolError:
    """Why a tool call failed (the MCP form's `error`): an error type and the message."""

    error_type: str
    message: str


@dataclass(kw_only=True)
class ListToolsAction:
    """MCP form: ask for the environment's tools (no reset needed)."""

    metadata: dict[str, Any] = field(default_factory=dict)
    type: str = "list_tools"


@dataclass(kw_only=True)
class CallToolAction:
    """MCP form: call one tool with arguments (the same as a ToolCallAction)."""

    tool_name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    type: str = "call_tool"

    def to_tool_call(self) -> ToolCallAction:
        return ToolCallAction(tool_name=self.tool_name, parameters=dict(self.arguments),
                              metadata=dict(self.metadata))


# What `step()` takes (OpenEnv's `Action`, for annotations).
Action = ToolCallAction | CallToolAction | ListToolsAction


def tool_call_of(action: Any, taker: str) -> tuple[ToolCallAction, bool]:
    """The call a step's `action` asks for, and whether it came in MCP form (CallToolAction).

    `taker` names the environment in the error a wrong kind of action gets."""
    from jarvis.errors import UserError

    mcp = isinstance(action, CallToolAction)
    call = action.to_tool_call() if mcp else action
    if not isinstance(call, ToolCallAction):
        raise UserError(f"{taker}.step() takes a ToolCallAction, CallToolAction or "
                        f"ListToolsAction, not {type(action).__name__}")
    return call, mcp


@dataclass(kw_only=True)
class ListToolsObservation(Observation):
    """The answer to a ListToolsAction: MCP tool entries (name, description, input_schema)."""

    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass(kw_only=True)
class CallToolObservation(Observation):
    """The answer to a CallToolAction: the tool's result, or the error why it has none."""

    tool_name: str = ""
    result: Any = None
    error: ToolError | None = None


@dataclass
class ToolParameter:
    """One parameter of an action (RFC 004). `schema` keeps a richer JSON schema for it
    (enum, items, bounds) when it came from one."""

    name: str
    type: str  # a JSON Schema type: string, number, integer, boolean, object, array
    description: str
    required: bool = True
    default: Any = None
    schema: dict[str, Any] | None = field(default=None, repr=False)

    def to_property(self) -> dict[str, Any]:
        if self.schema is not None:
            prop = copy.deepcopy(self.schema)
            if self.description and "description" not in prop:
                prop["description"] = self.description
            return prop
        prop = {"type": self.type, "description": self.description}
        if not self.required and self.default is not None:
            prop["default"] = self.default
        return prop


@dataclass
class ToolDefinition:
    """An action an environment offers, as a model sees it (RFC 004).

    `input_schema`, when given (a definition made from a ToolSpec or an @action signature),
    is the exact schema; otherwise it is built from `parameters`.
    """

    name: str
    description: str
    parameters: list[ToolParameter] = field(default_factory=list)
    input_schema: dict[str, Any] | None = field(default=None, repr=False)

    def schema(self) -> dict[str, Any]:
        """The parameters as one JSON object schema."""
        if self.input_schema is not None:
            return copy.deepcopy(self.input_schema)
        return {"type": "object",
                "properties": {p.name: p.to_property() for p in self.parameters},
                "required": [p.name for p in self.parameters if p.required]}

    def to_json_schema(self) -> dict[str, Any]:
        """The RFC's (and Anthropic's) tool form: name, description, input_schema."""
        return {"name": self.name, "description": self.description, "input_schema": self.schema()}

    def to_spec(self, **options: Any) -> Any:
        """A jarvis ToolSpec (options: category, timeout_seconds, ...)."""
        from jarvis.tools.spec import ToolSpec

        return ToolSpec(name=self.name, description=self.description, parameters=self.schema(),
                        **options)

    @classmethod
    def from_spec(cls, spec: Any) -> ToolDefinition:
        """From a jarvis ToolSpec (the schema is kept exactly)."""
        return cls.from_json_schema({"name": spec.name, "description": spec.description,
                                     "input_schema": spec.input_schema()})

    @classmethod
    def from_json_schema(cls, data: dict[str, Any]) -> ToolDefinition:
        """From `{name, description, input_schema}` (or MCP's `inputSchema`)."""
        schema = data.get("input_schema", data.get("inputSchema")) or {"type": "object",
                                                                       "properties": {}}
        schema = copy.deepcopy(schema)
        required = set(schema.get("required") or ())
        params = []
        for name, prop in (schema.get("properties") or {}).items():
            prop = prop if isinstance(prop, dict) else {}
            kind = prop.get("type")
            params.append(ToolParameter(
                name=name, type=kind if isinstance(kind, str) else "object",
                description=str(prop.get("description", "")), required=name in required,
                default=prop.get("default"), schema=prop))
        return cls(name=str(data["name"]), description=str(data.get("description", "")),
                   parameters=params, input_schema=schema)


__all__ = ["Action", "CallToolAction", "CallToolObservation", "EnvError", "ListToolsAction",
           "ListToolsObservation", "Observation", "RESERVED_TOOL_NAMES", "State", "ToolCallAction",
           "ToolDefinition", "ToolError", "ToolParameter"]
