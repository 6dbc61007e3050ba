"""`jarvis schedule ...` (manage scheduled tasks) and `jarvis scheduler start` (the daemon)."""

from __future__ import annotations

import sys
from typing import Any

import click

from jarvis.commands._common import (
    Group,
    echo_json,
    echo_table,
    load_cli_config,
    log_scheduler_to_stderr,
    one_line,
    shown_data,
    system_factory,
)
from jarvis.core.terminal import visible


def _scheduler(runner: str | None = None, config: Any = None, *, dispatch: bool = False,
               **options: Any) -> Any:
    """A TaskScheduler on the configured store, with the configured runner.

    `dispatch`: the daemon of `runner = "celery"` sends runs to Celery workers; everything
    else (`schedule run` included) runs on this process's threads.
    """
    from jarvis.scheduler.ledger import open_store
    from jarvis.scheduler.runner import SdkRunner, load_runner
    from jarvis.scheduler.scheduler import TaskScheduler

    config = config if config is not None else load_cli_config()
    target = runner or config.scheduler.runner
    dispatcher = None
    if target == "celery":
        target = ""
        if dispatch:
            from jarvis.scheduler.dispatch import CeleryDispatcher

            dispatcher = CeleryDispatcher.from_config(config)
    if target:
        made = load_runner(target)
    else:
        made = SdkRunner(factory=system_factory(config))
    return TaskScheduler(store=open_store(config), runner=made, config=config,
                         dispatcher=dispatcher, **options)


def _check_names(config: Any, agent: str | None, tools: str | None) -> None:
    """Refuse a new task whose agent or tool names are unknown here, as `jarvis ask` does
    (with a did-you-mean, naming the workspace in use): the task remembers this workspace and
    runs in it, so a name unknown here would make every run fail."""
    names = [n.strip() for n in (tools or "").split(",") if n.strip()]
    if not agent and not names:
        return
    from jarvis.sdk import Jarvis

    with Jarvis(config=config) as system:
        if agent:
            system.resolve_agent(agent, names or None)
        if names:
            system.load_extensions()
            system._check_tool_names(names)


class Duration(click.ParamType):
    """Seconds, or a number with a unit: 90s, 15m, 1h, 1d, 1h30m."""

    name = "DURATION"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        from jarvis.scheduler.schedules import parse_duration

        if isinstance(value, float):
            return value
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()


# --- jarvis schedule / jarvis scheduler (one group, two names) -------------------------------
@click.group(cls=Group)
def schedule() -> None:
    """Add, list, pause, resume, cancel and run scheduled tasks; `start` runs the daemon.

    Tasks are stored in the scheduler database ([scheduler] db_path, default
    $JARVIS_HOME/scheduler.db, or the PostgreSQL ledger of [scheduler] store) and run by
    `jarvis scheduler start`. `jarvis schedule` and `jarvis scheduler` are the same group:
    `jarvis schedule start` and `jarvis scheduler list` work too.
    """


