"""The fence of a scheduled run: what keeps a run that lost its lease from acting, and lets
its side effects happen once however often the run is retried.

The scheduler (jarvis.scheduler.fencing) gives each scheduled run a RunFence. It reaches the
agent, the executor and every tool's context (`context.fence`):

- `check()` runs before every engine call and every tool call: it confirms the run's lease on
  the ledger (the renew itself, one indexed write) and raises RunFenced once the lease is
  lost (a stalled worker whose run was recorded as crashed and handed to a retry), so a fenced
  run makes no further call. A call already under way is not stopped by it.
- `idempotency_key`, `attempt`, `epoch` name the occurrence, the attempt and the dispatch.
- `effect_key(tool, target)` names one side effect: the occurrence, the tool, the target (an
  HTTP method and URL without its query, a channel) and the call's position among this run's
  calls of that tool to that target. It is the same in every attempt of the occurrence, so a
  retried attempt's first POST to /orders carries the key of the first attempt's.
- `begin(tool, target)` records the effect in the ledger before it is sent (only while the
  run still holds its lease) and says whether an earlier attempt sent it already; the gate's
  `finish(ok, detail)` confirms it after. A key is never sent twice: a confirmed send is not
  repeated, and a send whose confirmation is missing (its process died in between) is resolved
  by the record, not by sending again: at most once (an effect may be lost, never doubled).
  A send that failed (nothing arrived, or the receiver refused it) may be sent again by a
  retried attempt, under the same key (http_request sends it as `Idempotency-Key`, for the
  receiver to de-duplicate an answer that was lost on the way back).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from jarvis.errors import RunFenced

EFFECT_STATUSES = ("sending", "sent", "failed", "unknown")
RETRY_CHECK_SECONDS = 0.5  # between tries of a lease check the ledger did not answer


@dataclass(frozen=True, slots=True)
class Effect:
    """The ledger's record of one side effect (a send): who began it and how it ended.

    status: "sending" (recorded before the send, not confirmed after: in flight, or its
    process died in between), "sent", "failed" (the receiver refused it or could not be
    reached: nothing arrived), "unknown" (a later attempt found it unconfirmed and did not
    send it again)."""

    key: str
    status: str
    attempt: int
    epoch: int = 0
    tool: str = ""
    target: str = ""
    detail: str | None = None
    at: float | None = None


@runtime_checkable
class EffectLedger(Protocol):
    """Where effect records live: the scheduler's store (both the SQLite and the PostgreSQL
    one), so a retried attempt on another machine finds what the first one sent."""

    def begin_effect(self, key: str, *, attempt: int, epoch: int, tool: str, target: str,
                     run_id: int | None = None, owner: str | None = None,
                     take_unconfirmed: bool = False) -> Effect | None:
        """Record `key` as being sent now. None: recorded, go ahead. An Effect: the key was
        recorded before (by any attempt) and is not taken: do not send. A "failed" record is
        taken over (None); a "sending" one only with `take_unconfirmed`. With `owner`, only
        while the run is still (run_id, epoch, owner, running): else RunFenced."""
        ...

    def finish_effect(self, key: str, *, status: str, detail: str | None = None) -> None:
        """Confirm how the send of `key` ended ("sent", "failed" or "unknown")."""
        ...


@dataclass(slots=True)
class EffectGate:
    """One side effect about to happen: `go` says whether to send it; `finish` confirms it."""

    fence: RunFence
    key: str
    tool: str
    target: str
    prior: Effect | None = None
    recorded: bool = False  # a record was made before the send: `finish` confirms it

    @property
    def go(self) -> bool:
        return self.prior is None

    def finish(self, ok: bool, detail: str | None = None) -> None:
        """Confirm the send ("sent", or "failed": nothing arrived). A ledger that does not
        answer now leaves the record "sending": a retried attempt then treats the send as
        possibly done (never sends a channel message twice)."""
        effects = self.fence.effects
        if not self.recorded or effects is None:
            return
        try:
            effects.finish_effect(self.key, status="sent" if ok else "failed",
                                  detail=(detail or "")[:500] or None)
        except Exception as exc:  # noqa: BLE001 - the send happened; the record says "sending"
            import logging

            logging.getLogger("jarvis.tools").warning(
                "could not confirm side effect %s (%s %s): %s", self.key, self.tool,
                self.target, exc)

    def describe_prior(self) -> str:
        """What the model reads about an effect not sent again."""
        prior = self.prior
        if prior is None:
            return ""
        by = f"attempt {prior.attempt} of this scheduled run"
        if prior.status == "sent":
            return (f"already sent by {by} (idempotency key {self.key}); not sent again"
                    + (f": {prior.detail}" if prior.detail else ""))
        return (f"not sent again: {by} began sending it and stopped before it was confirmed "
                f"(its process died or lost its lease), so it may or may not have arrived; "
                f"jarvis does not send it a second time (idempotency key {self.key})")


class RunFence:
    """A scheduled run's identity, lease check and effect records (see the module docstring).

    Args:
        idempotency_key: the occurrence's key (`<task id>@<scheduled time>`).
        attempt, epoch: the attempt number, and the dispatch epoch (0 on the local runner).
        run_id, task_id, owner: the run's ledger row and who holds it.
        hold: `hold() -> bool` confirms (and renews) the lease: False once it is lost; may
            raise when the ledger does not answer (then retried for `patience` seconds).
        effects: the ledger's effect records (None: keys are derived, nothing is recorded).
        patience: how long an unanswered lease check is retried before the run is stopped
            (the lease's length: past it the lease may have been taken).
    """

    def __init__(self, *, idempotency_key: str, attempt: int = 1, epoch: int = 0,
                 run_id: int | None = None, task_id: str | None = None,
                 owner: str | None = None, hold: Callable[[], bool] | None = None,
                 effects: EffectLedger | None = None, patience: float = 0.0) -> None:
        self.idempotency_key = idempotency_key
        self.attempt = int(attempt)
        self.epoch = int(epoch)
        self.run_id = run_id
        self.task_id = task_id
        self.owner = owner
        self.effects = effects
        self.patience = float(patience)
        self._hold = hold
        self._lock = threading.Lock()
        self._positions: dict[tuple[str, str], int] = {}
        self._lost: str | None = None
        self.checks = 0  # lease checks made (each one ledger round trip)

    # --- the lease -----------------------------------------------------------------------
    @property
    def lost(self) -> bool:
        return self._lost is not None

    @property
    def reason(self) -> str:
        return self._lost or ""

    def lose(self, reason: str) -> None:
        """Mark the lease lost (the worker's renew found it taken): every later check fails."""
        if self._lost is None:
            self._lost = reason

    def is_set(self) -> bool:
        """The cancel-event form (`ask_full(cancel=...)`): set once the lease is known lost."""
        return self._lost is not None

    def check(self) -> None:
        """Raise RunFenced unless the run still holds its lease (one ledger round trip). A
        ledger that does not answer is asked again until `patience` runs out."""
        if self._lost is None and self._hold is not None:
            deadline = time.monotonic() + self.patience
            while True:
                self.checks += 1
                try:
                    held = bool(self._hold())
                except Exception as exc:  # noqa: BLE001 - the ledger is unreachable
                    if time.monotonic() >= deadline:
                        self.lose(f"its lease could not be confirmed for {self.patience:g} s "
                                  f"(the ledger did not answer: {type(exc).__name__}: {exc})")
                        break
                    time.sleep(RETRY_CHECK_SECONDS)
                    continue
                if not held:
                    self.lose("its lease was lost: the run was recorded as crashed and handed "
                              "to a retry (its worker stalled or lost the ledger for longer "
                              "than lease_seconds)")
                break
        if self._lost is not None:
            raise RunFenced(f"scheduled run {self.run_id} (attempt {self.attempt}, epoch "
                            f"{self.epoch}) stopped before its next call: {self._lost}")

    # --- side effects --------------------------------------------------------------------
    def position(self, tool: str, target: str) -> int:
        """The next position (1, 2, ...) of a call of `tool` to `target` in this run."""
        with self._lock:
            n = self._positions.get((tool, target), 0) + 1
            self._positions[(tool, target)] = n
            return n

    def positions(self) -> list[list[Any]]:
        """Where this run's effects stand ([tool, target, count] each, JSON-safe): a parked
        run keeps them, so its continuation's next effect gets the next key, not the first."""
        with self._lock:
            return [[tool, target, n] for (tool, target), n in self._positions.items()]

    def restore_positions(self, saved: Any) -> None:
        """Continue from `positions()` of the run this one continues (a parked run)."""
        with self._lock:
            for item in saved or []:
                tool, target, n = item
                key = (str(tool), str(target))
                self._positions[key] = max(self._positions.get(key, 0), int(n))

    def effect_key(self, tool: str, target: str, position: int) -> str:
        """The key of the `position`-th effect of `tool` on `target` in this occurrence: the
        same for every attempt (an opaque 32-hex-digit string)."""
        text = f"{self.idempotency_key}\n{tool}\n{target}\n{position}"
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def begin(self, tool: str, target: str, *, resend_unconfirmed: bool = False) -> EffectGate:
        """The gate of this run's next effect of `tool` on `target`: recorded in the ledger
        (after a lease check in the same transaction) unless an earlier attempt recorded it.
        Raises RunFenced when the run no longer holds its lease."""
        key = self.effect_key(tool, target, self.position(tool, target))
        gate = EffectGate(self, key, tool, target)
        if self._lost is not None:
            self.check()
        if self.effects is None:
            return gate
        try:
            gate.prior = self.effects.begin_effect(
                key, attempt=self.attempt, epoch=self.epoch, tool=tool, target=target,
                run_id=self.run_id, owner=self.owner, take_unconfirmed=resend_unconfirmed)
        except RunFenced as exc:
            self.lose(str(exc))
            raise
        gate.recorded = gate.prior is None
        return gate


def meta_for(fence: RunFence | None, key: str) -> dict[str, Any]:
    """What a call's protocol metadata carries (MCP `_meta`): the effect key, the attempt and
    the epoch."""
    if fence is None:
        return {}
    return {"jarvis/idempotency-key": key, "jarvis/attempt": fence.attempt,
            "jarvis/epoch": fence.epoch}
