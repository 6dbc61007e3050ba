"""`before_tool_call`: a caller's policy asked before each tool call of a run.

`OrchestratorAgent(..., before_tool_call=hook)`: `hook(tool_name, arguments) -> bool` is
called once per call, in the order the model made them, before anything runs. It fails
closed: a hook that returns a false value, raises, or cannot be asked (arguments that are not
a JSON object) denies the call; the model reads a failed result (error_type denied) instead.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from jarvis.core.types import ErrorType, ToolCall, ToolResult

ToolCallHook = Callable[[str, dict[str, Any]], Any]
MAX_HOOK_ARGUMENT_CHARS = 1_000_000  # the executor's own default limit


def _denied(call: ToolCall, reason: str) -> ToolResult:
    name = call.name if isinstance(call.name, str) else str(call.name)
    result = ToolResult.failure(
        name[:100], f"the call to {name[:100]} was not run: {reason}. Adjust your plan and try "
        f"a different approach", ErrorType.DENIED, denied_by="before_tool_call")
    result.call_id = call.id
    return result


def check_call(hook: ToolCallHook, call: ToolCall) -> ToolResult | None:
    """None when `hook` allows `call`; else the denied result the model reads."""
    arguments: Any = call.arguments
    if isinstance(arguments, str):
        if len(arguments) > MAX_HOOK_ARGUMENT_CHARS:
            return _denied(call, "its arguments are too long to be checked")
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return _denied(call, "its arguments are not valid JSON, so the policy could not "
                                 "check them")
    else:
        try:
            arguments = copy.deepcopy(arguments) if arguments is not None else {}
        except RecursionError:
            return _denied(call, "its arguments are nested too deeply to be checked")
    if not isinstance(arguments, dict):
        return _denied(call, "its arguments are not a JSON object")
    try:
        allowed = hook(str(call.name), arguments)
    except Exception as exc:  # a policy that breaks must not wave calls through
        import logging  # only now: it costs ~10 ms of import time

        logging.getLogger("jarvis.agents").warning("jarvis: the before_tool_call hook failed for %s: %s: %s",
                    str(call.name)[:100], type(exc).__name__, exc)
        return _denied(call, f"the before_tool_call policy failed ({type(exc).__name__})")
    if not allowed:
        return _denied(call, "the before_tool_call policy denied it")
    return None