def _read_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """The task prompt: the PROMPT argument, or the text of --prompt-file (`-`: stdin)."""
    from jarvis.errors import UserError
    from jarvis.scheduler.scheduler import MAX_PROMPT_CHARS

    if prompt is not None and prompt_file is not None:
        raise UserError("give the prompt once: as PROMPT, or with --prompt-file, not both")
    if prompt is None and prompt_file is None:
        raise UserError("give the prompt: PROMPT, `-` to read it from stdin, or --prompt-file PATH")
    source = prompt_file if prompt_file is not None else "-"
    if prompt not in (None, "-"):
        return prompt
    where = "stdin" if source == "-" else source
    limit = MAX_PROMPT_CHARS * 4 + 1  # bytes: enough for the longest UTF-8 prompt, and one more
    try:
        if source == "-":
            data = sys.stdin.buffer.read(limit)
        else:
            with open(source, "rb") as handle:
                data = handle.read(limit)
    except OSError as exc:
        raise UserError(f"cannot read the prompt from {where}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"the prompt in {where} is not UTF-8 text") from None
    if len(data) == limit or len(text) > MAX_PROMPT_CHARS:
        raise UserError(f"the prompt in {where} is longer than {MAX_PROMPT_CHARS} characters")
    text = text.strip()
    if not text:
        raise UserError(f"the prompt in {where} is empty")
    return text


@schedule.command("add")
@click.argument("prompt", required=False)
@click.option("--prompt-file", "prompt_file", metavar="PATH", default=None,
              help="Read the prompt from this file (`-`: stdin) instead of PROMPT.")
@click.option("--cron", "cron", metavar="EXPR", help="5-field cron expression, e.g. '0 8 * * 1-5'.")
@click.option("--tz", "tz", default="UTC", show_default=True, metavar="ZONE",
              help="IANA time zone for --cron (and --at without an offset).")
@click.option("--every", "every", type=DURATION, metavar="DURATION",
              help="Run every DURATION: seconds (3600) or 90s, 15m, 1h, 1d.")
@click.option("--at", "at", metavar="ISO", help="Run once at this ISO 8601 time, e.g. "
              "2030-03-01T09:00:00Z.")
@click.option("--agent", default=None, help="Agent to run the prompt with (default: as `jarvis ask`).")
@click.option("--tools", default=None, metavar="A,B", help="Comma-separated tools the agent may use.")
@click.option("--approve-tools", "approve_tools", default=None, metavar="A,B",
              help="Tools that require confirmation which this task may use unattended.")
@click.option("--timeout", type=DURATION, default=None, metavar="DURATION",
              help="Longest a run may take, e.g. 300 or 5m (default: [scheduler] "
              "default_timeout).")
@click.option("--retries", type=int, default=0, show_default=True,
              help="Retries after a failed run.")
@click.option("--retry-backoff", "retry_backoff", type=DURATION, default=30.0,
              show_default=True, metavar="DURATION",
              help="Wait before the first retry, e.g. 30 or 2m; doubles each time.")
@click.option("--on-crash", "on_crash", type=click.Choice(["retry", "fail"]), default="retry",
              show_default=True, help="If a scheduler dies mid-run: run it again, or record "
              "it failed.")
@click.option("--grace", type=DURATION, default=None, metavar="DURATION",
              help="How late a missed run may still run, e.g. 600 or 1h (default: "
              "[scheduler] grace_seconds).")
@click.option("--notify", "notify", default=None, metavar="CHANNEL",
              help="Send each run's answer (or failure) to this channel ([channels.CHANNEL]).")
@click.option("--budget-usd", type=float, metavar="USD", help="Dollars each run may spend "
              "(as `jarvis ask --budget-usd`).")
@click.option("--budget-seconds", type=float, metavar="S", help="Seconds each run may take.")
@click.option("--max-tool-calls", type=int, metavar="N", help="Tool calls each run may make.")
@click.option("--json", "as_json", is_flag=True, help="Print the new task as JSON.")
def add_task(prompt: str | None, prompt_file: str | None, cron: str | None, tz: str,
             every: float | None, at: str | None, agent: str | None, tools: str | None,
             approve_tools: str | None, timeout: float | None, retries: int,
             retry_backoff: float, on_crash: str, grace: float | None, notify: str | None,
             budget_usd: float | None, budget_seconds: float | None,
             max_tool_calls: int | None, as_json: bool) -> None:
    """Schedule PROMPT: exactly one of --cron, --every or --at.

    PROMPT `-` (or --prompt-file -) reads the prompt from stdin; --prompt-file PATH from a
    file (UTF-8, up to 20 000 characters, surrounding blank space dropped).

    \b
    Examples:
      jarvis schedule add "Summarize my inbox" --cron "0 8 * * 1-5" --tz Europe/Paris
      jarvis schedule add "Check the build" --every 1h --tools http_request
      jarvis schedule add "Remind me to call Bob" --at 2030-03-01T09:00:00Z
      echo "Summarize the news" | jarvis schedule add - --cron "0 7 * * *"
    """
    from jarvis.errors import UserError

    prompt = _read_prompt(prompt, prompt_file)

    given = [name for name, value in (("--cron", cron), ("--every", every), ("--at", at))
             if value is not None]
    if len(given) != 1:
        raise UserError("give exactly one schedule: --cron EXPR, --every DURATION or --at ISO "
                        f"(got {', '.join(given) or 'none'})")
    config = load_cli_config()
    scheduler = _scheduler(config=config)  # first: schedule mistakes are errors before names
    _check_names(config, agent, tools)
    task = scheduler.add(prompt, cron=cron, every=every, at=at, tz=tz, agent=agent,
                            tools=tools, approved_tools=approve_tools, timeout_seconds=timeout,
                            max_retries=retries, retry_backoff_seconds=retry_backoff,
                            on_crash=on_crash, grace_seconds=grace, notify=notify,
                            budget={"usd": budget_usd, "seconds": budget_seconds,
                                    "tool_calls": max_tool_calls})
    data = task.to_dict()
    if as_json:
        echo_json(data)
        return
    click.echo(f"task {task.id} scheduled: {data['schedule']}; next run {data['next_run']}")
    click.echo("Runs need the daemon: `jarvis scheduler start` (or `--once` from cron).", err=True)


@schedule.command("list")
@click.option("--status", type=click.Choice(["active", "paused", "completed", "cancelled"]),
              default=None, help="Only tasks with this status.")
@click.option("-n", "--limit", type=click.IntRange(0), default=100, show_default=True,
              help="Show at most this many tasks (0: all).")
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True,
              help="Skip this many tasks first (the next page: --offset LIMIT).")
