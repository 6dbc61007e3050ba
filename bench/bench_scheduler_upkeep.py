"""Scheduler upkeep figures: listing a large task table, and run retention (keep_runs).

    python bench/bench_scheduler_upkeep.py [N_TASKS] [N_RUNS]

1. `jarvis schedule list` as a real subprocess on a store with N tasks (default 100 000): the
   default page (100 tasks) against `--limit 0` (every task, what `schedule list` did before
   paging: the baseline, same run); the same with `--json`; the `list_scheduled_tasks` tool's
   default page in process.
2. `keep_runs` on a runs table of N_RUNS finished runs (default 200 000) over 1 000 tasks:
   the first pass (keep a quarter, 50 per task: deletes 150 000 in batches of 500), then the steady-state pass
   the daemon repeats every hour (nothing to delete), and the longest single write
   transaction of the first pass (how long other processes may wait on the database).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fill_tasks(store, n: int, now: float) -> None:
    rows = [(f"t{i:06d}", f"task {i}", "interval", "3600", "UTC", "[]", "[]", "active",
             now + 3600 + i, now + i * 1e-3, now, now, 600.0, 0, 30.0, "retry", "{}")
            for i in range(n)]
    with store.immediate() as conn:
        conn.executemany(
            "INSERT INTO tasks (id, prompt, schedule_type, schedule_value, timezone, tools, "
            "approved_tools, status, next_run, created_at, updated_at, anchor, timeout_seconds, "
            "max_retries, retry_backoff_seconds, on_crash, metadata) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def cli_seconds(env: dict[str, str], *args: str, repeat: int = 3) -> tuple[float, int]:
    """Median wall time of `jarvis schedule list ARGS` and the number of lines it printed."""
    times, lines = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "jarvis.cli", "schedule", "list", *args],
                             env=env, capture_output=True, text=True, check=True).stdout
        times.append(time.perf_counter() - start)
        lines = len(json.loads(out)) if "--json" in args else len(out.splitlines())
    return statistics.median(times), lines


def listing(db: Path, n: int) -> list[tuple[str, float, int]]:
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store import SchedulerStore
    from jarvis.scheduler.tools import ListScheduledTasksTool

    store = SchedulerStore(db)
    fill_tasks(store, n, time.time())
    env = dict(os.environ, JARVIS_SCHEDULER_DB=str(db))
    rows = []
    for label, args in (("schedule list (default page)", ()),
                        ("BASELINE schedule list --limit 0 (all)", ("--limit", "0")),
                        ("schedule list --json (default page)", ("--json",)),
                        ("BASELINE schedule list --json --limit 0", ("--json", "--limit", "0"))):
        seconds, count = cli_seconds(env, *args, repeat=1 if "0" in args else 3)
        rows.append((label, seconds, count))
    start = time.perf_counter()
    for _ in range(3):
        subprocess.run([sys.executable, "-m", "jarvis.cli", "--help"], env=env,
                       capture_output=True, check=True)
    rows.append(("floor: jarvis --help", (time.perf_counter() - start) / 3, 0))
    tool = ListScheduledTasksTool(scheduler=TaskScheduler(store=store, runner=lambda t, o: ""))
    start = time.perf_counter()
    page = json.loads(tool.execute().content)
    rows.append(("list_scheduled_tasks tool, default page (in process)",
                 time.perf_counter() - start, len(page)))
    store.close()
    return rows


def retention(db: Path, n_runs: int) -> dict[str, float]:
    from jarvis.scheduler.store import SchedulerStore

    store = SchedulerStore(db)
    now = time.time()
    per_task = n_runs // 1000
    keep = max(per_task // 4, 1)
    rows = [(f"r{t:04d}", now - (per_task - i) * 60.0, 1, "succeeded", "schedule",
             now - (per_task - i) * 60.0, now - (per_task - i) * 60.0 + 1, "ok")
            for t in range(1000) for i in range(per_task)]
    with store.immediate() as conn:
        conn.executemany("INSERT INTO runs (task_id, scheduled_for, attempt, status, trigger, "
                         "started_at, finished_at, answer) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    start = time.perf_counter()
    deleted = store.prune_runs(now=now, keep_per_task=keep)
    first = time.perf_counter() - start
    start = time.perf_counter()
    again = store.prune_runs(now=now, keep_per_task=keep)
    steady = time.perf_counter() - start
    left = store.db.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    # The longest write transaction of a pass: deleting one batch of 500 ids by id (what a
    # claim in another process may have to wait for).
    ids = [r[0] for r in store.db.conn.execute("SELECT id FROM runs ORDER BY random() LIMIT 500")]
    start = time.perf_counter()
    with store.immediate() as conn:
        conn.execute(f"DELETE FROM runs WHERE id IN ({','.join('?' * len(ids))})", ids)
    batch_seconds = time.perf_counter() - start
    store.close()
    return {"runs": len(rows), "keep": keep, "deleted": deleted, "first": first, "batch": batch_seconds,
            "steady": steady, "steady_deleted": again, "left": left}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    n_runs = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["JARVIS_HOME"] = tmp
        rows = listing(Path(tmp) / "tasks.db", n)
        print(f"\n1. listing {n} tasks (seconds; the CLI as a subprocess, median of 3, baselines 1)")
        print("| measure | seconds | tasks shown |\n|---|---|---|")
        for label, seconds, count in rows:
            print(f"| {label} | {seconds:.3f} | {count} |")
        print(f"ratio default page / all: {rows[0][1] / rows[1][1]:.3f}x")
        r = retention(Path(tmp) / "runs.db", n_runs)
        print(f"\n2. keep_runs = {r['keep']} per task on {r['runs']} finished runs over 1000 tasks")
        print("| measure | value |\n|---|---|")
        print(f"| first pass: deleted | {r['deleted']} in {r['first']:.2f} s |")
        print(f"| longest write transaction (one batch of 500) | {r['batch'] * 1000:.0f} ms |")
        print(f"| steady-state pass (hourly; deleted {r['steady_deleted']}) | "
              f"{r['steady'] * 1000:.0f} ms |")
        print(f"| runs left | {r['left']} |")


if __name__ == "__main__":
    main()
