"""llm: delegate a sub-query (summaries, sub-questions, structured output) to an engine.

The SDK builds it with the active engine and model; it reports the tokens it used.
"""

from __future__ import annotations

from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.errors import JarvisError
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

MAX_PROMPT_CHARS = 200_000


@ToolRegistry.register("llm")
class LLMTool(BaseTool):
    """Send a prompt (and an optional system message) to an inference engine.

    Args:
        engine: the InferenceEngine to ask.
        model: the model name ("" lets the engine choose).
        max_tokens: an upper bound on the reply length (None: the engine's default).
    """

    tool_id = "llm"
    needs = ("engine", "model")

    def __init__(self, engine: Any = None, model: str = "", max_tokens: int | None = None) -> None:
        self.engine = engine
        self.model = model
        self.max_tokens = max_tokens

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="llm",
            description="Delegate a sub-query to a language model and return its reply "
                        "(summaries, sub-questions, rewriting, structured output).",
            parameters={
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "The prompt to send to the model",
                               "maxLength": MAX_PROMPT_CHARS},
                    "system": {"type": "string",
                               "description": "Optional system message for context",
                               "maxLength": MAX_PROMPT_CHARS},
                },
                "required": ["prompt"],
            },
            category="inference",
            latency_estimate=2.0,
            timeout_seconds=180.0,
            # The engine is the run's own model, not a third party: nothing leaves to anyone
            # new, and the reply is the model's own words.
            output_labels=frozenset(),
            egress="none",
        )

    def execute(self, **params: Any) -> ToolResult:
        prompt = params.get("prompt")
        system = params.get("system")
        if not isinstance(prompt, str) or not prompt.strip():
            return ToolResult.failure("llm", "the prompt is empty", ErrorType.INVALID_ARGS)
        if len(prompt) > MAX_PROMPT_CHARS or (isinstance(system, str) and len(system) > MAX_PROMPT_CHARS):
            return ToolResult.failure("llm", f"prompt and system are limited to {MAX_PROMPT_CHARS} "
                                      f"characters each", ErrorType.INVALID_ARGS)
        if self.engine is None:
            return ToolResult.failure("llm", "the llm tool has no engine; build it with "
                                      "LLMTool(engine=..., model=...) or through Jarvis",
                                      ErrorType.EXECUTION)
        messages = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        from jarvis.engine.base import generate_reply

        try:
            result = generate_reply(self.engine, messages, model=self.model or None,
                                    max_tokens=self.max_tokens)
        except JarvisError as exc:
            return ToolResult.failure("llm", f"the engine failed: {exc}", ErrorType.TRANSPORT)
        except Exception as exc:  # noqa: BLE001  (a tool never raises: any engine bug is a result)
            return ToolResult.failure("llm", f"the engine failed: {type(exc).__name__}: {exc}",
                                      ErrorType.EXECUTION)
        return ToolResult(tool_name="llm", content=result.content, usage=dict(result.usage),
                          metadata={"model": result.model or self.model})
