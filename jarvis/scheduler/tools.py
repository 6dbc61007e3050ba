"""Scheduler tools: schedule_task, list_scheduled_tasks, pause/resume/cancel_scheduled_task.

They expose TaskScheduler operations to agents and return JSON. The scheduler comes by
constructor injection (`ScheduleTaskTool(scheduler=...)`, which is what the SDK does) or by
assignment (`tool._scheduler = scheduler`, as in the reference). With none, every call is a
failed result saying the scheduler is unavailable and how to wire it.

A model cannot approve confirmation-gated tools for a task it schedules: approval is only
given by a person (`jarvis schedule add --approve-tools`, or the Python API).
This module stays cheap to import: the scheduler itself is imported only when used.
"""

from __future__ import annotations

import json
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.errors import JarvisError, UserError
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

UNAVAILABLE = ("the scheduler is unavailable: no TaskScheduler is wired into this tool. Use it "
               "through the SDK (Jarvis().ask_full or `jarvis ask`), which wires the scheduler in, "
               "or pass one: ScheduleTaskTool(scheduler=TaskScheduler(store=SchedulerStore()))")

_TASK_ID = {"type": "string", "description": "ID of the task", "minLength": 1, "maxLength": 64}
_STATUSES = ["active", "paused", "completed", "cancelled"]


class _SchedulerTool(BaseTool):
    """Shared plumbing: the injected scheduler, JSON results, errors as failed results."""

    _SPEC: ToolSpec

    def __init__(self, scheduler: Any = None) -> None:
        self._scheduler = scheduler

    @property
    def spec(self) -> ToolSpec:
        return self._SPEC

    def execute(self, **params: Any) -> ToolResult:
        name = self._SPEC.name
        if self._scheduler is None:
            return ToolResult.failure(name, UNAVAILABLE, ErrorType.EXECUTION)
        try:
            data = self._run(self._scheduler, params)
        except UserError as exc:
            return ToolResult.failure(name, str(exc), ErrorType.INVALID_ARGS)
        except JarvisError as exc:
            return ToolResult.failure(name, str(exc), ErrorType.EXECUTION)
        return ToolResult(tool_name=name, content=json.dumps(data, ensure_ascii=False))

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    @staticmethod
    def _task_id(params: dict[str, Any]) -> str:
        task_id = params.get("task_id")
        if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > 64:
            raise UserError("task_id must be a task ID string, as returned by schedule_task")
        return task_id.strip()


@ToolRegistry.register("schedule_task")
class ScheduleTaskTool(_SchedulerTool):
    """Schedule a prompt for future or recurring execution."""

    tool_id = "schedule_task"
    _SPEC = ToolSpec(
        name="schedule_task",
        description="Schedule a task for future or recurring execution. Returns JSON with "
                    "task_id, next_run (ISO 8601, UTC) and status.",
        parameters={
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "minLength": 1, "maxLength": 20_000,
                           "description": "The query or prompt to execute on schedule"},
                "schedule_type": {"type": "string", "enum": ["cron", "interval", "once"],
                                  "description": 'One of "cron", "interval", or "once"'},
                "schedule_value": {"type": "string", "minLength": 1, "maxLength": 200,
                                   "description": "Cron expression (5 fields), interval in "
                                                  "seconds, or ISO 8601 datetime for one-time run"},
                "agent": {"type": "string", "maxLength": 64,
                          "description": "Agent to use for execution (default: the configured "
                                         "default agent)"},
                "tools": {"type": "string", "maxLength": 2_000,
                          "description": 'Comma-separated tool names for the agent (e.g., '
                                         '"calculator,think")'},
                "timezone": {"type": "string", "maxLength": 64,
                             "description": "IANA time zone for cron expressions and times "
                                            "without an offset (default: UTC)"},
            },
            "required": ["prompt", "schedule_type", "schedule_value"],
        },
        category="scheduler",
    )

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        task = scheduler.create_task(
            params.get("prompt", ""), str(params.get("schedule_type", "")),
            str(params.get("schedule_value", "")),
            timezone=params.get("timezone") or "UTC",
            agent=params.get("agent") or None,
            tools=params.get("tools") or None,
        )
        data = task.to_dict()
        return {"task_id": task.id, "next_run": data["next_run"], "status": task.status,
                "schedule": data["schedule"]}


@ToolRegistry.register("list_scheduled_tasks")
class ListScheduledTasksTool(_SchedulerTool):
    """List scheduled tasks, optionally by status."""

    tool_id = "list_scheduled_tasks"
    _SPEC = ToolSpec(
        name="list_scheduled_tasks",
        description="List all scheduled tasks, optionally filtered by status. Returns a JSON "
                    "array of task objects.",
        parameters={
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": _STATUSES,
                           "description": 'Filter by status: "active", "paused", "completed", '
                                          '"cancelled"'},
            },
        },
        category="scheduler",
    )

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        return [t.to_dict() for t in scheduler.list_tasks(params.get("status") or None)]


@ToolRegistry.register("pause_scheduled_task")
class PauseScheduledTaskTool(_SchedulerTool):
    """Pause an active scheduled task."""

    tool_id = "pause_scheduled_task"
    _SPEC = ToolSpec(
        name="pause_scheduled_task",
        description="Pause an active scheduled task. The task is preserved and can be resumed.",
        parameters={"type": "object", "properties": {"task_id": _TASK_ID}, "required": ["task_id"]},
        category="scheduler",
    )

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        task = scheduler.pause_task(self._task_id(params))
        return {"task_id": task.id, "status": task.status}


@ToolRegistry.register("resume_scheduled_task")
class ResumeScheduledTaskTool(_SchedulerTool):
    """Resume a paused scheduled task."""

    tool_id = "resume_scheduled_task"
    _SPEC = ToolSpec(
        name="resume_scheduled_task",
        description="Resume a paused task. The next_run time is recomputed from the current time.",
        parameters={"type": "object", "properties": {"task_id": _TASK_ID}, "required": ["task_id"]},
        category="scheduler",
    )

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        task = scheduler.resume_task(self._task_id(params))
        return {"task_id": task.id, "status": task.status, "next_run": task.to_dict()["next_run"]}


@ToolRegistry.register("cancel_scheduled_task")
class CancelScheduledTaskTool(_SchedulerTool):
    """Cancel a scheduled task permanently."""

    tool_id = "cancel_scheduled_task"
    _SPEC = ToolSpec(
        name="cancel_scheduled_task",
        description='Cancel a task permanently (status "cancelled", next_run cleared). '
                    "Cancelled tasks are not executed again.",
        parameters={"type": "object", "properties": {"task_id": _TASK_ID}, "required": ["task_id"]},
        category="scheduler",
    )

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        task = scheduler.cancel_task(self._task_id(params))
        return {"task_id": task.id, "status": task.status, "next_run": None}
