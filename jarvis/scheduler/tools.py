"""Scheduler tools: schedule_task, list_scheduled_tasks, pause/resume/cancel_scheduled_task.

They expose TaskScheduler operations to agents and return JSON. The scheduler comes by
constructor injection (`ScheduleTaskTool(scheduler=...)`, which is what the SDK does) or by
assignment (`tool._scheduler = scheduler`, as in the reference). With none, every call is a
failed result saying the scheduler is unavailable and how to wire it.

What a model may grant: a task scheduled through the executor by a model gets at most the
tools of the run that scheduled it (naming none gives it exactly those), and may approve
only the confirmation-gated tools that run had approved by name; anything more is a failed
result naming what was not granted. Resuming a paused task is granting it again: a model may
resume only a task whose tools and approvals are within its run's. Such tasks are recorded as
created by "model" and count against the [scheduler] model_* quotas. A person calling the
tool directly (Python, or `jarvis tools run`) is not limited: `jarvis schedule add` is the person's way
anyway.

Provenance (docs/trust.md): a task a model schedules never receives schedule_task or
resume_scheduled_task (it could spawn or revive tasks unattended) unless a person gives them,
and it records what the creating run had read: a task born in a tainted run starts each run
tainted. Creating or resuming a task from a tainted run needs a person (the egress guard).
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
# Tools that hand out unattended work: a task a model creates never gets them from the model.
SCHEDULING_TOOLS = ("schedule_task", "resume_scheduled_task")
LIST_LIMIT = 100  # tasks per list_scheduled_tasks call unless the model asks for fewer/more
MAX_LIST_LIMIT = 500


class _SchedulerTool(BaseTool):
    """Shared plumbing: the injected scheduler, JSON results, errors as failed results."""

    _SPEC: ToolSpec
    needs = ("scheduler",)

    def __init__(self, scheduler: Any = None) -> None:
        self._scheduler = scheduler

    @property
    def spec(self) -> ToolSpec:
        return self._SPEC

    def execute(self, **params: Any) -> ToolResult:
        return self._respond(lambda scheduler: self._run(scheduler, params))

    def _respond(self, work: Any) -> ToolResult:
        """`work(scheduler)`'s data as a JSON result; errors as failed results."""
        name = self._SPEC.name
        if self._scheduler is None:
            return ToolResult.failure(name, UNAVAILABLE, ErrorType.EXECUTION)
        try:
            data = work(self._scheduler)
        except _Refused as exc:
            return ToolResult.failure(name, str(exc), ErrorType.DENIED)
        except UserError as exc:
            from jarvis.scheduler.store import QuotaError  # loaded already: the scheduler is

            if isinstance(exc, QuotaError):  # a quota, not a malformed argument
                return ToolResult.failure(name, str(exc), ErrorType.DENIED)
            return ToolResult.failure(name, str(exc), ErrorType.INVALID_ARGS)
        except JarvisError as exc:
            return ToolResult.failure(name, str(exc), ErrorType.EXECUTION)
        return ToolResult(tool_name=name, content=json.dumps(data, ensure_ascii=False))

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        """A change to the schedule (its method: what the tool does), carrying its arguments."""
        from jarvis.trust.labels import Egress

        if self._SPEC.egress != "persist":
            return []
        method = self._SPEC.metadata.get("schedule_method", "change")
        return [Egress.of("persist", "schedule", method=method, payload=[arguments])]

    @staticmethod
    def _task_id(params: dict[str, Any]) -> str:
        task_id = params.get("task_id")
        if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > 64:
            raise UserError("task_id must be a task ID string, as returned by schedule_task")
        return task_id.strip()


