"""The listener: each message in becomes a run in its sender's conversation, answered once.

    with Jarvis() as j:
        run_listeners(j, names=["phone"], stop=threading.Event())   # what `jarvis listen` runs

For each message: claim it in the ledger (jarvis.inbound.ledger), refuse what may not be
answered (recorded as "ignored", logged, never run), run the rest as the next turn of the
sender's conversation (the sender's words are the person's; forwarded, quoted and attached
parts are untrusted and taint the run), record the answer, send it part by part with a
"sending" record before each part, record "sent", and only then acknowledge it at the source.
A listener that finds a message in the ledger whose listener died goes on from the recorded
state: it runs the model only when no answer was recorded, and never sends a part again that
may have gone out.

Runs here have no person at a terminal: tools that need confirmation run without asking only
when listed in the inbound's `approved_tools`. Any other call that needs the person (and
egress the guard holds, docs/trust.md) parks the run when `[approvals] notify` is set: the
answer to the message asks the person in the same chat, and once they answer, the run is
continued here, once, and its answer sent there (jarvis.inbound.parked). Without `notify`
such calls are refused.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jarvis.core.terminal import visible
from jarvis.errors import JarvisError
from jarvis.inbound.approvals import answer_approval, approval_reply
from jarvis.inbound.ledger import FINISHED, Fenced, InboundClaim, InboundLedger
from jarvis.inbound.message import InboundMessage, build_prompt, taints
from jarvis.inbound.telegram import SendFailed, SendUnknown

log = logging.getLogger("jarvis.inbound")


def make_channel(name: str, settings: Any) -> Any:
    if settings.type == "telegram":
        from jarvis.inbound.telegram import TelegramChannel

        return TelegramChannel(name, settings)
    from jarvis.inbound.mail import MailChannel

    return MailChannel(name, settings)


class Listener:
    """One [inbound.NAME]: fetch, claim, answer, send, acknowledge."""

    def __init__(self, name: str, settings: Any, system: Any, ledger: InboundLedger, *,
                 channel: Any = None, stop: threading.Event | None = None) -> None:
        self.name = name
        self.settings = settings
        self.system = system
        self.ledger = ledger
        self.channel = channel if channel is not None else make_channel(name, settings)
        self.stop = stop if stop is not None else threading.Event()
        self._active: dict[str, InboundClaim] = {}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.failed: str | None = None  # why it stopped, when it stopped on an error
        self.busy = False  # handling a message (not merely waiting for one)
        self.thread: threading.Thread | None = None

    # --- the loop ----------------------------------------------------------------------------
    def run(self, *, once: bool = False) -> None:
        """Until `stop` is set (with `once`: one fetch and what it brought, then return)."""
        self.channel.check()
        beat = threading.Thread(target=self._heartbeat, name=f"jarvis-inbound-{self.name}-lease",
                                daemon=True)
        beat.start()
        log.info("inbound %s: listening (%s)", self.name, self.channel.account)
        try:
            while not self.stop.is_set():
                self.continue_parked()
                for claim in self.ledger.stale(self.name):
                    log.warning("inbound %s: taking over message %s (its listener stopped; "
                                "attempt %d)", self.name, claim.key, claim.attempts)
                    self._work(claim)
                for message in self.channel.fetch(self.stop):
                    if self.stop.is_set():
                        break
                    self.handle(message)
                if once:
                    break
        finally:
            self._done.set()
            self.channel.close()

    def _heartbeat(self) -> None:
        every = max(self.ledger.lease_seconds / 3, 0.05)
        while not (self._done.wait(every) or self.stop.is_set()):
            with self._lock:
                claims = list(self._active.values())
            try:
                self.ledger.renew(claims)
            except Exception as exc:  # noqa: BLE001 (a locked database: next beat tries again)
                log.warning("inbound %s: could not renew leases: %s", self.name, exc)

    # --- one message -------------------------------------------------------------------------
    def handle(self, message: InboundMessage) -> str:
        """Claim and handle one fetched message; returns its final state ("busy": another
        listener has it)."""
        claim, state = self.ledger.claim(self.name, message.key, message.to_dict(),
                                         message.sender)
        if claim is None:
            if state in FINISHED:
                self.channel.ack(message)  # finished before, not acknowledged yet
            return state or "busy"
        done = self._work(claim)
        self.continue_parked()  # an `approve ID` reply: its run goes on at once
        return done

    def continue_parked(self) -> int:
        """Continue the parked runs of this inbound's messages whose requests are answered,
        each as a ledger message of its own (once, answered in the original chat); returns
        how many this call handled."""
        from jarvis.inbound.parked import continuation_payload, parks, ready_runs

        if not parks(self.system.config):
            return 0
        try:
            ready = ready_runs(self.system.config, self.name)
        except JarvisError as exc:
            log.warning("inbound %s: cannot look for answered runs: %s", self.name, exc)
            return 0
        done = 0
        for run_id, epoch, key in ready:
            original = self.ledger.payload(self.name, key)
            if original is None:
                log.warning("inbound %s: run %s answers message %s, which is not in the "
                            "ledger; not continued", self.name, run_id, key)
                continue
            payload = continuation_payload(original, run_id, epoch)
            claim, _ = self.ledger.claim(self.name, payload["key"], payload,
                                         str(original.get("sender") or ""))
            if claim is not None:
                self._work(claim)
                done += 1
        return done

    def _work(self, claim: InboundClaim) -> str:
        message = InboundMessage.from_dict(claim.payload)
        with self._lock:
            self._active[claim.key] = claim
            self.busy = True
        try:
            if claim.status == "claimed" and not self._decide(claim, message):
                return claim.status
            if claim.status == "sending":
                # The listener before stopped while this part was going out. Resolved by the
                # record: it may have arrived, so it is not sent again (at most once).
                part = claim.sending_part or 0
                log.warning("inbound %s: part %d of the answer to %s may not have been sent "
                            "(its listener stopped while sending); not sent again", self.name,
                            part + 1, claim.key)
                self.ledger.advance(claim, "answered", parts_sent=part + 1, sending_part=None,
                                    unconfirmed_parts=claim.unconfirmed_parts + 1)
            if claim.status == "answered" and not self._send(claim, message):
                self.channel.ack(message)
                return claim.status
            self.ledger.advance(claim, "unconfirmed" if claim.unconfirmed_parts else "sent")
            self.channel.ack(message)
            return claim.status
        except Fenced as exc:
            log.warning("inbound %s: %s; leaving it to the listener that has it", self.name, exc)
            return "fenced"
        except Exception as exc:
            # A defect, not a user's mistake: record it (never silent), keep listening.
            log.exception("inbound %s: handling message %s failed", self.name, claim.key)
            try:
                self.ledger.advance(claim, "failed", error=f"{type(exc).__name__}: {exc}")
            except Exception:  # noqa: BLE001 (the ledger itself failed: the lease runs out)
                pass
            return "failed"
        finally:
            with self._lock:
                self._active.pop(claim.key, None)
                self.busy = bool(self._active)

    def _decide(self, claim: InboundClaim, message: InboundMessage) -> bool:
        """Answer a fresh claim, or record why not; False when there is nothing to send."""
        if not message.allowed:
            log.warning("inbound %s: ignored message %s from %s: %s", self.name, claim.key,
                        visible(message.sender or "?", 100, one_line=True),
                        visible(message.refusal, 300, one_line=True))
            if message.reply_note:  # an allowed sender's message that could not be read
                self.ledger.advance(claim, "answered", answer=message.reply_note,
                                    error=message.refusal)
                return True
            self.ledger.advance(claim, "ignored", error=message.refusal)
            self.channel.ack(message)
            return False
        if claim.payload.get("continue_run"):  # an answered run of an earlier message
            from jarvis.inbound.parked import continue_run

            answer, run_id, conversation_id, error = continue_run(
                self.system, str(claim.payload["continue_run"]))
        else:
            answer, run_id, conversation_id, error = self._answer(claim, message)
        self.ledger.advance(claim, "answered", answer=answer, run_id=run_id,
                            conversation_id=conversation_id, error=error)
        return True

    def _answer(self, claim: InboundClaim,
                message: InboundMessage) -> tuple[str, str | None, str | None, str | None]:
        """(answer, run id, conversation id, error): the run, or what to say when it failed."""
        command = approval_reply(message.text) if not message.untrusted else None
        if command is not None:
            return (answer_approval(self.system.config, self.name, message.sender, *command),
                    None, None, None)
        from jarvis.conversations import ask_in_conversation, open_conversations
        from jarvis.inbound.parked import parked_answer, parks

        s = self.settings
        source = f"{message.kind}:{self.name}"
        try:
            with open_conversations(self.system.config) as store:
                record = store.for_key(message.conversation_key, source=source,
                                       agent=s.agent or None, tools=list(s.tools),
                                       title=message.text or "(forwarded content)")
                result = ask_in_conversation(
                    self.system, record, build_prompt(message), person_text=message.text,
                    taints=taints(message), store=store, tools=list(s.tools),
                    agent=s.agent or None, system=s.system or None, max_turns=s.max_turns,
                    approved_tools=list(s.approved_tools), approver=None, source=source,
                    on_approval="defer" if parks(self.system.config) else None,
                    run_metadata={"inbound": {
                        "name": self.name, "key": claim.key, "epoch": claim.epoch,
                        "sender": message.sender,
                        "idempotency_key": f"inbound:{self.name}:{claim.key}"}})
        except JarvisError as exc:
            log.error("inbound %s: the run for message %s failed: %s", self.name, claim.key, exc)
            text = " ".join(str(exc).split())[:500]
            return f"Sorry, I could not answer that: {text}", None, None, str(exc)
        if result.get("status") == "parked":  # ask here; continued once answered
            return (parked_answer(self.system.config, result), result.get("run_id"),
                    result.get("conversation_id"), None)
        meta = result.get("metadata") or {}
        answer = result.get("content") or ""
        if meta.get("max_turns_exceeded") or meta.get("loop_detected"):
            answer = answer or ("I stopped before I had an answer (the step limit was reached); "
                                "please ask again, more narrowly.")
        return (answer or "(no answer)", result.get("run_id"), result.get("conversation_id"),
                None)

    def _send(self, claim: InboundClaim, message: InboundMessage) -> bool:
        """Send the recorded answer from the first part not yet sent; False when it failed."""
        parts = self.channel.parts(claim.answer or "")
        for index in range(claim.parts_sent, len(parts)):
            def before_send(i: int = index) -> None:
                self.ledger.advance(claim, "sending", sending_part=i)

            try:
                self.channel.send_part(message, parts[index], index, self.stop.wait, before_send)
            except SendUnknown as exc:
                log.warning("inbound %s: part %d of the answer to %s may not have arrived: %s; "
                            "not sent again", self.name, index + 1, claim.key, exc)
                self.ledger.advance(claim, "answered", parts_sent=index + 1, sending_part=None,
                                    unconfirmed_parts=claim.unconfirmed_parts + 1,
                                    error=str(exc))
                continue
            except SendFailed as exc:
                log.error("inbound %s: the answer to %s was not sent: %s", self.name, claim.key,
                          exc)
                self.ledger.advance(claim, "failed", error=f"not sent: {exc}")
                return False
            self.ledger.advance(claim, "answered", parts_sent=index + 1, sending_part=None)
        return True


def open_ledger(config: Any, *, create: bool = True) -> InboundLedger:
    """The inbound ledger in the scheduler's store (`[scheduler] store` / `db_path`);
    `create=False`: a SQLite file that does not exist is a UserError."""
    from jarvis.scheduler.ledger import open_store

    return InboundLedger(open_store(config, create=create),
                         lease_seconds=config.scheduler.lease_seconds)


def chosen_inbounds(config: Any, names: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The enabled [inbound.NAME] tables (only `names`, when given; an unknown one is an error)."""
    from jarvis.errors import UnknownNameError

    configured = dict(config.inbound)
    for name in names:
        if name not in configured:
            raise UnknownNameError("inbound", name, configured,
                                   hint="add an [inbound.NAME] table to config.toml")
    chosen = {n: s for n, s in configured.items() if (n in names if names else s.enabled)}
    return chosen


def start_listeners(system: Any, stop: threading.Event, names: list[str] | tuple[str, ...] = (),
                    *, once: bool = False) -> list[Listener]:
    """A thread per chosen inbound (`listener.thread`), running its Listener until `stop` is
    set. The scheduler daemon and `jarvis listen` call this; a listener that fails logs why,
    keeps it in `listener.failed` and ends."""
    inbounds = chosen_inbounds(system.config, names)
    ledger = open_ledger(system.config)
    listeners = []
    for name, settings in inbounds.items():
        listener = Listener(name, settings, system, ledger, stop=stop)

        def run(listener: Listener = listener) -> None:
            try:
                listener.run(once=once)
            except JarvisError as exc:
                log.error("inbound %s: stopped: %s", listener.name, exc)
                listener.failed = str(exc)
            except Exception as exc:  # a defect: say so with the traceback, and stop
                log.exception("inbound %s: stopped", listener.name)
                listener.failed = f"{type(exc).__name__}: {exc}"

        listener.thread = threading.Thread(target=run, name=f"jarvis-inbound-{name}",
                                           daemon=True)
        listener.thread.start()
        listeners.append(listener)
    return listeners
