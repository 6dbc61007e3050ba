"""The jarvis exception tree.

JarvisError                 root of everything jarvis raises on purpose
├── UserError               misuse of the API or CLI, caught at definition or start-up time
│   ├── ToolDefinitionError a tool is defined wrongly (missing type hint, bad schema, ...)
│   ├── DuplicateNameError  a registry key is taken already
│   ├── UnknownNameError    a tool / agent / engine name that is not registered
│   └── ConfigError         config.toml or an environment override is invalid
├── DependencyError         an optional dependency or service is missing
└── EngineError             an inference engine failed (unreachable, rejected tools, ...)

Tool failures at run time are *not* exceptions: the ToolExecutor turns them into a failed
ToolResult that the model can read. The CLI prints a JarvisError as one line and exits non-zero;
JARVIS_DEBUG=1 shows the traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class JarvisError(Exception):
    """Root of the jarvis exception tree."""

    exit_code = 1


class UserError(JarvisError):
    """The API or CLI was used wrongly; the message says how to fix it."""

    exit_code = 2


class ToolDefinitionError(UserError):
    """A tool is defined wrongly (raised when the tool is defined, not when it runs)."""


class DuplicateNameError(UserError):
    """A name is registered twice in one registry."""


class UnknownNameError(UserError):
    """A name that is not registered; the message lists the valid names."""

    def __init__(self, kind: str, name: str, valid: Iterable[str], hint: str = "") -> None:
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        listed = ", ".join(self.valid) if self.valid else "(none registered)"
        message = f"unknown {kind} {name!r}; valid {kind} names: {listed}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


class ConfigError(UserError):
    """config.toml or an environment override is invalid."""


class DependencyError(JarvisError):
    """A needed package, binary or service is missing; the message says how to get it."""


class EngineError(JarvisError):
    """An inference engine failed: unreachable, rejected the request, or answered badly."""


class ToolArgumentError(JarvisError):
    """Arguments for a tool call failed validation (becomes a failed ToolResult)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)
