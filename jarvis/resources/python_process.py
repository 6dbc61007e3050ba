"""Old import path of the sandboxed interpreter; it lives in `jarvis.sandbox` now."""

from __future__ import annotations

from jarvis.sandbox.policy import SandboxLimits
from jarvis.sandbox.process import RunOutcome, SandboxedPython, SandboxError, python_spec

PythonProcess = SandboxedPython

__all__ = ["PythonProcess", "RunOutcome", "SandboxError", "SandboxLimits", "SandboxedPython",
           "python_spec"]
