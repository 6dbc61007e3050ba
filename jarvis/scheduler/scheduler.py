"""TaskScheduler: the operations on scheduled tasks, and the daemon loop that runs them.

    store = SchedulerStore(db_path="~/.jarvis/scheduler.db")
    scheduler = TaskScheduler(store=store, system=Jarvis())
    task = scheduler.create_task("Summarize the news", "cron", "0 8 * * *")
    scheduler.run_forever()          # foreground daemon (what `jarvis scheduler start` runs)

The class is assembled here from its parts: the task operations
(jarvis.scheduler.operations), the daemon loop that claims, runs and records what is due
(jarvis.scheduler.daemon), the delivery of finished runs to channels
(jarvis.scheduler.delivery) and the runs that wait for the person (jarvis.scheduler.parked);
`__init__` below sets the state they share.

With a `dispatcher` (jarvis.scheduler.dispatch, e.g. Celery workers) injected, the daemon runs
nothing itself: it claims due runs as "dispatched" in the shared ledger and sends them, and
its reaper sends again what no worker started and re-runs what a dead worker left (on_crash).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from jarvis.errors import UserError
from jarvis.scheduler.daemon import DISPATCH_BATCH as DISPATCH_BATCH
from jarvis.scheduler.daemon import PRUNE_EVERY_SECONDS as PRUNE_EVERY_SECONDS
from jarvis.scheduler.daemon import SchedulerDaemon
from jarvis.scheduler.delivery import ResultDelivery
from jarvis.scheduler.ledger import SchedulerLedger
from jarvis.scheduler.operations import MAX_PROMPT_CHARS as MAX_PROMPT_CHARS
from jarvis.scheduler.operations import MAX_RETRIES as MAX_RETRIES
from jarvis.scheduler.operations import MAX_TIMEOUT_SECONDS as MAX_TIMEOUT_SECONDS
from jarvis.scheduler.operations import MAX_TOOLS as MAX_TOOLS
from jarvis.scheduler.operations import TaskOperations
from jarvis.scheduler.parked import ParkedRuns
from jarvis.scheduler.records import Run, Task
from jarvis.scheduler.runner import FunctionRunner, SdkRunner, TaskRunner
from jarvis.scheduler.store import owner_id


def _settings(config: Any) -> Any:
    if config is None:
        from jarvis.core.config import SchedulerConfig

        return SchedulerConfig()
    return getattr(config, "scheduler", config)


class TaskScheduler(TaskOperations, SchedulerDaemon, ResultDelivery, ParkedRuns):
    """Create, inspect and run scheduled tasks; `run_forever()` is the daemon."""

    def __init__(self, store: SchedulerLedger | None = None, system: Any = None, *,
                 runner: TaskRunner | Callable[..., Any] | None = None, config: Any = None,
                 dispatcher: Any = None,
                 clock: Callable[[], float] = time.time, max_workers: int | None = None,
                 poll_seconds: float | None = None, lease_seconds: float | None = None,
                 grace_seconds: float | None = None,
                 shutdown_timeout: float | None = None,
                 shutdown_delivery_seconds: float | None = None,
                 poll_interval: float | None = None,
                 notifier: Callable[[Task, Run], dict[str, Any] | None] | None = None,
                 bus: Any = None) -> None:
        # SCHEDULER_TASK_START / SCHEDULER_TASK_END of the runs this scheduler executes.
        self.bus = bus
        if poll_interval is not None:  # OpenJarvis's name for poll_seconds
            if poll_seconds is not None and poll_seconds != poll_interval:
                raise UserError("pass poll_seconds or poll_interval (the same setting), not both")
            poll_seconds = poll_interval
        if config is None and system is not None:
            config = getattr(system, "config", None)
        self.config = config
        # Sends a finished run of a task with `notify` to its channel and returns the delivery
        # record; default: jarvis.channels.delivery.ChannelNotifier(config), made when needed.
        self.notifier = notifier
        settings = _settings(config)
        if store is None:
            from jarvis.scheduler.ledger import open_store

            store = open_store(config if config is not None else None)
        self.store = store
        if dispatcher is not None:
            from jarvis.scheduler.ledger import DispatchLedger

            if not isinstance(store, DispatchLedger):
                raise UserError("running tasks on workers needs a ledger they share: set "
                                "[scheduler] store = \"postgresql://user@host:port/db\"")
        # None: runs execute on this process's threads (the local runner).
        self.dispatcher = dispatcher
        self.system = system
        if runner is None:
            runner = SdkRunner(system)
        elif not isinstance(runner, TaskRunner):
            runner = FunctionRunner(runner)
        self.runner: TaskRunner = runner
        self.clock = clock
        self.max_workers = max_workers or settings.max_workers
        self.poll_seconds = poll_seconds if poll_seconds is not None else settings.poll_seconds
        self.lease_seconds = lease_seconds if lease_seconds is not None else settings.lease_seconds
        self.grace_seconds = grace_seconds if grace_seconds is not None else settings.grace_seconds
        self.shutdown_timeout = (shutdown_timeout if shutdown_timeout is not None
                                 else settings.shutdown_timeout)
        # At shutdown or the end of --once, how long the deliveries of runs recorded then may
        # take (a channel's retries can take minutes); one not done in time is recorded as
        # "not_sent" with the reason, never left silent.
        self.shutdown_delivery_seconds = (
            shutdown_delivery_seconds if shutdown_delivery_seconds is not None
            else getattr(settings, "shutdown_delivery_seconds", 10.0))
        self.default_timeout = settings.default_timeout
        # What a model may schedule (the schedule_task tool); a person is not limited by these.
        self.model_max_active_tasks = settings.model_max_active_tasks
        self.model_min_interval_seconds = settings.model_min_interval_seconds
        self.model_max_prompt_chars = settings.model_max_prompt_chars
        self.keep_runs = getattr(settings, "keep_runs", None)  # retention of finished runs
        self.owner = owner_id()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._active: dict[int, threading.Thread] = {}
        self._last_wake: float | None = None  # the daemon's last next_wake (daemon._tick)
        self._overdue: set[int] = set()  # runs past their timeout whose call still runs
        # Runs whose call runs on the daemon's own job (daemon._execute_here) -> (monotonic
        # deadline, task): the loop marks them overdue at their deadline (daemon._watch).
        self._deadlines: dict[int, tuple[float, Task]] = {}
        self._given_up: set[int] = set()  # runs recorded before their call ended
        # Runs whose _execute is under way. Each of these sets only ever holds such runs (or
        # runs delivering): _execute's end clears its run from all of them, and _give_up
        # marks only a run still executing, so a long-lived process keeps no stale entries.
        self._executing: dict[int, threading.Thread | None] = {}  # run id -> its call
        # Calls recorded and left behind (given up at shutdown or the end of a --once pass)
        # that still run: Python cannot stop them, so each keeps holding a worker until it
        # ends. At most max_workers of them can exist: nothing new is claimed while they hold
        # every worker, so a long-lived process cannot pile up hung calls.
        self._orphans: dict[int, threading.Thread] = {}
        self._told_orphans = False
        self._delivering: set[int] = set()  # runs whose delivery to a channel is under way
        # Serialises writing a delivery record with marking one "not_sent" at shutdown, so
        # a delivery that ends at that moment is never overwritten by "not sent".
        self._delivery_lock = threading.Lock()
        self._active_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.abandoned = 0  # runs whose call outlived their timeout
