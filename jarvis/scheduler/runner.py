"""The execution seam: how one occurrence of a task is run.

The scheduler hands every claimed run to a TaskRunner and records the RunOutcome it returns.
That is the only place work happens, so a distributed queue can replace the local pool by
implementing this protocol (configure it with `[scheduler] runner = "module:factory"` or
`jarvis scheduler start --runner module:factory`).

The default, SdkRunner, runs the prompt exactly as `jarvis ask` does:
`system.ask_full(prompt, agent=..., tools=..., approved_tools=..., source="scheduler")`. The
scheduler does not build that system itself (it sits below the SDK): the SDK passes itself,
`jarvis scheduler start` passes a factory that makes one.
Tools that require confirmation are denied unless the task named them in `approved_tools`.
"""

from __future__ import annotations

import contextlib
import importlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jarvis.errors import UserError
from jarvis.scheduler.records import Run, Task


@dataclass(slots=True)
class RunOutcome:
    """What a run produced: an answer, or an error (with its kind). A run that ended without
    an answer on a limit is not a success either: its error_type is one of
    records.INCOMPLETE_KINDS ("max_turns", "loop_guard") and it is recorded "incomplete"."""

    success: bool
    answer: str | None = None
    error: str | None = None
    error_type: str | None = None
    run_log_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # The run stopped before calls that need the person (jarvis.approvals): these requests.
    # It is recorded "parked", and a continuation is claimed once they are answered.
    parked: list[str] = field(default_factory=list)

    @classmethod
    def failed(cls, error: str, error_type: str = "execution", **metadata: Any) -> RunOutcome:
        return cls(success=False, error=error, error_type=error_type, metadata=metadata)


@runtime_checkable
class TaskRunner(Protocol):
    """Runs one occurrence of a task. May raise: the scheduler records that as a failure.

    A runner that can park runs (the SdkRunner) also has `resume(task, occurrence)`: it
    continues the occurrence's parked run (`occurrence.parked_at` is set) where it stopped."""

    def run(self, task: Task, occurrence: Run) -> RunOutcome: ...


