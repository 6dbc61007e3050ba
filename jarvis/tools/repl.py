"""repl: a persistent Python interpreter per run, in a sandbox (see `jarvis.sandbox`).

Variables, imports and files in its work folder survive between the calls of one run and
are gone when the run ends (the interpreter is a run-scoped pooled resource, see
`jarvis.resources`); between calls it is frozen. The code never runs in the jarvis process;
limits are in `jarvis.sandbox.SandboxLimits`, isolation in `[sandbox]`.
"""

from __future__ import annotations

from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.base import BaseTool
from jarvis.tools.context import ToolContext
from jarvis.tools.spec import ToolSpec

MAX_CODE_CHARS = 100_000
REPL_KIND = "python-repl"
ONESHOT_KIND = "python-oneshot"


def sandbox_result(tool_name: str, outcome: Any, *, fresh: bool | None = None) -> ToolResult:
    """Turn a RunOutcome into the ToolResult the model reads."""
    metadata: dict[str, Any] = {"seconds": round(outcome.seconds, 4)}
    if fresh is not None:
        metadata["fresh_interpreter"] = fresh
    if outcome.truncated:
        metadata["truncated"] = True
    if outcome.ok:
        return ToolResult(tool_name=tool_name, content=outcome.output or "(no output)",
                          metadata=metadata)
    kind = outcome.error_kind or "exception"
    parts = [outcome.output.rstrip("\n")] if outcome.output else []
    # A traceback speaks for itself; a limit gets a one-line "Error: ..." (kind in metadata).
    parts.append(outcome.error if kind == "exception" else f"Error: {outcome.error}")
    if outcome.restarted:
        parts.append("The interpreter was stopped; the next call starts a fresh one.")
    error_type = ErrorType.TIMEOUT if kind == "timeout" else ErrorType.EXECUTION
    return ToolResult.failure(tool_name, "\n".join(parts), error_type, error_kind=kind, **metadata)


def _provenance(policy: Any) -> tuple[frozenset[str], str]:
    """What sandboxed code's output is and what its calls can send, from where it runs: by
    default (no network, no host files) neutral and nothing; with the network, untrusted
    output and network egress; with host folders, private output; without isolation, all."""
    labels: set[str] = set()
    egress = "none"
    if policy.isolation == "none":
        return frozenset({"private", "untrusted"}), "network"
    if policy.network:
        labels.add("untrusted")
        egress = "network"
    if policy.read_only_paths or policy.writable_paths:
        labels.add("private")
    return frozenset(labels), egress


