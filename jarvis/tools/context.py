"""ToolContext: what a tool may ask the executor for, kept out of its JSON schema.

A tool declares a parameter annotated with `ToolContext` (in `@tool` functions or a typed
`call` method); the executor fills it in. It carries the run (or session) id, the call id and
the event bus, and hands out pooled resources:

    proc = context.acquire(spec)                   # one per run, shared by its calls
    shared = context.acquire(spec, scope="global") # one for every run

A run's resources are released when the run ends (`jarvis.resources.release_run`). Without a
run id (a lone `jarvis tools run`), "run" means this one call: the executor releases the
resource when the call returns (`close()`).

`context.grant` says what the run itself was given (its tools and standing approvals) and
whether a person or a model made the call, so a tool that hands out work for later
(`schedule_task`) never grants more than that. `context.trust` is the run's RunTrust
(jarvis.trust): what it has read, so what a tool persists (a memory entry, a scheduled task)
keeps its provenance.

`context.fence` is a scheduled run's RunFence (jarvis.tools.fence), None elsewhere:
`context.idempotency_key`, `context.attempt` and `context.epoch` name the occurrence, the
attempt and the dispatch, and `context.fence.begin(...)` records a side effect so that a retried
attempt never sends it twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jarvis.core.events import EventBus
    from jarvis.resources import ResourceManager, ResourceSpec
    from jarvis.tools.fence import RunFence


@dataclass(frozen=True, slots=True)
class Grant:
    """What the run a call belongs to was given.

    tools: the names of the tools the run has; approved_tools: the confirmation-gated tools
    approved for the whole run by name (an interactive yes or `--yes` approves calls, not
    names, so it is not here); by_person: the call was typed by a person (`jarvis tools
    run`), not chosen by a model.
    """

    tools: frozenset[str] = frozenset()
    approved_tools: frozenset[str] = frozenset()
    by_person: bool = False


@dataclass(slots=True)
class ToolContext:
    run_id: str | None = None
    call_id: str | None = None
    tool_name: str = ""
    bus: EventBus | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    resources: ResourceManager | None = None
    grant: Grant | None = None
    trust: Any = None
    fence: RunFence | None = None
    _call_owner: str | None = field(default=None, repr=False, init=False)

    @property
    def idempotency_key(self) -> str | None:
        """The scheduled occurrence's key (the same for every attempt); None outside one."""
        if self.fence is not None:
            return self.fence.idempotency_key
        return (self.metadata.get("scheduled_run") or {}).get("idempotency_key")

    @property
    def attempt(self) -> int | None:
        """The scheduled run's attempt number (1 for the first); None outside one."""
        if self.fence is not None:
            return self.fence.attempt
        return (self.metadata.get("scheduled_run") or {}).get("attempt")

    @property
    def epoch(self) -> int | None:
        """The scheduled run's dispatch epoch (its fencing number; 0 on the local runner)."""
        if self.fence is not None:
            return self.fence.epoch
        return (self.metadata.get("scheduled_run") or {}).get("epoch")

    @property
    def manager(self) -> ResourceManager:
        """The resource manager: the executor's, else the process-wide one."""
        if self.resources is None:
            from jarvis.resources import default_manager

            self.resources = default_manager()
        return self.resources

    @property
    def owner(self) -> str:
        """Who run-scoped resources belong to: the run, else this call alone."""
        if self.run_id:
            return self.run_id
        if self._call_owner is None:
            import uuid

            self._call_owner = f"call:{self.call_id or uuid.uuid4().hex[:12]}:{uuid.uuid4().hex[:8]}"
        return self._call_owner

    def acquire(self, spec: ResourceSpec, scope: str = "run", timeout: float | None = None) -> Any:
        """The resource of `spec` for this run (scope="run") or shared by all ("global").

        Waits up to `timeout` seconds (the manager's default when None) while the pool is at
        its maximum, then raises `jarvis.resources.ResourceBusyError`.
        """
        return self.manager.acquire(spec, scope=scope, owner=self.owner, timeout=timeout)

    async def aacquire(self, spec: ResourceSpec, scope: str = "run",
                       timeout: float | None = None) -> Any:
        """`acquire` for async tools (waits in a worker thread, not on the event loop)."""
        return await self.manager.aacquire(spec, scope=scope, owner=self.owner, timeout=timeout)

    # AgentFly spelling, so tools written for it read naturally here.
    async def acquire_resource(self, spec: ResourceSpec, scope: str = "run",
                               timeout: float | None = None, **_: Any) -> Any:
        if scope == "rollout":
            scope = "run"
        return await self.aacquire(spec, scope=scope, timeout=timeout)

    def close(self) -> None:
        """End the call: release what it acquired as a lone call (no run id). Run-scoped
        resources of a real run stay until the run ends."""
        if self._call_owner is not None and self.resources is not None:
            self.resources.release_run(self._call_owner)