class FunctionRunner:
    """A TaskRunner from a plain function `fn(task, occurrence) -> RunOutcome | str`."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def run(self, task: Task, occurrence: Run) -> RunOutcome:
        value = self.fn(task, occurrence)
        if isinstance(value, RunOutcome):
            return value
        return RunOutcome(success=True, answer=None if value is None else str(value))


class SdkRunner:
    """Runs the prompt through the SDK, the same path as `jarvis ask`.

    With `system` (a Jarvis instance) every run uses it. Without, `factory` builds one on
    first use, reused, one per concurrent run: `factory(workspace)` gets the config.toml of the
    workspace the task was created in (`task.workspace`, None without one), so a run uses the
    workspace's tools and agents wherever the daemon was started; a factory that takes no
    argument (`lambda: Jarvis(config=config)`) is called with none.
    """

    def __init__(self, system: Any = None, *, factory: Callable[..., Any] | None = None,
                 capture_log: bool = False) -> None:
        self.system = system
        self.factory = factory
        # A worker stores the run log entry in the shared ledger: read it back after the run.
        self.capture_log = capture_log
        self._idle: dict[str, queue.SimpleQueue[Any]] = {}  # workspace -> idle systems
        self._lock = threading.Lock()

    def _pool(self, workspace: str | None) -> queue.SimpleQueue[Any]:
        with self._lock:
            return self._idle.setdefault(workspace or "", queue.SimpleQueue())

    def _acquire(self, workspace: str | None = None) -> Any:
        if self.system is not None:
            return self.system
        try:
            return self._pool(workspace).get_nowait()
        except queue.Empty:
            if self.factory is None:
                raise UserError("this scheduler has nothing to run prompts with: pass "
                                "TaskScheduler(system=Jarvis(...)) or a runner") from None
            if _takes_an_argument(self.factory):
                return self.factory(workspace)
            return self.factory()

    def _release(self, system: Any, workspace: str | None = None) -> None:
        if system is not self.system:
            self._pool(workspace).put(system)

    def run(self, task: Task, occurrence: Run) -> RunOutcome:
        return self._ask(task, occurrence, lambda system, fenced: system.ask_full(
            task.prompt, agent=task.agent or None, tools=task_tools(task),
            approved_tools=list(task.approved_tools), source="scheduler",
            run_metadata=run_metadata(occurrence), trust=task_trust(task),
            on_approval="defer", **fenced, **task_budget(task)))

    def resume(self, task: Task, occurrence: Run) -> RunOutcome:
        """Continue the occurrence's parked run where it stopped (the ledger gave this
        process its continuation; the approvals store hands over the state, once)."""
        return self._ask(task, occurrence, lambda system, fenced: system.resume(
            str(occurrence.run_log_id), _scheduled=True, **fenced))

    def _ask(self, task: Task, occurrence: Run,
             ask: Callable[[Any, dict[str, Any]], Any]) -> RunOutcome:
        workspace = getattr(task, "workspace", None)  # its runs use the task's workspace
        system = self._acquire(workspace)
        # A run that fails mid-way is still in the run log; remember its id (from RUN_START,
        # published on this thread) so the failed run record links to it.
        started: list[str] = []
        me = threading.get_ident()

        def on_start(event: Any) -> None:
            if threading.get_ident() == me and event.data.get("id"):
                started.append(str(event.data["id"]))

        bus = getattr(system, "bus", None)
        if bus is not None:
            from jarvis.core.events import EventType

            bus.subscribe(EventType.RUN_START, on_start)
        from jarvis.scheduler.fencing import current_fence

        # The run's fence (its worker's or daemon's): checked before every engine and tool
        # call, and its keys for side effects. Passed only when there is one.
        fenced = {"fence": fence} if (fence := current_fence()) is not None else {}
        try:
            result = ask(system, fenced)
        except Exception as exc:
            if started:
                with contextlib.suppress(AttributeError, TypeError):
                    exc.run_log_id = started[-1]  # read by the scheduler when recording it
            raise
        finally:
            if bus is not None:
                bus.unsubscribe(EventType.RUN_START, on_start)
            if not self.capture_log:
                self._release(system, workspace)
        try:
            outcome = outcome_from_result(result)
            runlog = getattr(system, "runlog", None) if self.capture_log else None
            if runlog is not None and outcome.run_log_id:
                outcome.metadata["log_entry"] = runlog.get(outcome.run_log_id)
        finally:
            if self.capture_log:
                self._release(system, workspace)
        return outcome


def _takes_an_argument(fn: Callable[..., Any]) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in params)


def start_run(runner: TaskRunner, task: Task, run: Run, name: str,
              fence: Any = None, pool: Any = None) -> tuple[Any, dict[str, Any]]:
    """`runner.run(task, run)` on a daemon thread named `name`, started (a new one, or one of
    `pool`, a jarvis.scheduler.threads.ThreadPool), with `fence` (the run's RunFence) as that
    thread's current fence; the box gets its "outcome", or the "error" it raised (recorded,
    never allowed to stop a daemon or worker). Python cannot stop a thread: the caller waits
    on the returned handle (is_alive, join) with its own lease and timeout."""
    box: dict[str, Any] = {}

    def call() -> None:
        _call(runner, task, run, fence, box)

    if pool is not None:
        return pool.submit(call, name), box
    thread = threading.Thread(target=call, daemon=True, name=name)
    thread.start()
    return thread, box


def run_here(runner: TaskRunner, task: Task, run: Run, fence: Any = None) -> dict[str, Any]:
    """`runner.run(task, run)` on this thread (a daemon's pooled job, whose context is its
    own), with `fence` as its current fence; returns the box, as `start_run` fills it."""
    box: dict[str, Any] = {}
    _call(runner, task, run, fence, box)
    return box


def _call(runner: TaskRunner, task: Task, run: Run, fence: Any, box: dict[str, Any]) -> None:
    if fence is not None:
        from jarvis.scheduler.fencing import set_fence

        set_fence(fence)
    # A continuation of a parked run resumes it (the runner's `resume`), else it runs anew.
    resume = getattr(runner, "resume", None) if run.parked_at is not None else None
    try:
        box["outcome"] = resume(task, run) if resume is not None else runner.run(task, run)
    except BaseException as exc:  # noqa: BLE001 - the caller records it
        box["error"] = exc


def task_tools(task: Task) -> list[str] | None:
    """The tools a run of `task` gets: the ones it names; for a task a person created, none
    named means the agent's or configured defaults; a task a model created gets exactly what
    it names, possibly nothing (never the defaults, which may be more than its creator had)."""
    if task.created_by == "model":
        return list(task.tools)
    return list(task.tools) or None


def task_budget(task: Task) -> dict[str, Any]:
    """`budget=` for ask_full when the task has one (jarvis.tools.budget); else nothing, so a
    custom system without budgets still runs it."""
    budget = task.metadata.get("budget") if isinstance(task.metadata, dict) else None
    return {"budget": budget} if budget else {}


def task_trust(task: Task) -> Any:
    """The RunTrust a run of `task` starts with (docs/trust.md), or None for a task a person
    created (its prompt is the person's own words, as an ask's is). A task a model created:
    its prompt is not the person's words, and a task born in a tainted run (or one that
    read private data) starts its every run so."""
    if task.created_by != "model" and not task.trust:
        return None
    from jarvis.trust.run import RunTrust

    trust = RunTrust()
    born = task.trust or {}
    if task.created_by == "model" and not task.trust:
        born = {"tainted": True, "private": True}  # created before this was recorded
    creator = born.get("run_id") or "an earlier run"
    if born.get("tainted"):
        trust.mark_tainted(f"task {task.id} was created by {creator}, which had read untrusted "
                           f"content", tool="schedule_task")
    if born.get("private"):
        trust.mark_private(f"task {task.id} was created by {creator}, which held private data",
                           tool="schedule_task")
    return trust


def run_metadata(occurrence: Run) -> dict[str, Any]:
    """What a scheduled run tells its tools and agent about itself (ToolContext.metadata and
    the executor's metadata): the idempotency key of the occurrence and the attempt number,
    so a tool with external effects can de-duplicate a re-run."""
    return {"scheduled_run": {
        "task_id": occurrence.task_id, "run_id": occurrence.id,
        "idempotency_key": occurrence.idempotency_key, "attempt": occurrence.attempt,
        "epoch": occurrence.epoch, "scheduled_for": occurrence.to_dict()["scheduled_for"],
        "trigger": occurrence.trigger}}


def outcome_from_result(result: Any) -> RunOutcome:
    """A RunOutcome from an ask_full() dict: content is the answer, run_id the run log id."""
    if not isinstance(result, dict):
        return RunOutcome(success=True, answer=str(result))
    run_id = result.get("run_id")
    metadata = {k: result[k] for k in ("model", "engine", "turns", "usage") if k in result}
    failed_tools = [r.get("tool_name") for r in result.get("tool_results") or []
                    if isinstance(r, dict) and not r.get("success", True)]
    if failed_tools:
        metadata["failed_tools"] = failed_tools
    if result.get("status") == "parked":
        waiting = [a.get("id") for a in result.get("pending_approvals") or []]
        where = "; ".join(f"{a.get('tool')} -> {a.get('where')}"
                          for a in result.get("pending_approvals") or [])[:500]
        return RunOutcome(success=False, error=f"waiting for your approval of {where} "
                          f"(`jarvis approvals show {' / '.join(waiting)}`)", error_type="parked",
                          run_log_id=None if run_id is None else str(run_id), metadata=metadata,
                          parked=[str(a) for a in waiting])
    if result.get("status") == "incomplete":
        # No answer: recorded "incomplete" (its kind is the error_type), never retried.
        return RunOutcome(success=False, error=str(result.get("stop_message") or "no answer"),
                          error_type=str(result.get("stop_reason") or "max_turns"),
                          run_log_id=None if run_id is None else str(run_id), metadata=metadata)
    return RunOutcome(success=True, answer=str(result.get("content") or ""),
                      run_log_id=None if run_id is None else str(run_id), metadata=metadata)


def load_runner(target: str) -> TaskRunner:
    """Build a TaskRunner from "module:attribute": a TaskRunner class or factory (called
    with no arguments), an instance, or a plain function `fn(task, occurrence)`."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise UserError(f"runner {target!r} must be written module:attribute, "
                        f"e.g. mypackage.runners:QueueRunner")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"cannot import runner module {module_name!r}: {exc}") from None
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise UserError(f"module {module_name!r} has no attribute {attr!r} (runner {target!r})") from None
    if isinstance(value, TaskRunner) and not isinstance(value, type):
        return value
    if isinstance(value, type):
        made = value()
        if not isinstance(made, TaskRunner):
            raise UserError(f"runner {target!r} has no run(task, occurrence) method")
        return made
    if callable(value):
        try:
            import inspect

            params = len(inspect.signature(value).parameters)
        except (TypeError, ValueError):
            params = 2
        if params == 0:
            made = value()
            if isinstance(made, TaskRunner):
                return made
            raise UserError(f"runner factory {target!r} did not return a TaskRunner")
        return FunctionRunner(value)
    raise UserError(f"runner {target!r} is not a TaskRunner, a factory or a function")
