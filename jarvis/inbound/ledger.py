"""Exactly-once handling of inbound messages: claims in the scheduler's ledger.

Every message is one row, keyed by (inbound, key), in the same database as the scheduled runs
(the SQLite file, or the PostgreSQL ledger several machines share), written through the
scheduler store's own transactions (`_write`: BEGIN IMMEDIATE, or a PostgreSQL transaction).
The rules are the scheduler's:

- **claim**: inserting the row claims it (`ON CONFLICT DO NOTHING`: one listener wins);
- **lease**: the owner (`host:pid:token:boot:pidns`, the scheduler's owner ids) renews it
  while it works; a row whose lease expired, or whose owner is a dead process of this
  machine, is taken over by the next listener;
- **fencing epoch**: a takeover increments the row's epoch; every later write of the old
  owner is compare-and-set on (owner, epoch) and fails, so a stalled listener that wakes up
  can neither record nor send.

A row walks `claimed` -> `answered` (the answer is stored: a takeover sends it, it does not
run the model again) -> `sending` (written before each part goes out) -> `sent`; or ends as
`ignored` (not allowed, not authenticated), `failed`, or `unconfirmed`. A row found in
`sending` by a takeover is resolved by the record: the part may have been sent, so it is not
sent again (at most once; see docs/inbound.md for what that means per channel).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from jarvis.errors import JarvisError

WORKING = ("claimed", "answered", "sending")
FINISHED = ("sent", "unconfirmed", "ignored", "failed")
MAX_ANSWER_CHARS = 200_000
MAX_ERROR_CHARS = 4_000
_PG_CREATE_LOCK = 0x6A61727669730024  # pg_advisory_xact_lock key: "jarvis" + issue 24

COLUMNS = ("inbound", "key", "status", "owner", "epoch", "lease_until", "received_at",
           "claimed_at", "finished_at", "sender", "payload", "answer", "parts_sent",
           "sending_part", "unconfirmed_parts", "run_id", "conversation_id", "error",
           "attempts")


class Fenced(JarvisError):
    """This listener lost its claim (its lease expired and another took the message over)."""


@dataclass(slots=True)
class InboundClaim:
    """A message this listener now owns, at the state it found it in."""

    inbound: str
    key: str
    owner: str
    epoch: int
    status: str
    payload: dict[str, Any]
    answer: str | None = None
    parts_sent: int = 0
    sending_part: int | None = None
    unconfirmed_parts: int = 0
    run_id: str | None = None
    conversation_id: str | None = None
    attempts: int = 1
    taken_over: bool = False
    error: str | None = None


class InboundLedger:
    """Claims, leases and the record of replies, on a scheduler store (SQLite or PostgreSQL).

    Args:
        store: a jarvis.scheduler store (`open_store(config)`); its transactions are used.
        owner: this listener's owner id (default: a new `owner_id()`).
        lease_seconds: how long a claim holds without renewal.
    """

    def __init__(self, store: Any, *, owner: str | None = None,
                 lease_seconds: float = 60.0) -> None:
        from jarvis.scheduler.store import owner_id

        self.store = store
        self.owner = owner or owner_id()
        self.lease_seconds = float(lease_seconds)
        prefix = store.TASKS[: -len("tasks")]  # "" for SQLite, "jarvis_" for PostgreSQL
        self.table = f"{prefix}inbound_messages"
        self._pg = store.MARK == "%s"
        self._create()

    # --- plumbing ----------------------------------------------------------------------------
    def _sql(self, text: str) -> str:
        return text.replace("{t}", self.table).replace("?", self.store.MARK)

    def _now(self) -> float:
        # PostgreSQL: the database clock, as the scheduler's leases (hosts may disagree).
        db_now = getattr(self.store, "db_now", None)
        return float(db_now()) if callable(db_now) else time.time()

    @staticmethod
    def _rows(cursor: Any) -> list[dict[str, Any]]:
        rows = cursor.fetchall()
        if rows and not isinstance(rows[0], dict):
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, row, strict=True)) for row in rows]
        return list(rows)

    def _create(self) -> None:
        with self.store._write() as db:
            if self._pg:
                db.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_CREATE_LOCK,))
            db.execute(self._sql(
                "CREATE TABLE IF NOT EXISTS {t} (inbound TEXT NOT NULL, key TEXT NOT NULL, "
                "status TEXT NOT NULL, owner TEXT, epoch INTEGER NOT NULL DEFAULT 1, "
                "lease_until DOUBLE PRECISION, received_at DOUBLE PRECISION, "
                "claimed_at DOUBLE PRECISION, finished_at DOUBLE PRECISION, sender TEXT, "
                "payload TEXT, answer TEXT, parts_sent INTEGER NOT NULL DEFAULT 0, "
                "sending_part INTEGER, unconfirmed_parts INTEGER NOT NULL DEFAULT 0, "
                "run_id TEXT, conversation_id TEXT, error TEXT, "
                "attempts INTEGER NOT NULL DEFAULT 1, PRIMARY KEY (inbound, key))"))
            db.execute(self._sql("CREATE INDEX IF NOT EXISTS {t}_working ON {t} "
                                 "(inbound, status, lease_until)"))

    def _claim_of(self, row: dict[str, Any], *, taken_over: bool) -> InboundClaim:
        return InboundClaim(row["inbound"], row["key"], row["owner"], int(row["epoch"]),
                            row["status"], json.loads(row["payload"] or "{}"), row["answer"],
                            int(row["parts_sent"] or 0), row["sending_part"],
                            int(row["unconfirmed_parts"] or 0), row["run_id"],
                            row["conversation_id"], int(row["attempts"] or 1), taken_over)

    # --- claiming ----------------------------------------------------------------------------
    def claim(self, inbound: str, key: str, payload: dict[str, Any],
              sender: str = "") -> tuple[InboundClaim | None, str | None]:
        """Claim message `key`: (the claim, None), or (None, its status) when it is finished
        ("sent", ...) or another live listener works on it ("busy")."""
        from jarvis.scheduler.store_common import storable

        now = self._now()
        with self.store._write() as db:
            cursor = db.execute(self._sql(
                "INSERT INTO {t} (inbound, key, status, owner, epoch, lease_until, received_at, "
                "claimed_at, sender, payload) VALUES (?, ?, 'claimed', ?, 1, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING"),
                (inbound, key, self.owner, now + self.lease_seconds, now, now,
                 storable(sender[:320]), storable(json.dumps(payload, ensure_ascii=False))))
            if cursor.rowcount == 1:
                row = self._row(db, inbound, key)
                return self._claim_of(row, taken_over=False), None
            row = self._row(db, inbound, key)
            return self._take_over(db, row, now)

    def _row(self, db: Any, inbound: str, key: str) -> dict[str, Any]:
        cursor = db.execute(self._sql(f"SELECT {', '.join(COLUMNS)} FROM {{t}} WHERE "
                                      f"inbound = ? AND key = ?"), (inbound, key))
        return self._rows(cursor)[0]

    def _take_over(self, db: Any, row: dict[str, Any],
                   now: float) -> tuple[InboundClaim | None, str | None]:
        from jarvis.scheduler.store import owner_is_dead

        if row["status"] in FINISHED:
            return None, row["status"]
        if row["owner"] == self.owner:
            return None, "busy"  # this listener has it already (a redelivery meanwhile)
        expired = row["lease_until"] is not None and row["lease_until"] < now
        if not (expired or owner_is_dead(row["owner"])):
            return None, "busy"
        cursor = db.execute(self._sql(
            "UPDATE {t} SET owner = ?, epoch = epoch + 1, lease_until = ?, claimed_at = ?, "
            "attempts = attempts + 1 WHERE inbound = ? AND key = ? AND epoch = ?"),
            (self.owner, now + self.lease_seconds, now, row["inbound"], row["key"], row["epoch"]))
        if cursor.rowcount != 1:
            return None, "busy"
        return self._claim_of(self._row(db, row["inbound"], row["key"]), taken_over=True), None

    def stale(self, inbound: str, limit: int = 20) -> list[InboundClaim]:
        """Take over this inbound's messages whose listener died or stopped renewing."""
        from jarvis.scheduler.store import owner_is_dead

        now = self._now()
        found = self.store._query(self._sql(
            "SELECT inbound, key, owner, lease_until FROM {t} WHERE inbound = ? AND status IN "
            "('claimed', 'answered', 'sending') AND owner != ? ORDER BY received_at LIMIT ?"),
            (inbound, self.owner, int(limit) * 5))
        claims = []
        for row in found:
            expired = row["lease_until"] is not None and row["lease_until"] < now
            if not (expired or owner_is_dead(row["owner"])):
                continue
            with self.store._write() as db:
                claim, _ = self._take_over(db, self._row(db, inbound, row["key"]), now)
            if claim is not None:
                claims.append(claim)
            if len(claims) >= limit:
                break
        return claims

    # --- recording ---------------------------------------------------------------------------
    def advance(self, claim: InboundClaim, status: str, **fields: Any) -> None:
        """Record the next state of a claimed message; Fenced when the claim is no longer
        this listener's (then nothing is written, and nothing may be sent)."""
        from jarvis.scheduler.store_common import storable

        allowed = {"answer", "parts_sent", "sending_part", "unconfirmed_parts", "run_id",
                   "conversation_id", "error"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"unknown ledger fields {sorted(unknown)}")
        if isinstance(fields.get("answer"), str):
            fields["answer"] = storable(fields["answer"][:MAX_ANSWER_CHARS])
        if isinstance(fields.get("error"), str):
            fields["error"] = storable(fields["error"][:MAX_ERROR_CHARS])
        now = self._now()
        sets = ["status = ?", "lease_until = ?"]
        params: list[Any] = [status, None if status in FINISHED else now + self.lease_seconds]
        if status in FINISHED:
            sets.append("finished_at = ?")
            params.append(now)
        for name, value in fields.items():
            sets.append(f"{name} = ?")
            params.append(value)
        with self.store._write() as db:
            cursor = db.execute(self._sql(
                f"UPDATE {{t}} SET {', '.join(sets)} WHERE inbound = ? AND key = ? AND "
                f"owner = ? AND epoch = ? AND status IN ('claimed', 'answered', 'sending')"),
                (*params, claim.inbound, claim.key, self.owner, claim.epoch))
            if cursor.rowcount != 1:
                raise Fenced(f"message {claim.key} of inbound {claim.inbound} is no longer "
                             f"this listener's (epoch {claim.epoch}); it was taken over")
        claim.status = status
        for name, value in fields.items():
            setattr(claim, name, value)

    def renew(self, claims: list[InboundClaim]) -> int:
        """Extend the leases of these claims; returns how many are still this listener's."""
        if not claims:
            return 0
        now = self._now()
        held = 0
        with self.store._write() as db:
            for claim in claims:
                cursor = db.execute(self._sql(
                    "UPDATE {t} SET lease_until = ? WHERE inbound = ? AND key = ? AND owner = ? "
                    "AND epoch = ? AND status IN ('claimed', 'answered', 'sending')"),
                    (now + self.lease_seconds, claim.inbound, claim.key, self.owner, claim.epoch))
                held += cursor.rowcount == 1
        return held

    def payload(self, inbound: str, key: str) -> dict[str, Any] | None:
        """The message `key` of `inbound` as it was claimed (None: not in the ledger)."""
        rows = self.store._query(self._sql("SELECT payload FROM {t} WHERE inbound = ? AND "
                                           "key = ?"), (inbound, key))
        return json.loads(rows[0]["payload"] or "{}") if rows else None

    def status(self, inbound: str, key: str) -> str | None:
        rows = self.store._query(self._sql("SELECT status FROM {t} WHERE inbound = ? AND "
                                           "key = ?"), (inbound, key))
        return rows[0]["status"] if rows else None

    def list(self, inbound: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The newest messages, for `jarvis listen --list` (without payloads and answers)."""
        names = ("inbound", "key", "status", "sender", "received_at", "finished_at", "attempts",
                 "parts_sent", "unconfirmed_parts", "run_id", "conversation_id", "error")
        where, params = ("WHERE inbound = ?", (inbound,)) if inbound else ("", ())
        return self.store._query(self._sql(
            f"SELECT {', '.join(names)} FROM {{t}} {where} ORDER BY received_at DESC LIMIT ?"),
            (*params, int(limit)))
