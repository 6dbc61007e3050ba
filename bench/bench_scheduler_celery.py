"""Scale-out figures: 1 000 occurrences due at once on Celery workers vs the local runner, and
what a claim costs on a PostgreSQL ledger holding 100 000 tasks.

    python bench/bench_scheduler_celery.py [--runs 1000] [--tasks 100000] [--concurrency 4]

Needs the test extra (`pip install -e '.[test]'`): it starts a real PostgreSQL (fsync on) and
a real Redis on loopback ports with tests/servers.py, and real `jarvis scheduler start` /
`jarvis worker` subprocesses whose runs do no work (tests/scheduler_support.py ScriptRunner,
"echo"), so only the scheduling path is measured.

1. Runs per second and fire lateness (run start - scheduled time, p50/p99) for `--runs` tasks
   all due at the same instant, in one run, for: the local runner on SQLite (the default), the
   local runner on PostgreSQL, 1 Celery worker and 3 Celery workers (each `--concurrency`
   processes). Runs/s = runs / (last finish - due time).
2. On a PostgreSQL ledger with `--tasks` active tasks: the daemon's idle wake-up (`next_wake`),
   a claim with nothing due, and claims that take 100 due runs (dispatch) or 10 (local); the
   same on SQLite as the baseline, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path[:0] = [str(ROOT), str(TESTS)]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def env_for(home: Path, log: Path, store: str, broker: str, runner: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(JARVIS_HOME=str(home), SCHED_TEST_LOG=str(log), JARVIS_LOAD_PLUGINS="",
               PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]))
    for var in ("JARVIS_SCHEDULER_STORE", "JARVIS_SCHEDULER_RUNNER", "JARVIS_CELERY_BROKER"):
        env.pop(var, None)
    if store:
        env["JARVIS_SCHEDULER_STORE"] = store
    if runner:
        env["JARVIS_SCHEDULER_RUNNER"] = runner
    if broker:
        env["JARVIS_CELERY_BROKER"] = broker
    return env


def spawn(env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_line(proc: subprocess.Popen, needle: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    for line in proc.stderr:
        if needle in line:
            # Keep draining stderr so the process never blocks on a full pipe.
            import threading

            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"{proc.args} did not log {needle!r}")


def cpu_seconds(groups: set[int]) -> float:
    """User + system CPU of every live process in these process groups (pool processes too)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in groups:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def stop(procs: list[subprocess.Popen]) -> None:
    import signal

    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def burst(label: str, *, runs: int, store_url: str, broker: str, workers: int,
          concurrency: int, pg: object, work: Path) -> dict:
    """`runs` tasks due at one instant; returns runs/s and lateness."""
    from servers import new_database

    from jarvis.scheduler.scheduler import TaskScheduler

    case = work / label.replace(" ", "_")
    case.mkdir()
    (case / "config.toml").write_text("[scheduler]\npoll_seconds = 0.2\n")
    if store_url == "postgres":
        store_url = new_database(pg, f"burst_{workers}_{os.getpid()}")
        from jarvis.scheduler.store_postgres import PostgresStore

        store = PostgresStore(store_url)
    else:
        from jarvis.scheduler.store import SchedulerStore

        store = SchedulerStore(case / "scheduler.db")
        store_url = ""
    api = TaskScheduler(store=store, runner=lambda t, o: "unused")
    for i in range(runs):
        api.add(f"echo {i}", every=86400)
    env = env_for(case / "home", case / "runs.log", store_url, broker if workers else "",
                  "celery" if workers else "")
    env["JARVIS_SCHEDULER_DB"] = str(case / "scheduler.db")  # used when store_url is empty
    (case / "home").mkdir()
    runner = ["--runner", "scheduler_support:ScriptRunner"]
    procs = []
    try:
        for _ in range(workers):
            w = spawn(env, case, "worker", "--concurrency", str(concurrency), *runner)
            procs.append(w)
            wait_line(w, "ready.")
        d = spawn(env, case, "scheduler", "start", *([] if workers else
                                                     [*runner, "--max-workers", str(concurrency)]))
        procs.append(d)
        wait_line(d, "started on")
        groups = {p.pid for p in procs}
        cpu_before = cpu_seconds(groups)
        due = time.time() + 2.0
        table = "jarvis_tasks" if store_url else "tasks"
        mark = "%s" if store_url else "?"
        if store_url:
            store._query(f"UPDATE {table} SET next_run = {mark}", (due,))
        else:
            with store.immediate() as conn:
                conn.execute(f"UPDATE {table} SET next_run = {mark}", (due,))
        deadline = time.time() + 300
        while time.time() < deadline:
            done = [r for r in store.list_runs(limit=None) if r.status in ("succeeded", "failed")]
            if len(done) >= runs:
                break
            time.sleep(0.25)
        else:
            raise RuntimeError(f"{label}: only {len(done)} of {runs} runs finished")
        cpu = cpu_seconds(groups) - cpu_before
    finally:
        stop(procs)
    lateness = [r.started_at - r.scheduled_for for r in done]
    span = max(r.finished_at for r in done) - due
    failed = sum(r.status != "succeeded" for r in done)
    store.close()
    return {"label": label, "runs_per_s": runs / span, "p50": pct(lateness, 0.5),
            "p99": pct(lateness, 0.99), "failed": failed, "span": span,
            "cpu_ms": cpu * 1000 / runs}


