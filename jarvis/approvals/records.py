"""The records of the approvals room: an approval request waiting for the person, a run parked
on it, and a grant the person made. Times are POSIX timestamps; `to_dict()` shows ISO 8601.

Statuses are a shared vocabulary (the run log, `jarvis runs`, `jarvis schedule runs`):
- a request (`Approval.status`): pending, approved, denied, expired;
- a parked run (`ParkedRun.status`): parked (a request is pending), ready (every request is
  answered: the run may continue), resumed (its continuation started), expired (a request
  ran out of time: the run ended recorded `expired`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

PENDING, APPROVED, DENIED, EXPIRED = "pending", "approved", "denied", "expired"
REQUEST_STATUSES = (PENDING, APPROVED, DENIED, EXPIRED)
PARKED, READY, RESUMED = "parked", "ready", "resumed"
RUN_STATUSES = (PARKED, READY, RESUMED, EXPIRED)
# Who continues a parked run: the scheduler (the daemon or a Celery worker that claims it),
# `jarvis serve` (a chat run: jarvis.approvals.served), the SDK process that calls
# Jarvis.resume, the CLI (`jarvis ask` without a terminal: `jarvis approvals approve|deny|
# continue` continues it, or a `jarvis serve` that answers), or the inbound listener the
# run's message came to (jarvis.inbound.parked).
SCHEDULER, SDK, SERVE, CLI, INBOUND = "scheduler", "sdk", "serve", "cli", "inbound"
GRANT_KINDS = ("host", "channel", "server")
# Why a call of `jarvis mcp serve` or an ORS session that needs the person is refused, not
# parked: its caller waits for the tool's result within the call (docs/approvals.md).
IN_CALL = ("{what} answers each tool call within the call, so it cannot wait for your approval; "
           "a grant lets such calls through: `jarvis grants add TOOL --host HOST` (or "
           "--channel, --server)")


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(slots=True)
class Approval:
    """One tool call a parked run waits on: what is asked, and the person's answer."""

    id: str
    run_id: str
    call_id: str
    tool: str
    kind: str  # "confirmation" | "egress" (jarvis.trust.request)
    request: dict[str, Any]  # ApprovalRequest.to_dict(): destinations, size, digest, why, ...
    status: str = PENDING
    created_at: float = field(default_factory=time.time)
    expires_at: float = 0.0
    decided_at: float | None = None
    decided_by: str | None = None
    reason: str | None = None  # the person's reason, with a denial
    grant_id: str | None = None  # the grant the person made while approving, if any
    task_id: str | None = None
    notified: dict[str, Any] | None = None  # how sending it to the channel went

    @property
    def destinations(self) -> list[dict[str, str]]:
        return list(self.request.get("destinations") or [])

    @property
    def where(self) -> str:
        """Where the call goes, as a person reads it ("GET evil.example; channel phone")."""
        from jarvis.trust.labels import Egress

        shown = [Egress.from_dict(e).where() for e in self.request.get("egress") or []]
        return "; ".join(shown) or "no data leaves this machine"

    def expired(self, now: float | None = None) -> bool:
        return self.status == PENDING and self.expires_at <= (now or time.time())

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        """The request as `--json` and the HTTP API show it: where first, then size, hash, why;
        `full` adds the arguments and every payload piece (`jarvis approvals show`)."""
        out = {"id": self.id, "status": self.status, "tool": self.tool, "kind": self.kind,
               "where": self.where, "destinations": self.destinations,
               "size": self.request.get("size"), "digest": self.request.get("digest"),
               "why": self.request.get("reason"),
               "how_to_allow": self.request.get("how_to_allow"), "run_id": self.run_id,
               "call_id": self.call_id, "task_id": self.task_id,
               "created_at": iso(self.created_at), "expires_at": iso(self.expires_at),
               "decided_at": iso(self.decided_at), "decided_by": self.decided_by,
               "reason": self.reason, "grant_id": self.grant_id}
        if full:
            out["arguments"] = self.request.get("arguments")
            out["egress"] = self.request.get("egress")
        return out


@dataclass(slots=True)
class ParkedRun:
    """A run stopped before a call that needs the person, with all it needs to go on."""

    run_id: str  # the run log id: the same before and after it continues
    state: dict[str, Any]  # jarvis.approvals.state: messages, pending calls, trust, ...
    status: str = PARKED
    resumer: str = SDK
    task_id: str | None = None
    sched_run_id: int | None = None  # the scheduler's run (occurrence attempt) it belongs to
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    expires_at: float = 0.0
    epoch: int = 0  # raised by every park and every continuation: fences stale writers
    state_bytes: int = 0
    outcome: str | None = None  # how its continuation ended, once it has

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "resumer": self.resumer,
                "task_id": self.task_id, "scheduled_run_id": self.sched_run_id,
                "created_at": iso(self.created_at), "updated_at": iso(self.updated_at),
                "expires_at": iso(self.expires_at), "epoch": self.epoch,
                "state_bytes": self.state_bytes, "outcome": self.outcome}


@dataclass(slots=True)
class Grant:
    """`tool` may send to a host, channel or MCP server without asking (one task, or all)."""

    id: str
    tool: str
    kind: str  # "host" | "channel" | "server"
    value: str
    task_id: str | None = None
    created_at: float = field(default_factory=time.time)
    expires_at: float | None = None
    created_by: str = "cli"  # cli, prompt ("always" in a terminal), link, http, chat
    revoked_at: float | None = None

    def active(self, now: float | None = None) -> bool:
        now = now or time.time()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def describe(self) -> str:
        """`http_request -> host api.example.com (task 3f2a)`, as the person reads it."""
        scope = f" (task {self.task_id})" if self.task_id else ""
        return f"{self.tool} -> {self.kind} {self.value}{scope}"

    def rule(self) -> Any:
        from jarvis.trust.run import GrantRule

        return GrantRule(self.id, self.tool, self.kind, self.value)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tool": self.tool, "kind": self.kind, "value": self.value,
                "task_id": self.task_id, "created_at": iso(self.created_at),
                "expires_at": iso(self.expires_at), "created_by": self.created_by,
                "revoked_at": iso(self.revoked_at), "active": self.active()}
