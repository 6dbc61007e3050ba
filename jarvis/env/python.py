"""PyExecutor: run Python code for an environment, in jarvis's sandboxed `repl`.

    executor = PyExecutor()
    result = executor.run("print(6 * 7)")   # CodeExecResult(stdout="42\n", stderr="", exit_code=0)
    executor.close()

The code runs through a ToolExecutor and the `repl` tool, so it never runs in this process:
the sandbox, its limits and its timeouts apply (see docs/serve.md). One interpreter lives
per PyExecutor until `reset()` or `close()`: variables survive between `run` calls. Making a
PyExecutor is the consent the repl's confirmation asks for.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class CodeExecResult:
    """What running code gave: its output, its error text, and 0 (ran) or 1 (failed)."""

    stdout: str
    stderr: str
    exit_code: int


class PyExecutor:
    """Python code in a sandboxed interpreter (see the module docstring).

    Args:
        settings: the repl tool's settings (timeout, cpu_seconds, memory_mb, ...).
    """

    def __init__(self, **settings: Any) -> None:
        from jarvis.tools.catalog import build_tools
        from jarvis.tools.executor import ToolExecutor

        (repl,) = build_tools(["repl"], settings={"repl": settings} if settings else None)
        self._executor = ToolExecutor([repl], approved_tools=["repl"],
                                      approver=lambda spec, arguments: True,
                                      default_timeout=float(settings.get("timeout", 30)) + 5)
        self._new_run()

    def _new_run(self) -> None:
        self._executor.run_id = f"pyexec-{uuid.uuid4().hex}"

    def run(self, code: str) -> CodeExecResult:
        """Run `code`; a failure (an exception, a limit) is exit_code 1 with its text."""
        result = self._executor.execute({"name": "repl", "arguments": {"code": code}})
        if result.success:
            out = "" if result.content == "(no output)" else result.content
            return CodeExecResult(stdout=out, stderr="", exit_code=0)
        return CodeExecResult(stdout="", stderr=result.content, exit_code=1)

    def reset(self) -> None:
        """A fresh interpreter for the next `run` (the old one ends)."""
        self.close()
        self._new_run()

    def close(self) -> None:
        from jarvis.resources import release_run

        release_run(self._executor.run_id)

    def __enter__(self) -> PyExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