def claim_costs(pg: object, tasks: int, work: Path) -> list[tuple[str, list[float], list[float]]]:
    """Wake-up and claim costs on a ledger of `tasks` active tasks: PostgreSQL vs SQLite."""
    from servers import new_database

    from jarvis.scheduler.store import SchedulerStore
    from jarvis.scheduler.store_postgres import PostgresStore

    now = time.time()
    rows = [(f"t{i:07d}", f"echo {i}", "interval", "86400", "UTC", "[]", "[]", "active",
             now + 3600 + (i % 86400), now, now, now, 600.0, 0, 30.0, "retry", json.dumps({}))
            for i in range(tasks)]
    cols = ("id, prompt, schedule_type, schedule_value, timezone, tools, approved_tools, status, "
            "next_run, created_at, updated_at, anchor, timeout_seconds, max_retries, "
            "retry_backoff_seconds, on_crash, metadata")
    pg_store = PostgresStore(new_database(pg, f"claims_{os.getpid()}"))
    with pg_store._tx() as cur, cur.copy(f"COPY jarvis_tasks ({cols}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    pg_store._query("ANALYZE jarvis_tasks")
    sq_store = SchedulerStore(work / "claims.db")
    with sq_store.immediate() as conn:
        conn.executemany(f"INSERT INTO tasks ({cols}) VALUES ({', '.join('?' * 17)})", rows)

    def make_due(store: object, first: int, count: int) -> None:
        ids = [f"t{i:07d}" for i in range(first, first + count)]
        if isinstance(store, PostgresStore):
            store._query("UPDATE jarvis_tasks SET next_run = %s WHERE id = ANY(%s)",
                         (time.time() - 1, ids))
        else:
            with store.immediate() as conn:
                conn.executemany("UPDATE tasks SET next_run = ? WHERE id = ?",
                                 [(time.time() - 1, i) for i in ids])

    out = []
    for name, store in (("PostgreSQL", pg_store), ("SQLite", sq_store)):
        wake, empty, local10, dispatch100 = [], [], [], []
        for _ in range(200):
            t = time.perf_counter()
            store.next_wake()
            wake.append(time.perf_counter() - t)
            t = time.perf_counter()
            store.claim_due(now=time.time(), owner="bench", lease_seconds=60, limit=10,
                            default_grace=3600)
            empty.append(time.perf_counter() - t)
        first = 0
        for _ in range(50):
            make_due(store, first, 10)
            first += 10
            t = time.perf_counter()
            claims = store.claim_due(now=time.time(), owner="bench", lease_seconds=60, limit=10,
                                     default_grace=3600)
            local10.append(time.perf_counter() - t)
            assert len(claims) == 10, len(claims)
        if isinstance(store, PostgresStore):
            for _ in range(30):
                make_due(store, first, 100)
                first += 100
                t = time.perf_counter()
                claims = store.claim_for_dispatch(now=time.time(), owner="bench",
                                                  dispatch_seconds=300, limit=100,
                                                  default_grace=3600)
                dispatch100.append(time.perf_counter() - t)
                assert len(claims) == 100, len(claims)
        out.append((name, wake, empty, local10, dispatch100))
        store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--no-fsync", action="store_true",
                        help="PostgreSQL without fsync (shows what commits cost)")
    parser.add_argument("--only", default="", help="runners to measure, separated by ';'")
    args = parser.parse_args()
    from servers import start_postgres, start_redis

    work = Path(tempfile.mkdtemp(prefix="jarvis-bench-celery-"))
    pg = start_postgres(durable=not args.no_fsync)
    redis = start_redis()
    try:
        results = []
        for label, store, workers in (("local runner, SQLite", "sqlite", 0),
                                      ("local runner, PostgreSQL", "postgres", 0),
                                      ("1 Celery worker", "postgres", 1),
                                      ("3 Celery workers", "postgres", 3)):
            if args.only and label not in args.only.split(";"):
                continue
            results.append(burst(label, runs=args.runs, store_url=store, broker=redis.url,
                                 workers=workers, concurrency=args.concurrency, pg=pg, work=work))
            r = results[-1]
            print(f"  {label}: {r['runs_per_s']:.0f} runs/s, lateness p50 {r['p50']:.2f} s "
                  f"p99 {r['p99']:.2f} s, {r['cpu_ms']:.1f} ms CPU per run, {r['failed']} "
                  f"failed", file=sys.stderr)
        base = results[0]["runs_per_s"]
        print(f"\n{args.runs} occurrences due at once; {args.concurrency} runs at a time per "
              f"daemon (local) or per worker (Celery)\n")
        print("| runner | runs/s | vs local SQLite | lateness p50 (s) | lateness p99 (s) "
              "| jarvis CPU per run (ms) |")
        print("|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['label']} | {r['runs_per_s']:.0f} | {r['runs_per_s'] / base:.2f}x | "
                  f"{r['p50']:.2f} | {r['p99']:.2f} | {r['cpu_ms']:.1f} |")
        costs = claim_costs(pg, args.tasks, work)
        print(f"\nclaim cost with {args.tasks} active tasks (ms; median / p99)\n")
        print("| ledger | idle wake-up (next_wake) | claim, nothing due | claim 10 (local) "
              "| claim 100 for dispatch |")
        print("|---|---|---|---|---|")
        for name, wake, empty, local10, dispatch100 in costs:
            cells = [f"{statistics.median(v) * 1000:.2f} / {pct(v, 0.99) * 1000:.2f}" if v
                     else "-" for v in (wake, empty, local10, dispatch100)]
            print(f"| {name} | " + " | ".join(cells) + " |")
    finally:
        redis.stop()
        pg.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