@click.option("--json", "as_json", is_flag=True, help="Print the tasks as JSON.")
def list_tasks(status: str | None, limit: int, offset: int, as_json: bool) -> None:
    """List scheduled tasks (oldest first) with their status and next run.

    Shows a page of --limit tasks from --offset; when more exist, stderr says how to see them.
    """
    scheduler = _scheduler()
    tasks = scheduler.list_tasks(status, limit=limit or None, offset=offset)
    # A full page may hide more: count only then (a page never says nothing about the rest).
    total = (scheduler.count_tasks(status)
             if (limit and len(tasks) == limit) or (offset and not tasks) else None)
    end = offset + len(tasks)
    if total is not None and tasks and end < total:
        click.echo(f"showing tasks {offset + 1}-{end} of {total}; next page: --offset {end}",
                   err=True)
    elif total and not tasks:
        click.echo(f"no tasks from --offset {offset}: there are {total}", err=True)
    if as_json:
        echo_json([t.to_dict() for t in tasks])
        return
    if not tasks:
        if not offset:
            click.echo("no scheduled tasks" + (f" with status {status}" if status else "")
                       + "; add one with `jarvis schedule add`", err=True)
        return
    rows = []
    for task in tasks:
        data = task.to_dict()
        rows.append([task.id, task.status, data["next_run"] or "-", task.last_outcome or "-",
                     data["schedule"], one_line(task.prompt, 200)])
    echo_table(["ID", "STATUS", "NEXT RUN", "LAST", "SCHEDULE", "PROMPT"], rows)


@schedule.command("show")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
def show_task(task_id: str, as_json: bool) -> None:
    """Show one task in full."""
    data = _scheduler().get_task(task_id).to_dict()
    if as_json:
        echo_json(data)
        return
    for key, value in data.items():
        click.echo(visible(f"{key}: {value}"))  # a model may have written the prompt


def _status_command(name: str, method: str, help_text: str) -> None:
    @schedule.command(name, help=help_text)
    @click.argument("task_id")
    @click.option("--json", "as_json", is_flag=True, help="Print the task as JSON.")
    def command(task_id: str, as_json: bool) -> None:
        task = getattr(_scheduler(), method)(task_id)
        data = task.to_dict()
        if as_json:
            echo_json(data)
        else:
            click.echo(f"task {task.id} {task.status}; next run {data['next_run'] or '-'}")


_status_command("pause", "pause_task", "Pause task TASK_ID (kept; resume it later).")
_status_command("resume", "resume_task",
                "Resume paused task TASK_ID; its next run is recomputed from now.")
_status_command("cancel", "cancel_task", "Cancel task TASK_ID for good.")


@schedule.command("run")
@click.argument("task_id")
@click.option("--runner", default=None, metavar="MODULE:FACTORY",
              help="TaskRunner to use instead of the configured one.")
@click.option("--wait", is_flag=True, help="If a run of the task is going on, wait for it to "
              "end, then run (default: say so and exit 3).")
