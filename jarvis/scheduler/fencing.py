"""Fencing scheduled runs: the RunFence (jarvis.tools.fence) a worker or daemon gives each run
it executes, how the run gets it, and `--notify` deliveries that are never sent twice.

- `ledger_fence(store, run, owner, lease_seconds)`: the run's fence on the ledger. Its lease
  check is the renew itself (one indexed UPDATE of the run's row, compare-and-set on (id,
  epoch, owner, running)), made before every engine and tool call; its effect records live in
  the same store, so a retried attempt on any machine finds what an earlier one sent.
- `start_run` (jarvis.scheduler.runner) runs the TaskRunner with the fence set for its thread;
  `current_fence()` reads it (SdkRunner passes it to `ask_full(fence=...)`; a custom runner
  may do the same).
- `deliver_once(store, task, run, notifier)`: a finished run sent to its task's channel under
  an effect record keyed by the run (occurrence and attempt): recorded before, confirmed
  after; a key recorded already is never sent again.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jarvis.scheduler.records import Run, Task
    from jarvis.tools.fence import RunFence

log = logging.getLogger("jarvis.scheduler")

_CURRENT: contextvars.ContextVar[RunFence | None] = contextvars.ContextVar(
    "jarvis_run_fence", default=None)


def current_fence() -> RunFence | None:
    """The fence of the scheduled run executing on this thread (None elsewhere)."""
    return _CURRENT.get()


def set_fence(fence: RunFence | None) -> None:
    """Make `fence` the current one for this thread (start_run does, on the run's thread)."""
    _CURRENT.set(fence)


def ledger_fence(store: Any, run: Run, owner: str, lease_seconds: float,
                 clock: Callable[[], float] | None = None) -> RunFence:
    """The fence of `run`, held by `owner` on `store` (a scheduler ledger, SQLite or
    PostgreSQL): each check renews the lease for `lease_seconds` and fails once the run is no
    longer (id, epoch, owner, running); an unanswered check is retried for the lease's length."""
    from jarvis.tools.fence import EffectLedger, RunFence

    def hold() -> bool:
        if clock is not None:  # the local daemon's clock (SQLite leases are on it)
            return bool(store.renew(run.id, run.epoch, owner, lease_seconds, now=clock()))
        return bool(store.renew(run.id, run.epoch, owner, lease_seconds))

    # A ledger of another make without `renew` gives its runs keys and no lease check.
    renews, records = _ledger_kind(store, EffectLedger)
    return RunFence(idempotency_key=run.idempotency_key, attempt=run.attempt, epoch=run.epoch,
                    run_id=run.id, task_id=run.task_id, owner=owner,
                    hold=hold if renews else None, effects=store if records else None,
                    patience=lease_seconds)


_KINDS: dict[type, tuple[bool, bool]] = {}


def _ledger_kind(store: Any, effect_ledger: type) -> tuple[bool, bool]:
    """(has `renew`, is an EffectLedger) of `store`, asked once per class: the protocol's
    isinstance walks its attributes on every call (a tenth of a local run's cost). A store
    with such methods set on the instance itself is asked each time."""
    own = getattr(store, "__dict__", None)
    if own and any(name in own for name in ("renew", "begin_effect", "finish_effect")):
        return hasattr(store, "renew"), isinstance(store, effect_ledger)
    kind = _KINDS.get(type(store))
    if kind is None:
        kind = _KINDS[type(store)] = (hasattr(store, "renew"), isinstance(store, effect_ledger))
    return kind


def deliver_once(store: Any, task: Task, run: Run,
                 notifier: Callable[[Any, Any], dict[str, Any] | None]) -> dict[str, Any] | None:
    """Send `run` to `task.notify` through `notifier` unless its delivery was begun before
    (by this or another process): the effect record is written before the send and confirmed
    after. A delivery whose confirmation is missing (its process died in between) is not sent
    again: it errs toward a message lost, never one received twice. Returns the delivery
    record, with its `key`."""
    from jarvis.tools.fence import EffectLedger, RunFence

    effects = store if isinstance(store, EffectLedger) else None
    fence = RunFence(idempotency_key=run.idempotency_key, attempt=run.attempt, epoch=run.epoch,
                     run_id=run.id, task_id=run.task_id, effects=effects)
    try:
        # One delivery per finished attempt: each attempt's outcome is its own message.
        gate = fence.begin("notify", f"channel {task.notify}, attempt {run.attempt}")
    except Exception as exc:  # noqa: BLE001 - the ledger did not answer: do not risk a double
        return {"channel": task.notify, "status": "not_sent", "attempts": 0, "at": time.time(),
                "error": f"not delivered: its delivery could not be recorded first "
                         f"({type(exc).__name__}: {exc})"}
    if not gate.go:
        prior = gate.prior
        log.warning("task %s: run %d: delivery to channel %s not sent again (%s)", task.id,
                    run.id, task.notify, prior.status if prior else "?")
        sent = prior is not None and prior.status == "sent"
        return {"channel": task.notify, "key": gate.key, "attempts": 0, "at": time.time(),
                "status": "delivered" if sent else "not_sent",
                "error": None if sent else gate.describe_prior(),
                "note": gate.describe_prior() if sent else None}
    try:
        record = notifier(task, run)
    except Exception as exc:  # a broken notifier must not take the run or daemon down
        record = {"channel": task.notify, "status": "failed", "attempts": 0,
                  "error": f"{type(exc).__name__}: {exc}", "at": time.time()}
    if not isinstance(record, dict):
        gate.finish(True, "sent by a custom notifier")
        return record
    gate.finish(record.get("status") == "delivered", record.get("error"))
    return dict(record, key=gate.key)
