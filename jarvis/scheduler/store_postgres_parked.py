"""The PostgreSQL ledger's runs that wait for the person (jarvis.approvals): park, list,
claim a continuation once (with the next epoch, like any dispatch), expire, and put a
continuation whose process died back to parked. A part of PostgresStore
(jarvis.scheduler.store_postgres), which gives `_tx`, `_query`, `_locked_task`,
`_after_attempt` and `_store_log_entry`."""

from __future__ import annotations

from typing import Any

from jarvis.scheduler.records import Run
from jarvis.scheduler.store_common import MAX_ERROR_CHARS, Claim, _clip, _run

# The database clock as a POSIX timestamp: leases are set and judged with it.
NOW = "EXTRACT(EPOCH FROM now())::float8"


class PostgresParkedRuns:
    """Parked runs on PostgresStore (see the module docstring)."""

    _tx: Any
    _query: Any
    _locked_task: Any
    _after_attempt: Any
    _store_log_entry: Any

    def park_run(self, run_id: int, owner: str, *, now: float, run_log_id: str | None,
                 note: str, epoch: int | None = None,
                 log_entry: dict[str, Any] | None = None) -> Run | None:
        """The run `owner` holds (with `epoch`, for a worker) stopped before a call that
        needs the person: "parked", holding its task, until a continuation is claimed or it
        expires. None: it is no longer this owner's (nothing written)."""
        fence = " AND epoch = %s" if epoch is not None else ""
        with self._tx() as cur:
            cur.execute(
                "UPDATE jarvis_runs SET status = 'parked', parked_at = %s, lease_until = NULL, "
                "run_log_id = %s, error = %s, error_type = 'parked' WHERE id = %s AND "
                f"claimed_by = %s AND status = 'running'{fence} RETURNING *",
                (now, run_log_id, _clip(note, MAX_ERROR_CHARS), run_id, owner)
                + ((epoch,) if epoch is not None else ()))
            row = cur.fetchone()
            if row is None:
                return None
            run = _run(row)
            cur.execute("UPDATE jarvis_tasks SET last_outcome = 'parked', updated_at = %s "
                        "WHERE id = %s", (now, run.task_id))
            if run_log_id and log_entry is not None:
                self._store_log_entry(cur, run_id, run_log_id, log_entry)
            return run

    def parked_runs(self, limit: int = 500) -> list[Run]:
        """Runs waiting for the person, oldest first."""
        rows = self._query("SELECT * FROM jarvis_runs WHERE status = 'parked' ORDER BY "
                           "parked_at LIMIT %s", (limit,))
        return [_run(r) for r in rows]

    def claim_parked(self, run_id: int, *, now: float, owner: str, lease_seconds: float,
                     dispatch: bool = False) -> Claim | None:
        """Claim the continuation of a parked run, once (compare-and-set "parked" ->
        "running" for this owner, or -> "dispatched" with the next epoch for workers). None:
        another daemon took it. A run of a cancelled task is not continued."""
        # Sent to the workers like a due run: dispatched, unsent until the daemon marks it.
        status, extra = ("dispatched", f", dispatched_at = {NOW}, sent_at = NULL") if dispatch \
            else ("running", "")
        with self._tx() as cur:
            cur.execute(
                f"UPDATE jarvis_runs SET status = %s, claimed_by = %s, lease_until = {NOW} + %s, "
                f"epoch = epoch + 1, resumes = resumes + 1, error = NULL, error_type = NULL"
                f"{extra} WHERE id = %s AND status = 'parked' RETURNING *",
                (status, owner, lease_seconds, run_id))
            row = cur.fetchone()
            if row is None:
                return None
            run = _run(row)
            task = self._locked_task(cur, run.task_id)
            if task is None or task.status == "cancelled":
                cur.execute("UPDATE jarvis_runs SET status = 'skipped', finished_at = %s, "
                            "error = 'not continued: task cancelled while it waited for "
                            "approval', lease_until = NULL WHERE id = %s", (now, run_id))
                return None
            return Claim(task, run)

    def expire_run(self, run_id: int, *, now: float, error: str) -> Run | None:
        """A parked run nobody answered in time ends "expired" (never retried)."""
        with self._tx() as cur:
            cur.execute("UPDATE jarvis_runs SET status = 'expired', finished_at = %s, "
                        "error = %s, error_type = 'expired', lease_until = NULL WHERE id = %s "
                        "AND status = 'parked' RETURNING *",
                        (now, _clip(error, MAX_ERROR_CHARS), run_id))
            row = cur.fetchone()
            if row is None:
                return None
            run = _run(row)
            self._after_attempt(cur, run, now=now, retry=False, crashed=False)
            return run

    def _repark(self, cur: Any, run_id: int) -> bool:
        """A continuation whose worker or daemon died goes back to "parked" (the next epoch
        fences the stale one) while its task's on_crash is "retry" and it has not been
        re-continued more than its retries allow."""
        cur.execute("SELECT r.parked_at, r.resumes, t.on_crash, t.max_retries FROM jarvis_runs "
                    "r JOIN jarvis_tasks t ON t.id = r.task_id WHERE r.id = %s", (run_id,))
        row = cur.fetchone()
        if (row is None or row["parked_at"] is None or row["on_crash"] != "retry"
                or row["resumes"] > 1 + (row["max_retries"] or 0)):
            return False
        cur.execute("UPDATE jarvis_runs SET status = 'parked', claimed_by = NULL, lease_until = "
                    "NULL, epoch = epoch + 1, error = 'its continuation stopped (its process or "
                    "machine died); it continues again', error_type = 'parked' WHERE id = %s",
                    (run_id,))
        return True
