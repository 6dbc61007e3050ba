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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jarvis.core.events import EventBus
    from jarvis.resources import ResourceManager, ResourceSpec


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
    _call_owner: str | None = field(default=None, repr=False, init=False)

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
