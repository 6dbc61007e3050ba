"""Chat runs of `jarvis serve` that wait for the person.

With `[approvals] notify` set, a chat completion whose call needs the person (a tool's
confirmation that `--yes` does not cover, or the egress guard) parks instead of being
refused: the reply says so (which request, how to answer), and the request goes to the
person's channel like a scheduled run's. Once it is answered, the server continues the run
(`ServedRuns`, on a background thread: every second it claims the ready runs of serve, each
once, with the store's compare-and-set) and sends the answer to the same channel, since the
client's request has ended by then. A server that dies during a continuation leaves the run
continued (not run again: its call may have happened); `jarvis runs show RUN` has it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jarvis.errors import UserError

log = logging.getLogger("jarvis.approvals")

INTERVAL_SECONDS = 1.0
TITLE_CHARS = 60


def parks(config: Any) -> bool:
    """Whether serve's chat runs park (`[approvals] notify` names the person's channel)."""
    return bool(getattr(getattr(config, "approvals", None), "notify", ""))


def parked_reply(out: dict[str, Any], config: Any) -> str:
    """The answer a chat client gets for a run that parked."""
    from jarvis.core.terminal import visible

    lines = ["This needs your approval before I can go on:"]
    for a in out.get("pending_approvals") or []:
        lines.append(visible(f"- {a.get('tool')} -> {a.get('where')} (approve: `jarvis "
                             f"approvals approve {a.get('id')}`, deny: `jarvis approvals deny "
                             f"{a.get('id')}`)", 300, one_line=True))
    channel = config.approvals.notify
    lines.append(f"The request was sent to your channel {channel}; once you answer, the run "
                 f"goes on and its answer is sent there.")
    return "\n".join(lines)


class ServedRuns:
    """Continues serve's parked chat runs once answered (see the module docstring)."""

    def __init__(self, jarvis: Any, interval: float = INTERVAL_SECONDS) -> None:
        self.jarvis = jarvis
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ServedRuns:
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="jarvis-serve-approvals")
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the loop outlives one bad tick
                log.exception("continuing answered chat runs failed")

    def tick(self) -> int:
        """Continue every ready run of serve (each once); returns how many this call did."""
        from jarvis.approvals.parking import expire_due
        from jarvis.approvals.records import SERVE
        from jarvis.approvals.stores import open_approvals

        config = self.jarvis.config
        store = open_approvals(config, create=False)
        if store is None:
            return 0
        try:
            expire_due(config, store)
            ready = store.ready(SERVE)
        finally:
            store.close()
        done = 0
        for run in ready:
            if self._stop.is_set():
                break
            done += self._continue(run.run_id)
        return done

    def _continue(self, run_id: str) -> int:
        try:
            out = self.jarvis.resume(run_id, _served=True)
        except UserError as exc:  # another server took it, or it expired meanwhile
            log.info("chat run %s not continued here: %s", run_id, exc)
            return 0
        if out.get("status") == "parked":
            return 1  # it waits again: its new request went to the channel
        from jarvis.channels.delivery import deliver

        config = self.jarvis.config
        query = " ".join(str(out.get("query") or "").split())[:TITLE_CHARS]
        record = deliver(config, config.approvals.notify, f"jarvis: answer ({run_id})",
                         str(out.get("content") or "") or f"(no answer) {query}")
        if record.get("status") != "delivered":
            log.warning("the answer of chat run %s could not be sent to channel %s: %s "
                        "(`jarvis runs show %s` has it)", run_id, config.approvals.notify,
                        record.get("error"), run_id)
        return 1