class _Refused(JarvisError):
    """A model asked to grant more than its run was given."""


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
                "approved_tools": {"type": "string", "maxLength": 2_000,
                                   "description": "Comma-separated confirmation-gated tools "
                                                  "the task may run without asking (only "
                                                  "those approved for this run)"},
                "notify": {"type": "string", "maxLength": 64,
                           "description": "Channel that receives each run's answer (see "
                                          "channel_list); only channels that allow sending "
                                          "without approval"},
            },
            "required": ["prompt", "schedule_type", "schedule_value"],
        },
        category="scheduler",
        output_labels=frozenset(),
        egress="persist",
        metadata={"persist": "schedule", "schedule_method": "create"},
    )

    def invoke(self, arguments: dict[str, Any], context: Any = None) -> Any:
        # Through the executor: the context says what the calling run was given and read.
        grant = getattr(context, "grant", None)
        if grant is None or grant.by_person:
            return self.execute(**arguments)
        run_id = getattr(context, "run_id", None)
        trust = getattr(context, "trust", None)
        return self._respond(lambda scheduler: self._run(scheduler, arguments, grant, run_id,
                                                         trust))

    def _run(self, scheduler: Any, params: dict[str, Any], grant: Any = None,
             run_id: str | None = None, trust: Any = None) -> Any:
        tools = params.get("tools") or None
        approved = params.get("approved_tools") or None
        options: dict[str, Any] = {}
        if grant is not None:
            tools, approved = _within_grant(grant, tools, approved)
            options = {"created_by": "model",
                       "metadata": {"created_in_run": run_id},
                       "trust": _born_of(trust, run_id)}
        notify = params.get("notify") or None
        if notify is not None and grant is not None:
            _check_model_notify(scheduler, notify, grant)
        task = scheduler.create_task(
            params.get("prompt", ""), str(params.get("schedule_type", "")),
            str(params.get("schedule_value", "")),
            timezone=params.get("timezone") or "UTC",
            agent=params.get("agent") or None,
            tools=tools, approved_tools=approved, notify=notify, **options,
        )
        data = task.to_dict()
        out = {"task_id": task.id, "next_run": data["next_run"], "status": task.status,
               "schedule": data["schedule"]}
        if grant is not None:
            out["tools"] = list(task.tools)
        if task.notify:
            out["notify"] = task.notify
        return out


def _born_of(trust: Any, run_id: str | None) -> dict[str, Any]:
    """What a task a model creates keeps of its creating run: whether it had read untrusted
    content or private data, and from which calls (never the texts themselves)."""
    if trust is None:
        # Unknown: assume the worst, so its runs start tainted.
        return {"tainted": True, "private": True, "run_id": run_id,
                "tainted_by": [{"reason": "created where what the run read is unknown"}]}
    summary = trust.summary()
    return {"tainted": summary["tainted"], "private": summary["private"], "run_id": run_id,
            "tainted_by": summary["tainted_by"][:3], "private_by": summary["private_by"][:3]}


def _check_model_notify(scheduler: Any, notify: Any, grant: Any) -> None:
    """A model may not grant itself unattended sends: a task it schedules may notify only a
    channel that sends without asking (confirm = false), or any channel when channel_send is
    approved by name for the calling run. A person adds others with `schedule add --notify`."""
    channels = getattr(getattr(scheduler, "config", None), "channels", None) or {}
    channel = channels.get(notify) if isinstance(notify, str) else None
    if channel is None:
        # Deny by default: a scheduler without the config (as the tool is often wired) cannot
        # tell whether the channel asks first, and the daemon that later delivers may know it.
        shown = str(notify)[:64]
        listed = ", ".join(sorted(channels)) or "none known to this scheduler"
        raise _Refused(f"refused: channel {shown!r} is not a configured channel ({listed}), so "
                       f"a task you schedule cannot send to it. (A person can add it with "
                       f"`jarvis schedule add --notify {shown}`.)")
    if channel.confirm and "channel_send" not in grant.approved_tools:
        raise _Refused(f"refused: channel {notify!r} asks before each message, so a task you "
                       f"schedule cannot send to it on its own. (A person can add it with "
                       f"`jarvis schedule add --notify {notify}`, or set confirm = false in "
                       f"[channels.{notify}].)")


def _split(value: Any) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return list(dict.fromkeys(str(n).strip() for n in items if str(n).strip()))


def _within_grant(grant: Any, tools: Any, approved: Any) -> tuple[list[str], list[str]]:
    """The task's tools and approvals for a model's call, or _Refused naming the excess.

    No tools named: the task gets exactly the calling run's tools (never the configured
    defaults, which may be more).
    """
    wanted = _split(tools)
    allowed = sorted(n for n in grant.tools if n not in SCHEDULING_TOOLS)
    extra = [n for n in wanted if n not in grant.tools]
    if extra:
        raise _Refused(f"refused: tool(s) not granted: {', '.join(extra[:20])}. A task you "
                       f"schedule may use only the tools of this run: {', '.join(allowed)}. "
                       f"(A person can add tools with `jarvis schedule add --tools`.)")
    spawning = [n for n in wanted if n in SCHEDULING_TOOLS]
    if spawning:
        raise _Refused(f"refused: a task you schedule cannot have {', '.join(spawning)}: it "
                       f"would schedule more tasks unattended. (A person can give it with "
                       f"`jarvis schedule add --tools`.)")
    approvals = _split(approved)
    not_approved = [n for n in approvals if n not in grant.approved_tools]
    if not_approved:
        held = ", ".join(sorted(grant.approved_tools)) or "none"
        raise _Refused(f"refused: approval not granted for: {', '.join(not_approved[:20])}. "
                       f"A task you schedule may approve only tools approved by name for this "
                       f"run (here: {held}). (A person can approve with `jarvis schedule add "
                       f"--approve-tools`.)")
    return (wanted or allowed), approvals


