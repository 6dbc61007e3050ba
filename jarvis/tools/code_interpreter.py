"""code_interpreter: run Python code once in a fresh sandboxed process (no state kept).

The stateless form of `repl`: each call gets a new sandbox from a bounded pool, and the whole
sandbox (every process and thread in it) is killed when the call returns. Same limits and
isolation as `repl`.
"""

from __future__ import annotations

from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ToolResult
from jarvis.tools.context import ToolContext
from jarvis.tools.repl import ONESHOT_KIND, SandboxedPythonTool, sandbox_result


@ToolRegistry.register("code_interpreter")
class CodeInterpreterTool(SandboxedPythonTool):
    """Run Python code once in a fresh sandboxed process."""

    tool_id = "code_interpreter"
    kind = ONESHOT_KIND
    freeze_between_calls = False  # one call per sandbox: killed right after it
    description = (
        "Run a self-contained Python program in a fresh sandboxed process and return what it "
        "prints (and the value of a final expression). Nothing is kept between calls. Limits: "
        "wall-clock time, CPU time, memory and output size; no subprocesses, no network, "
        "files only in the work folder (/tmp).")

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> Any:
        from jarvis.resources import ResourceBusyError
        from jarvis.sandbox.process import SandboxError

        code = self._check_code(arguments)
        if isinstance(code, ToolResult):
            return code
        refusal = self._refusal()
        if refusal is not None:
            return refusal
        manager = (context or ToolContext()).manager
        try:
            with manager.lease(self.resource_spec(), timeout=self.acquire_timeout) as proc:
                return sandbox_result(self.tool_id, proc.run(code))
        except (ResourceBusyError, SandboxError) as exc:
            return self._unavailable(exc)
