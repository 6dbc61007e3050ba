"""1 000 runs due at once on the local daemon (SQLite), against the same rows in raw SQLite.

    python bench/bench_scheduler_burst.py [--runs 1000] [--workers 4] [--repeat 3] [--src DIR]

The daemon (`TaskScheduler.start()`, what `jarvis scheduler start` runs) with `--workers`
workers and a runner that does nothing, so only the scheduling path is measured: claims,
leases, fencing, recording. Runs/s = runs / (last recorded - due); CPU = this process's CPU
over the same span. Per run it also counts the SQL statements and write transactions on the
ledger's connection and the threads started.

Floor (same run, same rows: a copy of the same database): one thread, plain sqlite3, claims
batches of `--workers` due tasks in one transaction (insert the runs, move the tasks' next
run) and records each run in one transaction: 1 + 1/workers write transactions per run.

`--src DIR` measures another checkout's jarvis/ too (in a child process), e.g. main's
exported with `git archive main jarvis | tar -x -C DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def jarvis_burst(db: Path, runs: int, workers: int) -> dict[str, float]:
    from jarvis.core.events import EventBus, EventType
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(db)
    statements = [0, 0]  # all, write transactions

    def trace(sql: str) -> None:
        statements[0] += 1
        if sql.startswith("BEGIN"):
            statements[1] += 1

    bus = EventBus()
    done = threading.Event()
    finished = [0]

    def on_end(event: object) -> None:
        finished[0] += 1
        if finished[0] >= runs:
            done.set()

    bus.subscribe(EventType.SCHEDULER_TASK_END, on_end)
    scheduler = TaskScheduler(store=store, runner=lambda task, occurrence: "ok",
                              max_workers=workers, poll_seconds=0.2, bus=bus)
    started_threads = [0]
    original_start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        started_threads[0] += 1
        original_start(self)

    scheduler.start()
    time.sleep(0.3)  # the daemon is idle, waiting
    threading.Thread.start = counting_start  # type: ignore[method-assign]
    # Under the store's lock: set_trace_callback holds the GIL while it waits for the
    # connection, and a statement under way on the daemon's thread needs the GIL for its trace
    # (a deadlock that hung a round, now and then).
    with store._lock:
        store.db.conn.set_trace_callback(trace)
    try:
        due = time.time()
        cpu = time.process_time()
        with store.immediate() as conn:
            conn.execute("UPDATE tasks SET next_run = ?", (due,))
        scheduler._wake.set()
        if not done.wait(300):
            raise SystemExit(f"only {finished[0]} of {runs} runs finished")
        cpu = time.process_time() - cpu
        with store._lock:
            store.db.conn.set_trace_callback(None)
    finally:
        threading.Thread.start = original_start  # type: ignore[method-assign]
    last = store._query("SELECT max(finished_at) AS t, count(*) AS n, "
                        "sum(status = 'succeeded') AS ok FROM runs")[0]
    scheduler.stop(timeout=10)
    store.close()
    if last["ok"] != runs:
        raise SystemExit(f"expected {runs} succeeded runs, got {last}")
    span = last["t"] - due
    return {"runs_per_s": runs / span, "cpu_ms": cpu * 1000 / runs,
            "statements": statements[0] / runs, "transactions": statements[1] / runs,
            "threads": started_threads[0] / runs}


def floor_burst(db: Path, runs: int, workers: int) -> dict[str, float]:
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    statements = [0, 0]

    def trace(sql: str) -> None:
        statements[0] += 1
        if sql.startswith("BEGIN"):
            statements[1] += 1

    due = time.time()
    conn.execute("UPDATE tasks SET next_run = ?", (due,))
    conn.set_trace_callback(trace)
    cpu = time.process_time()
    start = time.perf_counter()
    left = runs
    while left:
        conn.execute("BEGIN IMMEDIATE")
        now = time.time()
        due_rows = conn.execute("SELECT id FROM tasks WHERE status = 'active' AND next_run <= ? "
                                "ORDER BY next_run LIMIT ?", (now, workers)).fetchall()
        claimed = []
        for (task_id,) in due_rows:
            cursor = conn.execute(
                "INSERT INTO runs (task_id, scheduled_for, attempt, status, trigger, claimed_by, "
                "lease_until, started_at) VALUES (?, ?, 1, 'running', 'schedule', 'floor', ?, ?)",
                (task_id, due, now + 60, now))
            conn.execute("UPDATE tasks SET next_run = ?, last_run = ?, updated_at = ? WHERE id = ?",
                         (now + 86400, now, now, task_id))
            claimed.append(cursor.lastrowid)
        conn.execute("COMMIT")
        for run_id in claimed:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE runs SET status = 'succeeded', finished_at = ?, answer = 'ok', "
                         "lease_until = NULL WHERE id = ? AND claimed_by = 'floor' AND "
                         "status = 'running'", (time.time(), run_id))
            conn.execute("COMMIT")
        left -= len(claimed)
    span = time.perf_counter() - start
    cpu = time.process_time() - cpu
    conn.close()
    return {"runs_per_s": runs / span, "cpu_ms": cpu * 1000 / runs,
            "statements": statements[0] / runs, "transactions": statements[1] / runs,
            "threads": 0.0}


def make_db(path: Path, runs: int) -> None:
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(path)
    api = TaskScheduler(store=store, runner=lambda t, o: "unused")
    for i in range(runs):
        api.add(f"echo {i}", every=86400)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--src", action="append", default=[])
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a database: run jarvis_burst on it
    args = parser.parse_args()
    if args.child:
        print(json.dumps(jarvis_burst(Path(args.child), args.runs, args.workers)))
        return

    here = str(Path(__file__).resolve().parent.parent)
    trees = [("this tree", here)] + [(f"--src {p}", str(Path(p).resolve())) for p in args.src]
    results: dict[str, list[dict[str, float]]] = {"floor (raw SQLite)": []}
    results.update({name: [] for name, _ in trees})
    with tempfile.TemporaryDirectory() as work:
        template = Path(work, "template.db")
        make_db(template, args.runs)
        for round_no in range(args.repeat):
            db = Path(work, f"floor{round_no}.db")
            shutil.copy(template, db)
            results["floor (raw SQLite)"].append(floor_burst(db, args.runs, args.workers))
            for name, root in trees:
                db = Path(work, f"{round_no}-{len(results[name])}-{name[-4:]}.db".replace("/", "_"))
                shutil.copy(template, db)
                env = dict(os.environ, PYTHONPATH=root)
                out = subprocess.run([sys.executable, __file__, "--child", str(db), "--runs",
                                      str(args.runs), "--workers", str(args.workers)],
                                     env=env, capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    raise SystemExit(f"{name}: {out.stderr[-2000:]}")
                results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))

    load = os.getloadavg()
    print(f"\n{args.runs} runs due at once, {args.workers} workers, {args.repeat} rounds, load "
          f"average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (2 shared cores)\n")
    print("| path | runs/s median (min-max) | vs floor | CPU ms/run | statements/run | "
          "write transactions/run | threads started/run |")
    print("|---|---|---|---|---|---|---|")
    floor = statistics.median(r["runs_per_s"] for r in results["floor (raw SQLite)"])
    for name, rows in results.items():
        rate = [r["runs_per_s"] for r in rows]
        med = statistics.median(rate)
        print(f"| {name} | {med:,.0f} ({min(rate):,.0f}-{max(rate):,.0f}) | {med / floor:.2f}x | "
              f"{statistics.median(r['cpu_ms'] for r in rows):.2f} | "
              f"{statistics.median(r['statements'] for r in rows):.1f} | "
              f"{statistics.median(r['transactions'] for r in rows):.2f} | "
              f"{statistics.median(r['threads'] for r in rows):.2f} |")


if __name__ == "__main__":
    main()