@ToolRegistry.register("list_scheduled_tasks")
class ListScheduledTasksTool(_SchedulerTool):
    """List scheduled tasks, optionally by status."""

    tool_id = "list_scheduled_tasks"
    _SPEC = ToolSpec(
        name="list_scheduled_tasks",
        description="List scheduled tasks (oldest first), optionally filtered by status, a "
                    f"page at a time (limit, default {LIST_LIMIT}; offset). Returns a JSON "
                    "array of task objects; a full page means there may be more.",
        parameters={
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": _STATUSES,
                           "description": 'Filter by status: "active", "paused", "completed", '
                                          '"cancelled"'},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT,
                          "description": f"At most this many tasks (default {LIST_LIMIT})"},
                "offset": {"type": "integer", "minimum": 0,
                           "description": "Skip this many tasks first (next page: offset + "
                                          "limit)"},
            },
        },
        category="scheduler",
        output_labels=frozenset({"private"}),  # the person's tasks and prompts
        egress="none",
    )

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        limit = params.get("limit", LIST_LIMIT)
        offset = params.get("offset", 0)
        # Bound the work before doing it: a model may ask for everything at 100 000 tasks.
        if not _whole(limit) or not 1 <= limit <= MAX_LIST_LIMIT:
            raise UserError(f"limit must be a whole number from 1 to {MAX_LIST_LIMIT}, "
                            f"got {limit!r}")
        if not _whole(offset) or not 0 <= offset <= 10**9:
            raise UserError(f"offset must be a whole number of 0 or more, got {offset!r}")
        tasks = scheduler.list_tasks(params.get("status") or None, limit=limit, offset=offset)
        return [t.to_dict() for t in tasks]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@ToolRegistry.register("pause_scheduled_task")
class PauseScheduledTaskTool(_SchedulerTool):
    """Pause an active scheduled task."""

    tool_id = "pause_scheduled_task"
    _SPEC = ToolSpec(
        name="pause_scheduled_task",
        description="Pause an active scheduled task. The task is preserved and can be resumed.",
        parameters={"type": "object", "properties": {"task_id": _TASK_ID}, "required": ["task_id"]},
        category="scheduler",
        output_labels=frozenset(),
        egress="persist",
        metadata={"persist": "schedule", "schedule_method": "pause"},
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
        output_labels=frozenset(),
        egress="persist",
        metadata={"persist": "schedule", "schedule_method": "resume"},
    )

    def invoke(self, arguments: dict[str, Any], context: Any = None) -> Any:
        # Resuming makes a task run again, unattended, with its own tools: through the
        # executor a model may resume only a task that would not exceed its own run.
        grant = getattr(context, "grant", None)
        if grant is None or grant.by_person:
            return self.execute(**arguments)
        return self._respond(lambda scheduler: self._run(scheduler, arguments, grant))

    def _run(self, scheduler: Any, params: dict[str, Any], grant: Any = None) -> Any:
        task_id = self._task_id(params)
        if grant is not None:
            _resumable(scheduler.get_task(task_id), grant)
        task = scheduler.resume_task(task_id)
        return {"task_id": task.id, "status": task.status, "next_run": task.to_dict()["next_run"]}


def _resumable(task: Any, grant: Any) -> None:
    """_Refused unless the task's tools and approvals are within the calling run's grant."""
    if not task.tools:
        raise _Refused(f"refused: task {task.id} names no tools, so it runs with the configured "
                       f"or agent's default tools, which this run was not given. (A person can "
                       f"resume it with `jarvis schedule resume {task.id}`.)")
    extra = [n for n in task.tools if n not in grant.tools]
    unapproved = [n for n in task.approved_tools if n not in grant.approved_tools]
    if extra or unapproved:
        what = (f"tool(s) not granted to this run: {', '.join(extra[:20])}" if extra
                else f"approval not granted to this run for: {', '.join(unapproved[:20])}")
        raise _Refused(f"refused: task {task.id} would run with {what}. A model may resume only "
                       f"tasks within this run's tools and approvals. (A person can resume it "
                       f"with `jarvis schedule resume {task.id}`.)")


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
        output_labels=frozenset(),
        egress="persist",
        metadata={"persist": "schedule", "schedule_method": "cancel"},
    )

    def _run(self, scheduler: Any, params: dict[str, Any]) -> Any:
        task = scheduler.cancel_task(self._task_id(params))
        return {"task_id": task.id, "status": task.status, "next_run": None}
