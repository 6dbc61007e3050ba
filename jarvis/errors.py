"""The jarvis exception tree.

JarvisError                 root of everything jarvis raises on purpose
├── UserError               misuse of the API or CLI, caught at definition or start-up time
│   ├── ToolDefinitionError a tool is defined wrongly (missing type hint, bad schema, ...)
│   ├── DuplicateNameError  a registry key is taken already (also a ValueError)
│   ├── UnknownNameError    a tool / agent / engine name that is not registered (also a KeyError)
│   │   └── UnavailableToolError  a tool whose source (an MCP server) is down, with why
│   └── ConfigError         config.toml or an environment override is invalid
├── DependencyError         an optional dependency or service is missing
├── EngineError             an inference engine failed (unreachable, rejected tools, ...)
├── RunCancelled            a run was stopped by its caller (a cancel event, a cancelled task)
│   └── RunFenced           a scheduled run lost its lease: another attempt may run now
└── RunIncomplete           a run ended without an answer (max_turns, loop guard): Jarvis.ask

Tool failures at run time are *not* exceptions: the ToolExecutor turns them into a failed
ToolResult that the model can read. The CLI prints a JarvisError as one line and exits non-zero;
JARVIS_DEBUG=1 shows the traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class JarvisError(Exception):
    """Root of the jarvis exception tree.

    `details` holds what does not fit the one-line message (what was tried, hints); the CLI
    shows it with --verbose.
    """

    exit_code = 1
    details: str = ""


class UserError(JarvisError):
    """The API or CLI was used wrongly; the message says how to fix it."""

    exit_code = 2


class ToolDefinitionError(UserError):
    """A tool is defined wrongly (raised when the tool is defined, not when it runs)."""


class DuplicateNameError(UserError, ValueError):
    """A name is registered twice in one registry (also a ValueError, as code ported from
    OpenJarvis catches)."""


class UnknownNameError(UserError, KeyError):
    """A name that is not registered; the message lists the valid names (also a KeyError,
    as code ported from OpenJarvis catches)."""

    def __str__(self) -> str:
        # KeyError's str() would quote the message; keep jarvis's plain one-line text.
        return Exception.__str__(self)

    def __init__(self, kind: str, name: str, valid: Iterable[str], hint: str = "") -> None:
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        listed = ", ".join(self.valid) if self.valid else "(none registered)"
        close = did_you_mean(name, self.valid)
        close = f" ({close})" if close else ""
        message = f"unknown {kind} {name!r}{close}; valid {kind} names: {listed}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


def did_you_mean(name: object, valid: Iterable[str]) -> str:
    """'did you mean 'x'?' for the closest valid names, or '' when none is close."""
    import difflib

    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(valid), n=2, cutoff=0.6)
    if not close:
        return ""
    return "did you mean " + " or ".join(repr(c) for c in close) + "?"


class UnavailableToolError(UnknownNameError):
    """A tool name that would exist but whose source is down (an MCP server that failed);
    the message gives the reason instead of the list of valid names."""

    def __init__(self, name: str, reason: str) -> None:
        self.kind = "tool"
        self.name = name
        self.valid = []
        self.reason = reason
        UserError.__init__(self, f"tool {name!r} is not available: {reason}")


class ConfigError(UserError):
    """config.toml or an environment override is invalid."""


class DependencyError(JarvisError):
    """A needed package, binary or service is missing; the message says how to get it."""


class EngineError(JarvisError):
    """An inference engine failed: unreachable, rejected the request, or answered badly."""


class RunCancelled(JarvisError):
    """A run was cancelled by its caller: the `cancel` event of `ask_full` was set, the task
    awaiting `aask_full`/`aask_stream` was cancelled, or an `ask_stream` was closed early.
    The run stops at its next engine or tool boundary."""

    exit_code = 130


class RunFenced(RunCancelled):
    """A scheduled run's lease was taken from it (its worker stalled or lost the ledger past
    `lease_seconds`, and the run was recorded as crashed): it makes no further engine or tool
    call, and its result is dropped (jarvis.tools.fence)."""


class RunIncomplete(JarvisError):
    """A run ended without an answer: it reached max_turns, or the loop guard stopped a model
    that kept repeating a tool call. `Jarvis.ask` raises it (an empty string would pass for an
    answer); `ask_full` returns the result with status "incomplete" instead. `result` holds
    that result, `reason` the stop reason ("max_turns", "loop_guard")."""

    exit_code = 3

    def __init__(self, message: str, reason: str = "", result: dict | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.result = result


class ToolArgumentError(JarvisError):
    """Arguments for a tool call failed validation (becomes a failed ToolResult)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)