@click.option("--json", "as_json", is_flag=True, help="Print the run record as JSON.")
def run_task(task_id: str, runner: str | None, wait: bool, as_json: bool) -> None:
    """Run task TASK_ID now, in the foreground, and record the run.

    Prints the answer; exits 1 if the run failed. Never runs beside a run of the same task
    that is going on (e.g. in the daemon): exits 3 without running, or waits with --wait.
    """
    from jarvis.scheduler.schedules import iso

    scheduler = _scheduler(runner)
    scheduler.get_task(task_id)  # an unknown id fails before anything is said

    def waiting(busy: Any) -> None:
        click.echo(f"waiting for run #{busy.id} of task {task_id} (started "
                   f"{iso(busy.started_at)}) to end...", err=True)

    run = scheduler.run_now(task_id, wait=wait, on_wait=waiting)
    if as_json:
        echo_json(run.to_dict())
    elif run.status == "succeeded":
        click.echo(shown_data(run.answer or ""))
    if run.delivery:
        sent = run.delivery.get("status") == "delivered"
        click.echo(visible(f"delivery to {run.delivery.get('channel')}: "
                           f"{run.delivery.get('status')}"
                           + ("" if sent else f" after {run.delivery.get('attempts')} "
                              f"attempt(s): {run.delivery.get('error')}")), err=True)
    if run.status == "incomplete":  # no answer: the same code as ask's stop (and as busy)
        click.echo(visible(f"Error: run #{run.id} {run.error} ({run.error_type}; exit code 3)"),
                   err=True)
        sys.exit(3)
    if run.status == "parked":
        click.echo(visible(f"parked: {run.error}; `jarvis scheduler start` continues it once "
                           f"you answer"), err=True)
        sys.exit(1)
    if run.status != "succeeded":
        click.echo(visible(f"Error ({run.error_type or 'failed'}): {run.error}"), err=True)
        sys.exit(1)


@schedule.command("runs")
@click.argument("task_id", required=False)
@click.option("-n", "--limit", type=click.IntRange(1, 10_000), default=20, show_default=True,
              help="How many runs to show (newest first).")
@click.option("--run", "run_id", type=int, default=None, metavar="RUN_ID",
              help="Show this one run in full, with its run log entry (transcript, tool calls).")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def list_runs(task_id: str | None, limit: int, run_id: int | None, as_json: bool) -> None:
    """Show recorded runs (of TASK_ID, or of every task), newest first.

    With a shared PostgreSQL ledger this lists runs done on every machine; `--run RUN_ID`
    shows one with the run log entry its worker stored in the ledger.
    """
    if run_id is not None:
        _show_run(run_id, as_json)
        return
    config = load_cli_config()
    runs = _scheduler(config=config).list_runs(task_id, limit=limit)
    from jarvis.commands.approvals import approvals_of_runs

    asked = approvals_of_runs(config, [r.run_log_id for r in runs if r.parked_at is not None])
    if as_json:
        echo_json([dict(r.to_dict(), approvals=asked.get(r.run_log_id or "", []))
                   for r in runs])
        return
    if not runs:
        click.echo("no runs recorded yet", err=True)
        return
    rows = []
    for run in runs:
        data = run.to_dict()
        if run.status == "skipped":
            detail = run.error or ""
        elif run.status == "succeeded":
            detail = one_line(run.answer or "", 200)
        else:
            detail = f"{run.error_type}: {one_line(run.error or '', 200)}"
        took = f"{data['duration_seconds']:.2f}s" if data["duration_seconds"] is not None else "-"
        if run.delivery:
            detail = (f"[-> {run.delivery.get('channel')}: {run.delivery.get('status')}]  "
                      + detail)
        for item in asked.get(run.run_log_id or "", []):  # parked / approved / denied / expired
            detail += f"  [approval {item['id']}: {item['status']}]"
        rows.append([f"#{run.id}", run.task_id, run.status, data["scheduled_for"] or "-",
                     str(run.attempt), took, detail])
    echo_table(["RUN", "TASK", "STATUS", "SCHEDULED FOR", "TRY", "TOOK", "ANSWER OR ERROR"],
               rows, right=(4, 5))


def _run_log_entry(store: Any, config: Any, run_log_id: str | None) -> dict[str, Any] | None:
    """The run log entry of a run: from the shared ledger (runs done on workers), else the
    local run log."""
    if not run_log_id:
        return None
    get = getattr(store, "get_log_entry", None)
    entry = get(run_log_id) if get is not None else None
    if entry is not None:
        return entry
    from jarvis.errors import UserError
    from jarvis.runlog import RunLog, run_log_path

    try:
        return RunLog(run_log_path(config)).get(run_log_id)
    except UserError:
        return None


def _show_run(run_id: int, as_json: bool) -> None:
    config = load_cli_config()
    sched = _scheduler(config=config)
    run = sched.store.get_run(run_id)
    data = run.to_dict()
    data["log"] = _run_log_entry(sched.store, config, run.run_log_id)
    if as_json:
        echo_json(data)
        return
    log_entry = data.pop("log")
    for key, value in data.items():
        click.echo(visible(f"{key}: {value}"))  # a model may have written the prompt
    if log_entry is None:
        click.echo("log: - (no run log entry here" + (f" for {run.run_log_id})"
                                                       if run.run_log_id else ")"))
        return
    click.echo(f"log: {log_entry.get('id')} ({log_entry.get('status')}, "
               f"{len(log_entry.get('tool_calls') or [])} tool call(s))")
    for call in log_entry.get("tool_calls") or []:
        click.echo(visible(f"  tool {call.get('tool_name')}: "
                           f"{'ok' if call.get('success') else 'failed'}  "
                           f"{one_line(str(call.get('content') or ''), 60)}"))


