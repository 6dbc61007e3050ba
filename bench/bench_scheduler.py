"""Scheduler figures: wake-up cost with 10 000 active tasks, firing latency, idle CPU.

    python bench/bench_scheduler.py [N_TASKS]

1. Per wake-up, the daemon asks "when is the next thing due?" (`next_wake`) and, when
   something is, claims it (`claim_due`, a BEGIN IMMEDIATE transaction). Measured on a store
   with N active tasks (default 10 000), against the same queries with the `tasks_due` index
   dropped (baseline, same run). Target: < 5 ms per wake-up.
2. A real `jarvis scheduler start` daemon on that store: tasks due over the next seconds, some
   scheduled in advance, some added by another process 0.5 s before they are due. Lateness =
   run start - scheduled time. Target: p99 < 1 s.
3. The same daemon idle for a few seconds: its CPU time per wall-clock second (from
   /proc/PID/stat), against a busy-polling loop of the same query (baseline).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def quick_runner(task, occurrence):
    """The bench daemon's TaskRunner: no work, so only the scheduler's latency is measured."""
    return "ok"


def fill(store, n: int, now: float) -> None:
    """n active tasks (a mix of interval and cron), due spread over the next day."""
    import json
    import random

    rng = random.Random(7)
    rows = []
    for i in range(n):
        kind = "interval" if i % 2 else "cron"
        value = str(rng.choice([600, 3600, 86400])) if kind == "interval" else rng.choice(
            ["0 8 * * *", "*/30 * * * *", "15 9 * * 1-5", "0 0 * * 0"])
        rows.append((f"t{i:06d}", f"task {i}", kind, value, "UTC", "[]", "[]", "active",
                     now + 3600 + rng.random() * 86400, now, now, now, 600.0, 0, 30.0, "retry",
                     json.dumps({})))
    with store.immediate() as conn:
        conn.executemany(
            "INSERT INTO tasks (id, prompt, schedule_type, schedule_value, timezone, tools, "
            "approved_tools, status, next_run, created_at, updated_at, anchor, timeout_seconds, "
            "max_retries, retry_backoff_seconds, on_crash, metadata) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wake_cost(db: Path, n: int) -> list[tuple[str, float, float]]:
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(db)
    now = time.time()
    fill(store, n, now)

    def wake_idle():
        store.next_wake()

    rows = []
    idle = timed(wake_idle, 300)
    rows.append(("next_wake (idle wake-up)", statistics.median(idle), pct(idle, 0.99)))
    claim = timed(lambda: store.claim_due(now=now, owner="bench:0:0", lease_seconds=60,
                                          limit=10, default_grace=3600), 300)
    rows.append(("claim_due, nothing due", statistics.median(claim), pct(claim, 0.99)))
    # Claim 10 due tasks per wake-up (each claim moves them on, so every round is fresh).
    store.db.conn.execute("UPDATE tasks SET next_run = ? WHERE rowid % 50 = 0", (now - 1,))
    store.db.conn.commit()
    busy = timed(lambda: store.claim_due(now=now, owner="bench:0:0", lease_seconds=60, limit=10,
                                         default_grace=10**9), 15)
    rows.append(("claim_due, 10 due (incl. writes)", statistics.median(busy), pct(busy, 0.99)))
    store.db.conn.execute("UPDATE runs SET status = 'succeeded' WHERE status = 'running'")
    store.db.conn.commit()

    # Baseline: the same wake-up query without the index on (status, next_run).
    store.db.conn.execute("DROP INDEX tasks_due")
    store.db.conn.commit()
    base = timed(wake_idle, 30)
    rows.append(("BASELINE next_wake without index", statistics.median(base), pct(base, 0.99)))
    store.db.conn.execute("CREATE INDEX tasks_due ON tasks (status, next_run)")
    store.db.conn.commit()
    store.close()
    return rows


def cpu_seconds(pid: int) -> float:
    """CPU time of the process's main thread (where the daemon loop runs), in ns precision
    from /proc/PID/schedstat (falling back to clock ticks from /proc/PID/stat)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def firing(db: Path, idle_seconds: float) -> dict[str, float]:
    from datetime import UTC, datetime

    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore

    def iso(ts: float) -> str:  # full precision, so the due time is exactly what we chose
        return datetime.fromtimestamp(ts, UTC).isoformat()

    env = dict(os.environ, JARVIS_SCHEDULER_DB=str(db),
               PYTHONPATH=os.pathsep.join([str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "scheduler", "start", "--runner",
                             "bench_scheduler:quick_runner"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = SchedulerStore(db)
    api = TaskScheduler(store=store, runner=quick_runner)
    try:
        time.sleep(2.0)  # let the daemon start and settle into its idle sleep
        cpu0, wall0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(idle_seconds)
        idle_cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - wall0)

        def wait_done(tasks: list) -> list[float]:
            ids = [t.id for t in tasks]
            marks = ",".join("?" * len(ids))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                done = store.db.conn.execute(f"SELECT count(*) FROM runs WHERE status = "
                                             f"'succeeded' AND task_id IN ({marks})", ids).fetchone()[0]
                if done == len(ids):
                    break
                time.sleep(0.1)
            return [r[0] for r in store.db.conn.execute(
                f"SELECT started_at - scheduled_for FROM runs WHERE task_id IN ({marks})", ids)]

        # a) scheduled in advance: the daemon sleeps until each one is due.
        start = time.time()
        ahead = wait_done([api.add("bench", at=iso(start + 2 + i * 0.25)) for i in range(20)])
        # b) added by another process 0.5 s before due while the daemon is idle (it only
        #    learns about them at its next poll).
        late = []
        for _ in range(10):
            late.append(api.add("bench", at=iso(time.time() + 0.5)))
            time.sleep(1.3)
        late_added = wait_done(late)
    finally:
        proc.terminate()
        proc.wait(30)
        store.close()
    return {"ahead": ahead, "late": late_added, "idle_cpu": idle_cpu, "idle_seconds": idle_seconds}


def busy_poll_cpu(db: Path, seconds: float) -> float:
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(db)
    cpu0, end = time.process_time(), time.monotonic() + seconds
    while time.monotonic() < end:
        store.next_wake()
    store.close()
    return (time.process_time() - cpu0) / seconds


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["JARVIS_HOME"] = tmp
        db = Path(tmp) / "scheduler.db"
        rows = wake_cost(db, n)
        print(f"\n1. wake-up cost with {n} active tasks (ms)")
        print("| measure | median | p99 |\n|---|---|---|")
        for name, med, p99 in rows:
            print(f"| {name} | {med:.3f} | {p99:.3f} |")
        print(f"ratio next_wake / no-index baseline: {rows[0][1] / rows[-1][1]:.3f}x")

        fire = firing(db, idle_seconds=10.0)
        base = busy_poll_cpu(db, 1.0)
        print(f"\n2. firing lateness (run start - due time, s), daemon on {n} tasks")
        print("| tasks | runs | p50 | p99 | max |\n|---|---|---|---|---|")
        for label, values, expected in (("scheduled ahead", fire["ahead"], 20),
                                        ("added 0.5 s before due", fire["late"], 10)):
            print(f"| {label} | {len(values)}/{expected} | {statistics.median(values):.3f} | "
                  f"{pct(values, 0.99):.3f} | {max(values):.3f} |")
        print("\n3. idle CPU (CPU seconds per wall second)")
        print("| measure | value |\n|---|---|")
        print(f"| idle daemon ({fire['idle_seconds']:g} s, main thread) | {fire['idle_cpu']:.6f} |")
        print(f"| BASELINE busy-poll loop of next_wake | {base:.4f} |")
        print(f"ratio idle daemon / busy poll: {fire['idle_cpu'] / base:.5f}x")


if __name__ == "__main__":
    main()
