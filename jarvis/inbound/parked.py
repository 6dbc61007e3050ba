"""A message's run that waits for the person: asked in the same chat, continued once.

With `[approvals] notify` set (the switch that makes every unattended entry point park rather
than refuse: docs/approvals.md), a call of a message's run that needs the person (a tool's
confirmation the inbound's `approved_tools` does not give, or the egress guard) parks the run
(jarvis.approvals.parking, resumer "inbound"). Its answer to the message is the request:
where the call goes, how much it sends and its hash, why, and how to answer (`approve ID` /
`deny ID` as a reply here, the CLI, the link). The request is not also sent to `notify`: the
chat it came from is where the person is.

Once answered (by reply or anywhere else), the listener of that inbound continues the run
through `Jarvis.resume` (the SDK's path: the approvals store's compare-and-set claim gives it
to one process). The continuation is handled as a message of its own in the inbound ledger
(key `KEY+continue:RUN:EPOCH`, the original message as its payload), so its answer goes back
to the same chat, thread or address with the ledger's exactly-once sending. A listener that
dies during a continuation leaves it continued (its call may have happened: not run again);
the next listener answers that it stopped (`jarvis runs show RUN` has what it did).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("jarvis.inbound")

CONTINUE = "continue_run"  # the payload key of a continuation's ledger row


def parks(config: Any) -> bool:
    """Whether inbound runs park (`[approvals] notify` is set) instead of refusing."""
    return bool(getattr(getattr(config, "approvals", None), "notify", ""))


def parked_answer(config: Any, result: dict[str, Any]) -> str:
    """The answer to a message whose run parked: each request, and how to answer it."""
    from jarvis.approvals.notify import link_for, message, serve_url
    from jarvis.approvals.stores import open_approvals

    try:
        base = serve_url(config)
    except Exception as exc:  # noqa: BLE001 - a link is a convenience
        log.warning("inbound: no approval link in the answer: %s", exc)
        base = ""
    parts = ["This needs your approval before I can go on."]
    store = open_approvals(config)
    try:
        for item in result.get("pending_approvals") or []:
            approval = store.get(str(item["id"]))
            parts.append(message(approval, link_for(base, approval))[1])
            parts.append(f"Or reply here: approve {approval.id}   (or: deny {approval.id})")
    finally:
        store.close()
    parts.append("Once you answer, the run goes on where it stopped and its answer comes here.")
    return "\n\n".join(parts)


def ready_runs(config: Any, inbound: str) -> list[tuple[str, int, str]]:
    """(run id, epoch, message key) of the runs of `inbound`'s messages whose requests are all
    answered, oldest first."""
    from jarvis.approvals.parking import expire_due
    from jarvis.approvals.records import INBOUND
    from jarvis.approvals.stores import open_approvals

    store = open_approvals(config, create=False)
    if store is None:
        return []
    found = []
    try:
        expire_due(config, store)
        for run in store.ready(INBOUND):
            full = store.get_run(run.run_id)
            if full is None:
                continue
            meta = ((full.state.get("ask") or {}).get("run_metadata") or {}).get("inbound") or {}
            if meta.get("name") == inbound and meta.get("key"):
                found.append((run.run_id, run.epoch, str(meta["key"])))
    finally:
        store.close()
    return found


def continuation_payload(original: dict[str, Any], run_id: str, epoch: int) -> dict[str, Any]:
    """The ledger payload of run `run_id`'s continuation: the message it answers (so the
    answer goes where the message came from), under a key of its own."""
    return dict(original, key=f"{original.get('key')}+continue:{run_id}:{epoch}",
                **{CONTINUE: run_id})


def continue_run(system: Any, run_id: str) -> tuple[str, str | None, str | None, str | None]:
    """Continue run `run_id` once: (answer, run id, conversation id, error)."""
    from jarvis.errors import JarvisError

    try:
        out = system.resume(run_id, _inbound=True)
    except JarvisError as exc:  # continued already (a listener died during it), expired
        text = " ".join(str(exc).split())[:400]
        return (f"Your answer was recorded, but the run was not continued here: {text}. "
                f"`jarvis runs show {run_id}` has what it did.", run_id, None, str(exc))
    if out.get("status") == "parked":
        return parked_answer(system.config, out), run_id, out.get("conversation_id"), None
    return (out.get("content") or "(no answer)", run_id, out.get("conversation_id"),
            out.get("stop_message"))
