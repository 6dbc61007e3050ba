"""Structured answers: the answer is JSON that matches a schema, or the run says it is not.

`ask_full(..., output_schema=Model or {JSON schema})` and `jarvis ask --schema FILE`:

- **native**: engines that take OpenAI's `response_format` (`supports_response_format`, as
  the OpenAI-compatible engine does) get `{"type": "json_schema", "json_schema": {...}}` on
  every request, and the reply's text is the JSON;
- **tool**: other engines get a `final_answer` tool whose parameters are the schema (an
  object schema as it is; any other schema as `{"answer": ...}`), and the run ends when the
  model calls it with valid arguments. The call goes through the ToolExecutor, so invalid
  arguments come back to the model as the executor's validation error.

Either way the answer is checked against the schema (and the pydantic model, when one was
given). An answer that does not match is shown to the model with the validation error, at
most `retries` times; after that the run ends `incomplete` (status "incomplete", no parsed
value, the last error), never with an unchecked answer.

A schema from outside (a file, a caller) is bounded before use: its size, its depth, local
`$ref`s only, and a `$ref` loop (which would recurse without end) is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jarvis.core.types import AgentResult, ErrorType, Message, ToolResult
from jarvis.errors import UserError
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

MAX_SCHEMA_BYTES = 64 * 1024  # it goes with every request
MAX_SCHEMA_DEPTH = 32
MAX_REFS = 256
MAX_ANSWER_CHARS = 1_000_000
MAX_ERROR_CHARS = 1_000
DEFAULT_RETRIES = 2
FINAL_TOOL = "final_answer"
MODES = ("auto", "native", "tool")
_NAME_RE = re.compile(r"[^a-zA-Z0-9_-]")
_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n(.*?)\n?```\s*$", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S)


class SchemaProblem(UserError):
    """An output schema that cannot be used (too big, too deep, a $ref loop, not a schema)."""


# --- the schema ----------------------------------------------------------------------------
def _depth_and_refs(node: Any, depth: int, refs: list[str]) -> None:
    if depth > MAX_SCHEMA_DEPTH:
        raise SchemaProblem(f"the output schema is nested more than {MAX_SCHEMA_DEPTH} levels "
                            f"deep; flatten it")
    if isinstance(node, dict):
        ref = node.get("$ref")
        if ref is not None:
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise SchemaProblem(f"the output schema refers to {str(ref)[:100]!r}; only local "
                                    f"references (#/$defs/...) are allowed")
            refs.append(ref)
            if len(refs) > MAX_REFS:
                raise SchemaProblem(f"the output schema has more than {MAX_REFS} $refs")
        for value in node.values():
            _depth_and_refs(value, depth + 1, refs)
    elif isinstance(node, list):
        for value in node:
            _depth_and_refs(value, depth + 1, refs)


def check_schema(schema: Any) -> dict[str, Any]:
    """`schema` as a usable JSON schema, or SchemaProblem saying why not (bounded first)."""
    if not isinstance(schema, dict):
        raise SchemaProblem(f"the output schema must be a JSON object (a JSON schema), not "
                            f"{type(schema).__name__}")
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SchemaProblem(f"the output schema is not plain JSON: {exc}"[:300]) from None
    if size > MAX_SCHEMA_BYTES:
        raise SchemaProblem(f"the output schema is {size} bytes of JSON; the limit is "
                            f"{MAX_SCHEMA_BYTES} (it goes with every request)")
    _depth_and_refs(schema, 0, [])
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise SchemaProblem(f"the output schema is not a valid JSON schema: {exc.message}"[:500]
                            ) from None
    validator = Draft202012Validator(schema)
    # A $ref loop that consumes nothing of the instance recurses without end whatever the
    # answer is; trying small values of every type finds it now, not on the model's answer.
    for probe in (None, 0, "", [], {}, True):
        try:
            validator.is_valid(probe)
        except RecursionError:
            raise SchemaProblem("the output schema refers to itself without end (a $ref "
                                "loop); every $ref must lead to a schema that checks something"
                                ) from None
        except Exception as exc:  # an unresolvable $ref, ...
            raise SchemaProblem(f"the output schema cannot be used: {exc}"[:500]) from None
    return schema


@dataclass(slots=True)
class OutputSchema:
    """What a structured answer must match: a JSON schema, and the pydantic model if given."""

    schema: dict[str, Any]
    name: str = "answer"
    model: Any = None
    _validator: Any = field(default=None, repr=False)

    @classmethod
    def of(cls, output: Any) -> OutputSchema:
        """From a pydantic model class or a JSON schema dict."""
        if isinstance(output, OutputSchema):
            return output
        if isinstance(output, type) and hasattr(output, "model_json_schema"):
            schema = output.model_json_schema()
            return cls(schema=check_schema(schema), name=_name(output.__name__), model=output)
        if isinstance(output, dict):
            return cls(schema=check_schema(output), name=_name(str(output.get("title") or "")))
        raise SchemaProblem(f"output_schema must be a pydantic model class or a JSON schema "
                            f"dict, not {type(output).__name__}")

    def response_format(self) -> dict[str, Any]:
        """OpenAI's `response_format` for this schema."""
        return {"type": "json_schema",
                "json_schema": {"name": self.name, "schema": self.schema, "strict": False}}

    def validate(self, value: Any) -> Any:
        """The checked value (a model instance for a model); ValueError with the reason."""
        if self._validator is None:
            from jsonschema import Draft202012Validator

            self._validator = Draft202012Validator(self.schema)
        try:
            errors = sorted(self._validator.iter_errors(value), key=lambda e: list(e.path))
        except RecursionError:
            raise ValueError("the answer is nested too deeply to be checked") from None
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.absolute_path) or "(the whole answer)"
            more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
            raise ValueError(f"at {where}: {first.message}"[:MAX_ERROR_CHARS] + more)
        if self.model is None:
            return value
        from pydantic import ValidationError

        try:
            return self.model.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(answer)'}: {e['msg']}"
                                 for e in exc.errors()[:5])
            raise ValueError(problems[:MAX_ERROR_CHARS]) from None

    def tool_parameters(self) -> tuple[dict[str, Any], bool]:
        """The final_answer tool's parameters, and whether the answer is wrapped in `answer`."""
        if self.schema.get("type") == "object":
            return self.schema, False
        inner = {k: v for k, v in self.schema.items() if k not in ("$defs", "definitions")}
        wrapper: dict[str, Any] = {"type": "object", "properties": {"answer": inner},
                                   "required": ["answer"], "additionalProperties": False}
        for key in ("$defs", "definitions"):
            if key in self.schema:
                wrapper[key] = self.schema[key]
        return wrapper, True


