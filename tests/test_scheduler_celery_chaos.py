"""Chaos on the scale-out path: two dispatch daemons and three Celery workers share one
PostgreSQL ledger and one Redis broker; for half a minute (CHAOS_SECONDS=300 for a longer soak),
and at least until 5 workers and 2 daemons were killed, random workers and daemons are killed
with SIGKILL (a worker with its pool processes, as a lost machine) and restarted; then no new
occurrences are made and everything drains.

Judged from two independent records: the ledger, and a log each run appends on its own
(SCHED_TEST_LOG, written by the script runner on the worker, not by the scheduler):
- 0 lost: every occurrence of every task from its first to its last is a run or inside a
  "skipped" record; nothing is left pending, dispatched or running;
- 0 doubled: no attempt of an occurrence started twice, at most one success per occurrence;
- every re-run is accounted for by on_crash: attempt n+1 exists only after attempt n was
  recorded as crashed/interrupted on a task with on_crash = retry (and retries left); a task
  with on_crash = fail never has a second attempt.
"""

from __future__ import annotations

import os
import random
import textwrap
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from celery_support import daemon, pg_rows, scaleout_env, worker
from scheduler_support import read_log
from waiting import wait_for

from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store_postgres import PostgresStore

CHAOS_SECONDS = float(os.environ.get("CHAOS_SECONDS", 30))
MIN_KILLS = {"worker": 5, "daemon": 2}
INTERVAL = 2.0
TASKS = 10
RETRIES = 3  # for on_crash = retry tasks: crashed attempts are re-run while attempt < 1 + 3


@pytest.mark.slow
def test_kill_9_workers_and_daemons_loses_and_doubles_nothing(cli_env, pg_url, redis_server,
                                                              tmp_path):
    seed = int(os.environ.get("CHAOS_SEED", time.time()))
    rng = random.Random(seed)
    log = tmp_path / "runner.log"
    Path("config.toml").write_text(textwrap.dedent("""
        [scheduler]
        poll_seconds = 0.2
        lease_seconds = 2

        [scheduler.celery]
        dispatch_timeout = 3
    """))
    env = scaleout_env(cli_env, pg_url, redis_server.url, log)
    store = PostgresStore(pg_url)
    api = TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    tasks = {}
    for i in range(TASKS):
        policy = "retry" if i % 2 == 0 else "fail"
        task = api.add("sleep 0.8", every=INTERVAL, on_crash=policy,
                       max_retries=RETRIES if policy == "retry" else 0, retry_backoff_seconds=0)
        tasks[task.id] = task

    runner = ("--runner", "scheduler_support:ScriptRunner")
    workers = [worker(env, "--concurrency", "2", *runner) for _ in range(3)]
    daemons = [daemon(env), daemon(env)]
    kills = Counter()
    try:
        end = time.monotonic() + CHAOS_SECONDS
        while time.monotonic() < end or any(kills[k] < n for k, n in MIN_KILLS.items()):
            time.sleep(rng.uniform(1.5, 4.0))
            if sum(kills.values()) % 3 != 2:  # two workers, then a daemon, and so on
                i = rng.randrange(len(workers))
                workers[i].kill9()
                workers[i].close()
                kills["worker"] += 1
                workers[i] = worker(env, "--concurrency", "2", *runner)
            else:
                i = rng.randrange(len(daemons))
                daemons[i].kill9()
                daemons[i].close()
                kills["daemon"] += 1
                daemons[i] = daemon(env)
        # Drain: no new occurrences (tasks stay active, so queued re-runs still run).
        pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = NULL")

        def drained() -> bool:
            return not pg_rows(pg_url, "SELECT 1 FROM jarvis_runs WHERE status IN "
                                       "('pending', 'dispatched', 'running') LIMIT 1")

        wait_for(drained, timeout=60, what="the ledger to drain", interval=0.25)
    finally:
        for p in workers + daemons:
            p.close()
        store.close()

    rows = pg_rows(pg_url, "SELECT task_id, scheduled_for, attempt, status, error_type, trigger, "
                           "skipped_count, skipped_until FROM jarvis_runs ORDER BY id")
    events = read_log(log)
    summary = (f"seed {seed}: {len(rows)} records, {len(events)} log events, kills {dict(kills)}")
    assert all(kills[k] >= n for k, n in MIN_KILLS.items()), summary

    # 0 doubled -------------------------------------------------------------------------
    starts = Counter((e["task_id"], e["scheduled_for"], e["attempt"]) for e in events
                     if e["event"] == "start")
    doubled = [k for k, n in starts.items() if n > 1]
    assert doubled == [], f"{summary}: attempts executed twice: {doubled[:5]}"
    successes = Counter((r[0], r[1]) for r in rows if r[3] == "succeeded")
    assert max(successes.values()) == 1, summary
    keys = Counter((r[0], r[1], r[2]) for r in rows)
    assert max(keys.values()) == 1, summary

    # every started attempt is recorded, and every recorded success really ran ----------
    recorded = {(r[0], r[1], r[2]): r for r in rows}
    assert set(starts) <= set(recorded), summary
    ended = {(e["task_id"], e["scheduled_for"], e["attempt"]) for e in events if e["event"] == "end"}
    assert {k for k, r in recorded.items() if r[3] == "succeeded"} <= ended, summary

    # 0 lost ------------------------------------------------------------------------------
    assert not [r for r in rows if r[3] not in ("succeeded", "failed", "skipped")], summary
    occurrences = 0
    for task_id, task in tasks.items():
        covered = set()
        for r in rows:
            if r[0] != task_id:
                continue
            if r[3] == "skipped" and r[6]:
                count = round((r[7] - r[1]) / INTERVAL) + 1
                assert count == r[6], f"{summary}: skipped record of {r[6]} spans {count}"
                covered.update(round((r[1] - task.anchor) / INTERVAL) + k for k in range(count))
            else:
                covered.add(round((r[1] - task.anchor) / INTERVAL))
        assert covered, f"{summary}: task {task_id} never ran"
        expected = set(range(1, max(covered) + 1))
        assert covered == expected, f"{summary}: task {task_id} lost {sorted(expected - covered)[:10]}"
        occurrences += len(covered)
    assert occurrences >= TASKS * CHAOS_SECONDS / INTERVAL * 2 / 3, summary

    # every re-run is accounted for by on_crash --------------------------------------------
    chains: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r[3] != "skipped" or not r[6]:
            chains[(r[0], r[1])].append(r)
    reruns = Counter()
    for (task_id, _), chain in chains.items():
        chain.sort(key=lambda r: r[2])
        assert [r[2] for r in chain] == list(range(1, len(chain) + 1)), f"{summary}: {chain}"
        policy = tasks[task_id].on_crash
        for earlier, later in zip(chain, chain[1:], strict=False):
            assert earlier[3] == "failed" and earlier[4] in ("crashed", "interrupted"), \
                f"{summary}: re-run after {earlier}"
            assert policy == "retry", f"{summary}: on_crash=fail task re-ran: {chain}"
            assert later[5] == "recovery"
            reruns[policy] += 1
        last = chain[-1]
        if last[3] == "failed":
            assert last[4] in ("crashed", "interrupted"), f"{summary}: {last}"
            if policy == "retry":  # a crashed attempt with retries left is always re-run
                assert last[2] >= 1 + RETRIES, f"{summary}: crashed, retries left, not re-run: {last}"
    print(f"{summary}; {occurrences} occurrences, re-runs {dict(reruns)}, "
          f"crashed finals {sum(1 for c in chains.values() if c[-1][3] == 'failed')}")