def _sync_agents(sched: Any, config: Any) -> None:
    """Workspace agents with a `schedule` get their task before the daemon starts."""
    from jarvis.scheduler.agents import sync_agent_schedules

    report = sync_agent_schedules(sched, config)
    for label, names in (("scheduled", report.created), ("rescheduled", report.replaced),
                         ("unscheduled", report.cancelled)):
        for name in names:
            click.echo(f"agent {name}: {label}", err=True)
    for error in report.errors:
        click.echo(f"warning: {error}", err=True)


# --- the daemon ------------------------------------------------------------------------------
# `jarvis scheduler` is `jarvis schedule` under its other name (the daemon's command was
# `jarvis scheduler start`, the tasks' `jarvis schedule ...`; each got "No such command" for
# the other's).
scheduler = schedule


@schedule.command("start")
@click.option("--once", is_flag=True, help="Run what is due now, wait for it, and exit.")
@click.option("--runner", default=None, metavar="MODULE:FACTORY",
              help="TaskRunner to use instead of the configured one ([scheduler] runner); "
              "'celery' sends runs to `jarvis worker` processes.")
@click.option("--max-workers", "max_workers", type=click.IntRange(1, 64), default=None,
              help="Runs at the same time (default: [scheduler] max_workers).")
@click.option("--poll", "poll", type=click.FloatRange(0.05, 60), default=None, metavar="SECONDS",
              help="Longest sleep between checks for new tasks (default: [scheduler] poll_seconds).")
def start(once: bool, runner: str | None, max_workers: int | None, poll: float | None) -> None:
    """Run scheduled tasks in the foreground until SIGINT/SIGTERM.

    Logs go to stderr. Suitable for systemd or launchd (see docs/scheduler.md); with --once,
    for cron jobs and CI.
    """
    from jarvis.scheduler.schedules import iso

    log_scheduler_to_stderr("scheduler")
    config = load_cli_config()
    sched = _scheduler(runner, config, dispatch=True, max_workers=max_workers, poll_seconds=poll)
    if sched.dispatcher is not None:
        # An unreachable broker, or a visibility timeout a task outlasts: one line now (and
        # the ledger's connection closed: a caller in process goes on).
        try:
            sched.dispatcher.check(sched.store)
        except BaseException:
            sched.store.close()
            raise
    _sync_agents(sched, config)
    if not once:
        from jarvis.commands.listen import listen_beside

        stop_listening = listen_beside(config)  # [scheduler] listen = true
        try:
            sched.run_forever()
        finally:
            stop_listening()
        return
    if sched.dispatcher is not None:
        sent = sched.dispatch_due()
        click.echo(f"dispatched {len(sent)} run(s) to the workers")
        return
    runs = sched.run_due()
    if not runs:
        counts = sched.store.count_tasks()
        wake = sched.store.next_wake()
        if not counts.get("active"):
            click.echo("nothing to run: no active scheduled tasks (add one with "
                       "`jarvis schedule add`)")
        else:
            click.echo(f"nothing to run: {counts['active']} active task(s), none due; next run "
                       f"due at {iso(wake) or '-'}")
        return
    failed = sum(run.status not in ("succeeded", "incomplete") for run in runs)
    incomplete = sum(run.status == "incomplete" for run in runs)
    for run in runs:
        click.echo(visible(f"task {run.task_id}: run #{run.id} {run.status}"
                           + (f" ({run.error_type}: {one_line(run.error or '', 100)})"
                              if run.status != "succeeded" else "")
                           + (f" [delivery to {run.delivery.get('channel')}: "
                              f"{run.delivery.get('status')}]" if run.delivery else "")))
    click.echo(f"ran {len(runs)} task run(s), {failed} failed"
               + (f", {incomplete} stopped without an answer" if incomplete else ""), err=True)
    # For cron and CI: 1 when a run failed, 3 (as `jarvis ask`) when one stopped without an
    # answer and none failed.
    if failed:
        sys.exit(1)
    if incomplete:
        sys.exit(3)
