"""Approvals: runs that wait for the person, the requests they wait on, and grants.

A run with nobody to ask (a scheduled task, an SDK call with `on_approval="defer"`; with
`[approvals] notify` set also `jarvis ask` without a terminal, a message to `jarvis listen`
and a chat run of `jarvis serve`) that reaches a call needing a person (a tool's
confirmation, or the egress guard) parks: its state
and one request per such call are stored, the person is told on `[approvals] notify`, and
once they answer (`jarvis approvals approve|deny ID`, the link's page, `jarvis serve`'s HTTP
API, a chat front end through `decide`), the run continues where it stopped, exactly once,
in whichever process claims it. Grants let one tool send to one destination without asking.
See docs/approvals.md.

    records        Approval, ParkedRun, Grant, the statuses
    store          ApprovalStore (SQLite), open_approvals(config); store_postgres (the ledger)
    state          a parked run's state as JSON
    parking        Parking (an ask's hook and parking), resume_arguments (continuing)
    grants         make_grant, grants_for_request
    tokens         signed single-use link tokens
    notify         the message to the person's channel

For front ends that take the person's answer elsewhere (a chat: `approve ID` from an
allow-listed sender):

    from jarvis.approvals import decide
    approval = decide("3f9c2a1b", True, by="telegram:@me")   # or False to deny
"""

from __future__ import annotations

from typing import Any

from jarvis.approvals.records import (
    APPROVED,
    DENIED,
    EXPIRED,
    PARKED,
    PENDING,
    READY,
    RESUMED,
    Approval,
    Grant,
    ParkedRun,
)

__all__ = ["APPROVED", "Approval", "DENIED", "EXPIRED", "Grant", "PARKED", "PENDING",
           "ParkedRun", "READY", "RESUMED", "decide", "next_step", "open_approvals", "pending"]


def open_approvals(config: Any = None, *, create: bool = True) -> Any:
    """The approvals store the config chooses (see jarvis.approvals.store.open_approvals)."""
    from jarvis.approvals.stores import open_approvals as _open

    return _open(config, create=create)


def _config(config: Any) -> Any:
    if config is not None:
        return config
    from jarvis.core.config import load_config

    return load_config()


def decide(approval_id: str, approve: bool, *, by: str, reason: str | None = None,
           grant: bool = False, config: Any = None, created_by: str = "chat") -> Approval:
    """Answer one approval request as the person: `approve` True runs the call (the run then
    continues: in the scheduler within one tick, or when its SDK caller resumes it), False
    gives the model a `denied` result. `by` says who answered and where (recorded), e.g.
    "telegram:@me". `grant` also lets this tool send to the call's destinations from now on
    without asking (only when the person chose so). Raises UserError for an unknown id and
    ApprovalError (a JarvisError) when it was answered already or expired."""
    from jarvis.approvals.grants import grants_for_request

    store = open_approvals(_config(config))
    try:
        found = store.get(approval_id)
        made = grants_for_request(found.request, task_id=found.task_id, created_by=created_by) \
            if grant and approve else []
        approval, _ = store.decide(found.id, bool(approve), by=by, reason=reason, grants=made)
        return approval
    finally:
        store.close()


def pending(config: Any = None) -> list[Approval]:
    """The requests waiting for the person, newest first (expired ones are marked first)."""
    from jarvis.approvals.parking import expire_due

    config = _config(config)
    store = open_approvals(config, create=False)
    if store is None:
        return []
    try:
        expire_due(config, store)
        return store.list("pending")
    finally:
        store.close()


def next_step(config: Any, approval: Approval) -> str:
    """What happens to the run of an answered request, as the person reads it ("the scheduler
    continues its run within a tick", ...), by who continues it (jarvis.approvals.records)."""
    from jarvis.approvals.records import CLI, INBOUND, SCHEDULER, SERVE

    store = open_approvals(_config(config), create=False)
    run = store.get_run(approval.run_id, with_state=False) if store is not None else None
    if store is not None:
        store.close()
    if run is None:
        return "its run is no longer parked"
    if run.status == PARKED:
        return "its run goes on once its other requests are answered"
    if run.status == EXPIRED:
        return "its run expired"
    if run.status == RESUMED and run.resumer == CLI:
        return "its run was continued already"
    return {
        SCHEDULER: f"scheduled task {approval.task_id} goes on: the scheduler continues its "
                   f"run within a tick",
        SERVE: "jarvis serve continues its run and sends the answer to your channel",
        INBOUND: "jarvis listen continues its run and sends its answer where its message "
                 "came from",
        CLI: f"continue its run with `jarvis approvals continue {run.run_id}` (it prints the "
             f"answer)",
    }.get(run.resumer, f"its run continues when its program calls resume({run.run_id!r})")
