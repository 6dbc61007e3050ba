"""Isolation for model-written code: namespaces, Landlock, seccomp and limits.

`SandboxedPython` is one interpreter in its own sandbox (the `repl` and `code_interpreter`
tools hold them through resource pools). The mechanism comes from `[sandbox] isolation`:
bubblewrap, jarvis's own unshare launcher, or none; `probe.resolve` picks it and refuses with
a one-line reason when the host cannot isolate. See docs/serve.md for what the tests prove.
"""

from __future__ import annotations

from jarvis.sandbox.policy import ISOLATIONS, SandboxLimits, SandboxPolicy
from jarvis.sandbox.probe import SandboxUnavailable, describe, resolve, status
from jarvis.sandbox.process import RunOutcome, SandboxedPython, SandboxError

__all__ = [
    "ISOLATIONS",
    "RunOutcome",
    "SandboxError",
    "SandboxLimits",
    "SandboxPolicy",
    "SandboxUnavailable",
    "SandboxedPython",
    "describe",
    "resolve",
    "status",
]
