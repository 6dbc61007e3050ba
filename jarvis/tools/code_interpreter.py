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
from jarvis.tools.repl import MAX_CODE_CHARS, ONESHOT_KIND, SandboxedPythonTool, sandbox_result


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

    def __init__(self, timeout: float | None = None, cpu_seconds: int | None = None,
                 memory_mb: int | None = None, max_output_chars: int | None = None,
                 max_code_chars: int = MAX_CODE_CHARS, max_processes: int = 4,
                 acquire_timeout: float = 30.0, session_cpu_seconds: int | None = None,
                 requires_confirmation: bool = True, config: Any = None,
                 isolation: str | None = None, prestart: int = 0) -> None:
        """`prestart`: sandboxes kept started ahead (0 or 1 in practice): a call takes one
        that is already up (a fresh process, used once and killed as always), and a
        replacement starts in the background (jarvis/sandbox/spares.py). The other settings
        are repl's (SandboxedPythonTool)."""
        from jarvis.errors import ConfigError

        super().__init__(timeout, cpu_seconds, memory_mb, max_output_chars, max_code_chars,
                         max_processes, acquire_timeout, session_cpu_seconds,
                         requires_confirmation, config, isolation)
        if isinstance(prestart, bool) or not isinstance(prestart, int) or not 0 <= prestart <= 8:
            raise ConfigError(f"[tools.{self.tool_id}] prestart must be a whole number from 0 "
                              f"to 8 (sandboxes started ahead), got {prestart!r}")
        self.prestart = prestart

    def resource_spec(self) -> Any:
        spec = super().resource_spec()
        if not self.prestart or self.policy.isolation == "none":
            return spec
        from dataclasses import replace

        from jarvis.sandbox.spares import spares_for

        build, key, count = spec.factory, (spec.key, self.policy), self.prestart

        def take() -> Any:  # the spares asked for at each start: what a sandbox hides
            return spares_for(key, build, count).take()  # (JARVIS_HOME) is part of their key

        return replace(spec, factory=take)

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