class SandboxedPythonTool(BaseTool):
    """What `repl` and `code_interpreter` share: settings, spec, policy and the pool.

    Limits left as None come from the config's [sandbox] table (then the built-in defaults);
    where the code runs (isolation, network, paths) comes only from [sandbox].
    """

    needs = ("config",)

    tool_id = ""
    kind = ""
    description = ""
    freeze_between_calls = True

    def __init__(self, timeout: float | None = None, cpu_seconds: int | None = None,
                 memory_mb: int | None = None, max_output_chars: int | None = None,
                 max_code_chars: int = MAX_CODE_CHARS, max_processes: int = 4,
                 acquire_timeout: float = 30.0, session_cpu_seconds: int | None = None,
                 requires_confirmation: bool = True, config: Any = None,
                 isolation: str | None = None) -> None:
        from jarvis.errors import ConfigError
        from jarvis.sandbox.policy import ISOLATIONS, SandboxPolicy

        number = self._number
        limits = {key: number(key, value, kind) for key, value, kind in (
            ("timeout", timeout, float), ("cpu_seconds", cpu_seconds, int),
            ("session_cpu_seconds", session_cpu_seconds, int), ("memory_mb", memory_mb, int),
            ("max_output_chars", max_output_chars, int)) if value is not None}
        self.policy = SandboxPolicy.from_config(config, **limits)
        if isolation is not None:
            if isolation not in ISOLATIONS:
                raise ConfigError(f"[tools.{self.tool_id}] isolation must be one of "
                                  f"{', '.join(ISOLATIONS)}, got {isolation!r}")
            self.policy = self.policy.with_isolation(isolation)
        self.limits = self.policy.limits
        self.max_code_chars = number("max_code_chars", max_code_chars, int)
        self.max_processes = number("max_processes", max_processes, int)
        self.acquire_timeout = number("acquire_timeout", acquire_timeout, float)
        labels, egress = _provenance(self.policy)
        description = self.description
        if self.policy.isolation == "none":
            description = description.split("; no subprocesses")[0] + "; no subprocesses."
        elif self.policy.network:
            description = description.replace("no network, ", "")
        self._spec = ToolSpec(
            name=self.tool_id,
            description=description,
            parameters={
                "type": "object",
                "properties": {"code": {"type": "string", "description": "Python source to run",
                                        "maxLength": self.max_code_chars}},
                "required": ["code"],
                "additionalProperties": False,
            },
            category="code",
            cost_estimate=0.0,
            latency_estimate=0.05,
            requires_confirmation=bool(requires_confirmation),
            # Our own limits answer first; the executor's timeout is only the backstop.
            timeout_seconds=self.limits.timeout + self.acquire_timeout + 10.0,
            max_output_chars=self.limits.max_output_chars + 2_000,
            metadata={"limits": {"timeout": self.limits.timeout,
                                 "cpu_seconds": self.limits.cpu_seconds,
                                 "memory_mb": self.limits.memory_mb,
                                 "max_output_chars": self.limits.max_output_chars},
                      "sandbox": {"isolation": self.policy.isolation,
                                  "network": self.policy.network}},
            output_labels=labels,
            egress=egress,
        )

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        if self._spec.egress == "none":
            return []
        from jarvis.trust.labels import Egress

        where = ("any host (code run without isolation)" if self.policy.isolation == "none"
                 else "any host (sandboxed code with the network)")
        return [Egress.of("network", where, payload=[arguments.get("code")])]

    def sandbox_status(self) -> dict[str, Any]:
        """Which mechanism is in force for this tool (probes the host once per process)."""
        from jarvis.sandbox.probe import status

        return status(self.policy.isolation, self.policy.network, self.policy.uid,
                      self.limits.max_threads)

    def _number(self, key: str, value: Any, kind: type) -> Any:
        """A positive int/float setting, or a ConfigError naming the key."""
        from jarvis.errors import ConfigError

        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"[tools.{self.tool_id}] {key} must be a positive number, got "
                              f"{value!r}")
        return kind(value)

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def resource_spec(self) -> Any:
        """The pool of sandboxed interpreters for this tool's policy (one pool per policy)."""
        from dataclasses import asdict

        from jarvis.resources.spec import ResourceSpec
        from jarvis.sandbox.process import SandboxedPython

        policy, freeze = self.policy, self.freeze_between_calls
        params = tuple(sorted({**asdict(policy.limits), "isolation": policy.isolation,
                               "network": policy.network, "ro": policy.read_only_paths,
                               "rw": policy.writable_paths,
                               "site_packages": policy.site_packages,
                               "uid": policy.uid}.items()))
        return ResourceSpec(kind=self.kind, max_size=self.max_processes, reusable=False,
                            params=params, factory=lambda: SandboxedPython(
                                policy, freeze_between_calls=freeze))

    def _refusal(self) -> ToolResult | None:
        """A failed result when no isolation mechanism works here (one line: why, the fix)."""
        from jarvis.sandbox.probe import SandboxUnavailable, resolve

        try:
            resolve(self.policy.isolation)
        except SandboxUnavailable as exc:
            return ToolResult.failure(self.tool_id, str(exc), ErrorType.EXECUTION,
                                      error_kind="unavailable")
        return None

    def execute(self, **params: Any) -> ToolResult:
        """Run directly, outside an executor (as a lone call)."""
        context = ToolContext(tool_name=self.tool_id)
        try:
            return self.invoke(params, context)
        finally:
            context.close()

    def _check_code(self, arguments: dict[str, Any]) -> str | ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult.failure(self.tool_id, "code must be a string", ErrorType.INVALID_ARGS)
        if len(code) > self.max_code_chars:
            return ToolResult.failure(self.tool_id, f"code is {len(code)} characters; the limit is "
                                      f"{self.max_code_chars}", ErrorType.INVALID_ARGS)
        if "\x00" in code:
            return ToolResult.failure(self.tool_id, "code contains a NUL character",
                                      ErrorType.INVALID_ARGS)
        return code

    def _unavailable(self, exc: Exception) -> ToolResult:
        return ToolResult.failure(self.tool_id, f"no Python interpreter available: {exc}",
                                  ErrorType.EXECUTION, error_kind="unavailable")


@ToolRegistry.register("repl")
class ReplTool(SandboxedPythonTool):
    """A persistent Python REPL: state survives between the calls of one run."""

    tool_id = "repl"
    kind = REPL_KIND
    sequential = True  # calls of one turn share one interpreter: keep their order
    description = (
        "Run Python code in a persistent interpreter (a sandboxed process). Variables, "
        "functions and imports persist between calls in this conversation; the value of a "
        "final expression is shown, as in a REPL. Limits per call: wall-clock time, CPU time, "
        "memory and output size; no subprocesses, no network, files only in the work "
        "folder (/tmp).")

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> Any:
        from jarvis.resources import ResourceBusyError
        from jarvis.sandbox.process import SandboxError

        code = self._check_code(arguments)
        if isinstance(code, ToolResult):
            return code
        refusal = self._refusal()
        if refusal is not None:
            return refusal
        if context is None:
            return self.execute(**arguments)
        try:
            proc = context.acquire(self.resource_spec(), scope="run", timeout=self.acquire_timeout)
        except (ResourceBusyError, SandboxError) as exc:
            return self._unavailable(exc)
        fresh = proc.calls == 0
        result = sandbox_result(self.tool_id, proc.run(code), fresh=fresh)
        result.metadata["run_id"] = context.run_id
        return result
