"""Keep scheduler tasks in step with the workspace agents that declare a `schedule`.

Each such agent owns one task, marked in its metadata with `agent_schedule = NAME`. Syncing
creates the missing ones, replaces those whose schedule, zone, prompt or notify channel
changed, and cancels the tasks of agents that no longer exist or no longer have a schedule.
Tasks made by hand are never touched. Runs at every daemon start (`jarvis scheduler start`,
also with `--once`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MANAGED_KEY = "agent_schedule"


@dataclass(slots=True)
class AgentSyncReport:
    created: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def sync_agent_schedules(scheduler: Any, config: Any) -> AgentSyncReport:
    """Make the scheduler's agent-owned tasks match the workspace agents' schedules."""
    from jarvis.errors import JarvisError
    from jarvis.workspace.agents import scheduled_agents

    report = AgentSyncReport()
    wanted = {spec.name: spec for spec in scheduled_agents(config)}
    managed: dict[str, list[Any]] = {}
    for task in scheduler.list_tasks():
        name = (task.metadata or {}).get(MANAGED_KEY)
        if name and task.status in ("active", "paused"):
            managed.setdefault(name, []).append(task)

    for name, tasks in managed.items():
        spec = wanted.get(name)
        keep = None
        for task in tasks:
            same = (spec is not None and keep is None and task.schedule_type == "cron"
                    and task.schedule_value == spec.schedule and task.timezone == spec.timezone
                    and task.prompt == spec.prompt
                    and task.notify == getattr(spec, "notify", None))
            if same:
                keep = task
                continue
            scheduler.cancel_task(task.id)
            (report.replaced if spec is not None else report.cancelled).append(name)
        if keep is not None:
            wanted.pop(name)

    for name, spec in wanted.items():
        try:
            scheduler.create_task(spec.prompt, "cron", spec.schedule, timezone=spec.timezone,
                                  agent=name, metadata={MANAGED_KEY: name},
                                  notify=getattr(spec, "notify", None))
        except JarvisError as exc:
            report.errors.append(f"agent {name}: {exc}")
            continue
        if name not in report.replaced:
            report.created.append(name)
    return report
