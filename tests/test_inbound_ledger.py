"""The inbound ledger's claims, leases and fencing epochs, on both scheduler stores: the SQLite
file and the PostgreSQL ledger several machines share (a real server, tests/servers.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest
from waiting import wait_for

from jarvis.inbound.ledger import Fenced, InboundLedger
from jarvis.scheduler.store import SchedulerStore, owner_id


def _dead_owner() -> str:
    """The owner id of a process of this machine that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    boot, pidns = owner_id().split(":")[3:]
    return f"{socket.gethostname()}:{proc.pid}:dead:{boot}:{pidns}"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        made = SchedulerStore(tmp_path / "scheduler.db")
    else:
        from jarvis.scheduler.store_postgres import PostgresStore

        made = PostgresStore(request.getfixturevalue("pg_url"))
    yield made
    made.close()


def test_one_claim_wins_and_a_finished_message_stays_finished(store):
    a = InboundLedger(store, lease_seconds=60)
    b = InboundLedger(store, lease_seconds=60)
    claim, state = a.claim("phone", "1:100", {"text": "hi"}, "42")
    assert claim is not None and state is None and claim.epoch == 1
    assert b.claim("phone", "1:100", {"text": "hi"}, "42") == (None, "busy")
    a.advance(claim, "answered", answer="hello")
    a.advance(claim, "sent")
    assert b.claim("phone", "1:100", {}, "42") == (None, "sent")
    assert a.status("phone", "1:100") == "sent"
    with pytest.raises(Fenced):
        a.advance(claim, "sending")  # a finished row never moves again


def test_a_dead_owners_claim_is_taken_over_and_the_old_owner_fenced(store):
    dead = InboundLedger(store, owner=_dead_owner(), lease_seconds=60)
    old, _ = dead.claim("phone", "1:7", {"text": "hi"}, "42")
    dead.advance(old, "answered", answer="recorded answer")
    live = InboundLedger(store, lease_seconds=60)
    (claim,) = live.stale("phone")
    assert (claim.epoch, claim.status, claim.answer, claim.attempts) == (2, "answered",
                                                                         "recorded answer", 2)
    with pytest.raises(Fenced):
        dead.advance(old, "sending", sending_part=0)  # the old owner can neither send...
    assert dead.renew([old]) == 0  # ...nor keep its lease
    live.advance(claim, "sent")
    assert live.stale("phone") == []


def test_an_expired_lease_is_taken_over(store):
    slow = InboundLedger(store, lease_seconds=0.01)
    claim, _ = slow.claim("mail", "u/1", {}, "a@b.c")
    other = InboundLedger(store, lease_seconds=60)
    # The claim is the other's once the 0.01 s lease has run out (and not renewed).
    taken = wait_for(lambda: other.claim("mail", "u/1", {}, "a@b.c")[0], 10, "the takeover")
    assert taken.epoch == 2
    with pytest.raises(Fenced):
        slow.advance(claim, "answered", answer="late")


def test_racing_claims_have_one_winner(store):
    ledgers = [InboundLedger(store, lease_seconds=60) for _ in range(8)]
    wins: list[object] = []
    start = threading.Barrier(len(ledgers))

    def race(ledger: InboundLedger) -> None:
        start.wait()
        claim, _ = ledger.claim("phone", "1:55", {}, "42")
        if claim is not None:
            wins.append(claim)

    threads = [threading.Thread(target=race, args=(ledger,)) for ledger in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1


def test_payloads_are_kept_exactly(store):
    ledger = InboundLedger(store)
    payload = {"text": "ünïcode \x1b[2J", "untrusted": [{"label": "x", "text": "y" * 10_000}]}
    claim, _ = ledger.claim("phone", "k", payload, "42")
    assert claim.payload == payload
