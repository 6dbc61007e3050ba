"""Pooled resources for stateful tools (AgentFly-style).

A tool asks its ToolContext for a resource: `context.acquire(spec, scope="run")`. The
ResourceManager keeps one ResourcePool per spec (at most `max_size` alive; further callers wait
up to a timeout), binds resources to runs, reuses released ones when the spec allows, and
releases a run's resources when the run ends (`release_run`).
"""

from __future__ import annotations

from jarvis.resources.manager import (
    GLOBAL_OWNER,
    ResourceManager,
    default_manager,
    release_run,
)
from jarvis.resources.pool import ResourcePool
from jarvis.resources.spec import Resource, ResourceBusyError, ResourceSpec

__all__ = [
    "GLOBAL_OWNER",
    "Resource",
    "ResourceBusyError",
    "ResourceManager",
    "ResourcePool",
    "ResourceSpec",
    "default_manager",
    "release_run",
]
