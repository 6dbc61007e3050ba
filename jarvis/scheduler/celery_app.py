"""The Celery side of scheduled runs: the app, its settings, and the one task workers run.

A message is (run id, attempt, epoch) under a deterministic task id; what the run is and
whether it may still run is in the ledger, never in the message. Settings, and why:
- `task_acks_late` + `task_reject_on_worker_lost`: a message is acknowledged after the run,
  so a worker that dies mid-run leaves it to be delivered again (then dropped by the ledger's
  compare-and-set if the run was already started: the ledger's reaper decides re-runs);
- `worker_prefetch_multiplier = 1`: a worker holds no more messages than it can run;
- `visibility_timeout` above the longest task timeout: Redis does not hand a running task's
  message to a second worker while the first still works on it;
- a hard time limit per message (the task's timeout plus a margin): a run stuck in code that
  ignores its timeout is killed with its process, and its lease expires.
celery is imported only here, and only by `jarvis worker` and a daemon with runner "celery".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jarvis.errors import UserError

TASK_NAME = "jarvis.scheduler.run"
HARD_LIMIT_MARGIN = 60.0  # seconds past a task's own timeout before its process is killed
# What a message may carry (the ledger's column types): a forged one is refused before any
# database work. run id: bigserial; attempt and epoch: integer.
MAX_RUN_ID = 2**63 - 1
MAX_SMALL = 2**31 - 1
MAX_LOGGED_CHARS = 300  # of a refused message's args, in the worker's log line


def task_id_for(run_id: int, epoch: int) -> str:
    """The deterministic Celery task id of one dispatch of a run."""
    return f"jarvis-run-{run_id}-e{epoch}"


def default_visibility_timeout() -> float:
    from jarvis.scheduler.operations import MAX_TIMEOUT_SECONDS

    return MAX_TIMEOUT_SECONDS + 2 * HARD_LIMIT_MARGIN


def visibility_seconds(configured: float | None) -> float:
    """The Redis visibility timeout in force: the configured one, else the default."""
    return float(int(configured or default_visibility_timeout()))


def check_visibility(configured: float | None, store: Any) -> None:
    """UserError when a task on the ledger may run longer than Redis keeps its message
    invisible: Redis would hand the message to a second worker while the first still runs it
    (dropped there by the ledger, but silently, and holding a worker). Checked when a worker
    or a dispatching daemon starts."""
    limit = visibility_seconds(configured)
    longest = store.longest_timeout()
    if longest is None:
        return
    task_id, seconds = longest
    if seconds + HARD_LIMIT_MARGIN > limit:
        raise UserError(f"[scheduler.celery] visibility_timeout = {limit:g} s is shorter than "
                        f"task {task_id}'s timeout ({seconds:g} s) plus the {HARD_LIMIT_MARGIN:g} "
                        f"s hard-limit margin: Redis would hand its message to a second worker "
                        f"while the first still runs it. Raise visibility_timeout to at least "
                        f"{seconds + HARD_LIMIT_MARGIN:g} (or remove it: the default is "
                        f"{default_visibility_timeout():g} s), or lower that task's timeout")


def make_app(broker: str, *, queue: str = "jarvis", visibility_timeout: float | None = None,
             execute: Callable[[int, int, int], str] | None = None) -> Any:
    """A Celery app for jarvis runs on `broker` (a redis:// URL). `execute(run_id, attempt,
    epoch)` runs one message's run and returns its status: `jarvis worker` passes its own
    (jarvis.scheduler.worker); an app that only sends (the daemon) has none."""
    try:
        from celery import Celery
    except ImportError:
        raise UserError("running scheduled tasks on Celery needs celery and redis: "
                        "pip install 'jarvis[celery]'") from None
    if not broker:
        raise UserError("[scheduler] runner = \"celery\" needs a broker: set [scheduler.celery] "
                        "broker = \"redis://host:6379/0\" (or JARVIS_CELERY_BROKER)")
    query = broker.partition("?")[2]
    if any(pair.split("=", 1)[0].lower() == "password" for pair in query.split("&")):
        # kombu fails on it with "dict() got multiple values for keyword argument 'password'".
        raise UserError("put the broker's password in the URL's user part "
                        "(redis://:PASSWORD@host:6379/0), not in ?password= "
                        "([scheduler.celery] broker)")
    app = Celery("jarvis", broker=broker, set_as_current=False)
    if broker.split("://", 1)[0].lower() in ("redis", "rediss"):
        # kombu's Redis transport, with replies over MAX_MESSAGE_BYTES discarded unread.
        from jarvis.scheduler.broker import Transport

        app.conf.broker_transport = Transport
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": int(visibility_seconds(visibility_timeout))},
        task_default_queue=queue,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_time_limit=int(default_visibility_timeout()),  # a message without its own limit
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        enable_utc=True,
    )
    # shared=False: the task is this app's own, with this app's `execute` (a shared task would
    # be bound to every app of the process with the callable of the first one made).
    app.task(name=TASK_NAME, ignore_result=True, bind=True, shared=False,
             Request=_request_class())(_task_running(execute))
    # Celery registers its own tasks too (celery.starmap, celery.chunks, celery.chord_unlock,
    # ...): a message naming one would make a worker call jarvis's task many times from one
    # message, or send new messages for someone who can write to the broker. A jarvis worker
    # runs only its own task; any other name is refused as unregistered.
    for name in [n for n in app.tasks if n != TASK_NAME]:
        app.tasks.unregister(name)
    return app


def _request_class() -> Any:
    """Celery's Request without a message's `eta`: jarvis never sends one (a run is due when
    the daemon sends it), and a worker keeps every message with an eta in memory until then
    (prefetch does not bound them), unacknowledged. A forged message with an eta a year away,
    sent many times, would fill the worker's memory; without it, it is handled (refused, or
    dropped by the ledger) at once."""
    from celery.worker.request import Request

    class JarvisRequest(Request):
        @property
        def eta(self) -> None:
            return None

    return JarvisRequest


def check_broker(app: Any, broker: str, *, timeout: float = 5.0) -> None:
    """Raise a one-line UserError when the broker cannot be reached now (a worker or daemon
    that starts anyway would retry silently, forever, as Celery does)."""
    from jarvis.scheduler.addresses import redact, redact_error

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0,
                                   timeout=timeout)
    except Exception as exc:  # kombu's OperationalError, a bad URL, DNS, ...
        text = redact_error(" ".join(str(exc).split()) or type(exc).__name__, broker)
        raise UserError(f"cannot reach the Celery broker {redact(broker)}: {text} (is Redis "
                        f"running there? [scheduler.celery] broker)") from None


# Celery's consumer logs a message it cannot take (an unregistered task name, pickle or other
# refused content, a body that does not decode) with a traceback and the whole body: a forged
# 100 MB message would be copied into the log. Its first line says what happened.
_CONSUMER_LOGGER = "celery.worker.consumer.consumer"
MAX_CONSUMER_LINE = 500


class _OneLine:
    """A logging filter: a record as its first line, cut, without a traceback."""

    def filter(self, record: Any) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that does not format: say so, briefly
            text = str(record.msg)
        line = (text.strip().splitlines() or [""])[0]
        if len(line) > MAX_CONSUMER_LINE:
            line = line[:MAX_CONSUMER_LINE] + "..."
        if record.exc_info and record.exc_info[1] is not None and "decode" in line.lower():
            line += f" ({type(record.exc_info[1]).__name__})"
        record.msg, record.args = line, None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def quiet_refused_messages() -> None:
    """One cut line, no traceback, for each message the worker's consumer refuses."""
    import logging

    target = logging.getLogger(_CONSUMER_LOGGER)
    if not any(isinstance(f, _OneLine) for f in target.filters):
        target.addFilter(_OneLine())


def message_problem(args: Any, kwargs: Any, request: Any = None) -> str | None:
    """Why a message is not one jarvis sends (None when it is): exactly (run id, attempt,
    epoch) as positive integers in the ledger's ranges, no keyword arguments, and no linked
    tasks (callbacks, errbacks, chain, chord), which Celery would otherwise send on."""
    if kwargs:
        return "keyword arguments"
    if not isinstance(args, (list, tuple)) or len(args) != 3:
        return f"{len(args) if isinstance(args, (list, tuple)) else 'no'} arguments, not 3"
    for name, value, top in zip(("run id", "attempt", "epoch"), args,
                                (MAX_RUN_ID, MAX_SMALL, MAX_SMALL), strict=True):
        if type(value) is not int:  # bool, float, str, list... are refused, never coerced
            return f"the {name} is a {type(value).__name__}, not an integer"
        if not 1 <= value <= top:
            return f"the {name} is out of range"
    for link in ("callbacks", "errbacks", "chain", "chord"):
        if getattr(request, link, None):
            return f"linked tasks ({link})"
    return None


def _task_running(execute: Callable[[int, int, int], str] | None) -> Callable[..., str]:
    """The Celery task, running each message through `execute`."""

    def _run_task(self: Any, *args: Any, **kwargs: Any) -> str:
        """The Celery task: executes one dispatched run through this process's worker. A
        message of any other shape (forged, or from another program on the broker) is refused
        with one log line, before any work, and acknowledged: it never runs, and is never sent
        on."""
        import logging

        from celery.exceptions import Ignore

        problem = message_problem(args, kwargs, self.request)
        if problem is not None:
            shown = repr((args, kwargs))
            if len(shown) > MAX_LOGGED_CHARS:
                shown = shown[:MAX_LOGGED_CHARS] + f"... ({len(shown)} characters)"
            logging.getLogger("jarvis.scheduler.worker").warning(
                "refused message %s: not a message jarvis sends (%s): %s", self.request.id,
                problem, shown)
            raise Ignore()
        if execute is None:
            raise RuntimeError("this process has no jarvis worker (start it with `jarvis worker`)")
        run_id, attempt, epoch = args
        return execute(run_id, attempt, epoch)

    return _run_task