def _name(text: str) -> str:
    return _NAME_RE.sub("_", text)[:64] or "answer"


def parse_answer(text: str) -> Any:
    """The JSON value in a model's reply (think blocks and one code fence around it are
    ignored); ValueError saying what is wrong."""
    if len(text) > MAX_ANSWER_CHARS:
        raise ValueError(f"the answer is longer than {MAX_ANSWER_CHARS} characters")
    text = _THINK.sub("", text).strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text:
        raise ValueError("the answer is empty; reply with the JSON value itself")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("the answer is nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"the answer is not valid JSON: {exc}") from None


# --- the final_answer tool ---------------------------------------------------------------------
class FinalAnswerTool(BaseTool):
    """The tool-call form of a structured answer: the model calls it with the answer."""

    tool_id = FINAL_TOOL
    inline = True
    strict_arguments = False  # the schema decides which names are allowed

    def __init__(self, output: OutputSchema) -> None:
        self.output = output
        parameters, self.wrapped = output.tool_parameters()
        self._spec = ToolSpec(
            name=FINAL_TOOL, parameters=parameters, category="answer",
            description="Give your final answer. Call this exactly once, when you have the "
                        "answer, with arguments that match its schema; do not answer in text.")
        self.value: Any = None
        self.given = False

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def execute(self, **params: Any) -> ToolResult:
        raw = params.get("answer") if self.wrapped else params
        try:
            value = self.output.validate(raw)
        except ValueError as exc:
            return ToolResult.failure(FINAL_TOOL, f"the answer does not match the schema: {exc}",
                                      ErrorType.INVALID_ARGS)
        self.value, self.given = value, True
        return ToolResult(tool_name=FINAL_TOOL, content=json.dumps(raw, ensure_ascii=False),
                          finished=True)


def final_answer(agent: Any) -> str | None:
    """The answer text once the agent's final_answer tool was called with a valid answer
    (the loops of the orchestrator and react agents end there); None otherwise."""
    tool = getattr(agent, "final_tool", None)
    if tool is None or not tool.given:
        return None
    raw = tool.value
    if tool.output.model is not None:
        raw = tool.value.model_dump(mode="json")
    return json.dumps(raw, ensure_ascii=False)


# --- running -------------------------------------------------------------------------------
def choose_mode(engine: Any, mode: str = "auto") -> str:
    """"native" when the engine takes response_format (or it was asked for), else "tool"."""
    if mode not in MODES:
        raise UserError(f"unknown structured output mode {mode!r}; use one of {', '.join(MODES)}")
    if mode != "auto":
        return mode
    return "native" if getattr(engine, "supports_response_format", False) else "tool"


def prepare(agent: Any, output: OutputSchema, mode: str) -> None:
    """Set up `agent` to answer in the schema (see the module docstring)."""
    if mode == "native":
        agent.response_format = output.response_format()
        note = (f"Answer with only a JSON value that matches this JSON schema, nothing "
                f"else:\n{json.dumps(output.schema, ensure_ascii=False)}")
    else:
        if getattr(agent, "uses_tools", True) is False:
            raise UserError("this agent cannot call tools, so it cannot give a structured answer "
                            "through the final_answer tool; use the orchestrator or react agent")
        tool = FinalAnswerTool(output)
        agent.executor.add(tool)
        agent.final_tool = tool
        note = (f"When you have the answer, call the {FINAL_TOOL} tool with it (its parameters "
                f"are the answer's schema); do not write the answer as text.")
    agent.system = f"{agent.system}\n\n{note}" if agent.system else note


@dataclass(slots=True)
class StructuredOutcome:
    """How a structured run ended."""

    result: AgentResult
    status: str  # "ok" or "incomplete"
    parsed: Any = None
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    mode: str = "native"

    def metadata(self) -> dict[str, Any]:
        return {"mode": self.mode, "attempts": self.attempts, "status": self.status,
                "errors": list(self.errors)}


def run(agent: Any, query: str, output: OutputSchema, mode: str, *,
        history: Sequence[Message] | None = None, context: Any = None,
        retries: int = DEFAULT_RETRIES) -> StructuredOutcome:
    """Run `agent` until its answer matches `output`, showing it each validation error, at
    most `retries` times more."""
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
        raise UserError(f"schema retries must be a whole number from 0 to 10, not {retries!r}")
    prepare(agent, output, mode)
    outcome = StructuredOutcome(result=AgentResult(content=""), status="incomplete", mode=mode)
    results: list[AgentResult] = []
    prompt, earlier = query, history
    while True:
        result = agent.run(prompt, context, history=earlier) if context is not None else \
            agent.run(prompt, history=earlier)
        context = None  # it is in the transcript now
        results.append(result)
        outcome.attempts += 1
        stopped = (result.metadata.get("max_turns_exceeded") or result.metadata.get("loop_detected")
                   or result.metadata.get("budget_exceeded"))
        try:
            if stopped:
                raise ValueError("the run stopped before a final answer (max_turns, the loop "
                                 "guard or the budget)")
            tool = getattr(agent, "final_tool", None)
            if tool is not None and tool.given:
                outcome.parsed = tool.value
            else:
                outcome.parsed = output.validate(parse_answer(result.content))
            outcome.status = "ok"
        except ValueError as exc:
            outcome.errors.append(str(exc))
        if outcome.status == "ok" or stopped or outcome.attempts > retries:
            break
        earlier = [m for m in result.messages if m.role != "system"]
        if mode == "tool":
            prompt = (f"Your answer could not be used: {outcome.errors[-1]}. Call the "
                      f"{FINAL_TOOL} tool with an answer that matches its schema.")
        else:
            prompt = (f"Your answer could not be used: {outcome.errors[-1]}. Reply with only "
                      f"a JSON value that matches the schema.")
    outcome.result = _combined(results)
    if outcome.status != "ok":
        outcome.parsed = None
    return outcome


def _combined(results: list[AgentResult]) -> AgentResult:
    last = results[-1]
    if len(results) == 1:
        return last
    usage: dict[str, int] = {}
    for r in results:
        for key, value in r.usage.items():
            if isinstance(value, int):
                usage[key] = usage.get(key, 0) + value
    metadata = dict(last.metadata)
    metadata["tool_calls"] = [c for r in results for c in r.metadata.get("tool_calls", [])]
    metadata["inference_seconds"] = [s for r in results
                                     for s in r.metadata.get("inference_seconds", [])]
    return AgentResult(content=last.content,
                       tool_results=[t for r in results for t in r.tool_results],
                       turns=sum(r.turns for r in results), usage=usage,
                       messages=last.messages, metadata=metadata)
