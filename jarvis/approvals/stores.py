"""Which approvals store a config chooses: the scheduler's PostgreSQL ledger when `[scheduler]
store` names one (so every machine that runs or continues tasks shares it), else the SQLite
file (`[approvals] db_path`, default `$JARVIS_HOME/approvals.db`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def approvals_path(config: Any) -> Path:
    """Where the SQLite approvals store is (it may not exist yet)."""
    from jarvis.core.paths import jarvis_home

    configured = getattr(getattr(config, "approvals", None), "db_path", "") or ""
    if configured:
        return Path(configured).expanduser()
    return jarvis_home() / "approvals.db"


def shared_ledger(config: Any) -> str:
    """The PostgreSQL URL of the scheduler's ledger, when the config names one ("" if not)."""
    url = (getattr(getattr(config, "scheduler", None), "store", "") or "").strip()
    return url if url.split("://", 1)[0].lower() in ("postgresql", "postgres") else ""


def open_approvals(config: Any = None, *, create: bool = True) -> Any:
    """The store `config` chooses: the scheduler's PostgreSQL ledger when it names one, else
    the SQLite file. `create=False`: None when there is no SQLite file yet (a reader must not
    make an empty database)."""
    url = shared_ledger(config)
    if url:
        from jarvis.approvals.store_postgres import PostgresApprovalStore

        return PostgresApprovalStore(url)
    path = approvals_path(config)
    if not create and not path.exists():
        return None
    from jarvis.approvals.store import ApprovalStore

    return ApprovalStore(path)
