"""The checks of `jarvis doctor` beyond the sandbox: what a user needs for `jarvis ask` and the
rest to work, each a Check (name, status, summary, details).

status: "ok"; "warn" (something will not work, `ask` still does); "fail" (`jarvis ask` cannot
work: an invalid config, no engine, a model the engine does not offer); "info". Every check
bounds its own time (the engine's discovery and connect timeouts, the MCP connect timeout).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# extra -> (packages it installs, what it is for)
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "web": (("trafilatura", "ddgs"), "web_fetch and web_search's duckduckgo backend"),
    "channels": (("apprise",), "notification channels: channel_* tools, schedule --notify"),
    "celery": (("celery", "redis"), "scheduled runs on Celery workers, runner = \"celery\""),
    "postgres": (("psycopg",), "the shared PostgreSQL ledger, [scheduler] store"),
}


@dataclass(slots=True)
class Check:
    name: str
    status: str
    summary: str
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "summary": self.summary,
                "details": list(self.details)}


def load_config_check() -> tuple[Any, Check]:
    """The config (every [tools.NAME] table checked), or the defaults when it is invalid."""
    from jarvis.core.config import JarvisConfig, load_config
    from jarvis.errors import JarvisError
    from jarvis.extensions import check_tool_tables

    try:
        config = load_config()
    except JarvisError as exc:
        return JarvisConfig(), Check("config", "fail", str(exc), [
            "fix it first: the checks below use the built-in defaults"])
    try:
        check_tool_tables(config)
    except JarvisError as exc:
        return config, Check("config", "fail", str(exc))
    where = str(config.source) if config.source else "no config.toml (defaults and environment)"
    tables = len(config.tools.settings)
    return config, Check("config", "ok", f"{where}: valid" + (
        f", {tables} tool table(s) checked" if tables else ""))


def engine_checks(config: Any) -> list[Check]:
    """The engine `jarvis ask` would use is reachable, and offers the configured model."""
    from jarvis.engine.backends import BACKENDS, base_url
    from jarvis.engine.discovery import ProbeResult, discover_engine, probe
    from jarvis.errors import EngineError
    from jarvis.security.redact import redact_url

    ec = config.engine
    found: ProbeResult | None = None
    if ec.default and ec.default in BACKENDS:
        url = base_url(BACKENDS[ec.default], getattr(ec.hosts, ec.default))
        key = os.environ.get("OPENAI_API_KEY") if ec.default == "openai" else None
        found = probe(url, max(ec.connect_timeout, ec.discovery_timeout), ec.default, key)
        if not found.ok:
            return [Check("engine", "fail", f"{ec.default} at {redact_url(url)} is not "
                          f"reachable: {found.error}", [
                              "start it, or point at it: --host, its *_HOST variable or "
                              f"[engine.hosts] {ec.default}"])]
    elif ec.default:
        return [_custom_engine(config)]
    else:
        try:
            found = discover_engine(config)
        except EngineError as exc:
            return [Check("engine", "fail", str(exc),
                          (exc.details or "").splitlines())]
    models = found.models
    shown = ", ".join(models[:8]) + (f" and {len(models) - 8} more" if len(models) > 8 else "")
    checks = [Check("engine", "ok", f"{found.backend} at {redact_url(found.url)} answers "
                    f"({len(models)} model(s){': ' + shown if models else ''})")]
    if ec.model:
        if models and ec.model not in models:
            checks.append(Check("model", "fail", f"{ec.model!r} is not offered by "
                                f"{found.backend}; it offers {shown}", [
                                    "set [engine] model or JARVIS_MODEL to one of them"]))
        else:
            checks.append(Check("model", "ok", f"{ec.model} (configured)"))
    elif models:
        checks.append(Check("model", "ok", f"{models[0]} (the engine's first model; set "
                            f"[engine] model to choose)"))
    else:
        checks.append(Check("model", "fail", f"{found.backend} lists no models and none is "
                            f"configured", ["set [engine] model or JARVIS_MODEL"]))
    return checks


def _custom_engine(config: Any) -> Check:
    from jarvis.engine.discovery import get_engine
    from jarvis.errors import JarvisError

    try:
        engine = get_engine(config, default_client="http")
        models = list(engine.list_models())
    except (JarvisError, OSError) as exc:
        return Check("engine", "fail", f"engine {config.engine.default!r}: {exc}")
    return Check("engine", "ok", f"engine {config.engine.default!r} answers ({len(models)} "
                 f"model(s))")


def mcp_checks(config: Any) -> list[Check]:
    """Every enabled MCP server starts (or connects) and lists its tools."""
    if not config.mcp.servers:
        return []
    from jarvis.mcp.manager import register_mcp_tools

    manager = register_mcp_tools(config)
    if manager is None:
        return []
    manager.refresh()
    checks = []
    for row in manager.status():
        if row["status"] == "disabled":
            checks.append(Check(f"mcp {row['name']}", "info", "disabled (enabled = false)"))
        elif row["status"] == "failed":
            checks.append(Check(f"mcp {row['name']}", "warn", f"failed: {row['error']}",
                                ["its tools are missing until it starts; `jarvis mcp list` "
                                 "tries again"]))
        else:
            checks.append(Check(f"mcp {row['name']}", "ok", f"{row['status']}, "
                                f"{len(row['tools'])} tool(s)"))
    return checks


def database_checks(config: Any) -> list[Check]:
    """The memory store, the scheduler's store and the run log can be written."""
    from jarvis.memory import memory_path
    from jarvis.runlog import run_log_enabled, run_log_path

    checks = []
    if config.memory.enabled:
        checks.append(_sqlite_check("memory", memory_path(config), "[memory] db_path",
                                    "memory search and the context of ask"))
    store = (config.scheduler.store or "").strip()
    if store:
        checks.append(_postgres_check(store))
    else:
        from jarvis.core.paths import state_path

        db = config.scheduler.db_path
        path = state_path(str(config.resolve_path(db)) if db else None, "scheduler.db")
        checks.append(_sqlite_check("scheduler", path, "[scheduler] db_path", "scheduled tasks"))
    if run_log_enabled(config):
        checks.append(_sqlite_check("run log", Path(run_log_path(config)), "[runs] db_path",
                                    "recording runs (answers are kept either way)"))
    return checks


def _sqlite_check(name: str, path: Path, setting: str, needed_for: str) -> Check:
    fix = (f"make it writable, move it aside (a new one is made), or point {setting} at a "
           f"writable file")
    if path.exists():
        if not path.is_file():
            return Check(name, "warn", f"{path} is not a file", [fix])
        try:
            with path.open("rb") as fh:
                head = fh.read(16)
        except OSError as exc:
            return Check(name, "warn", f"{path} cannot be read: {exc.strerror or exc}", [fix])
        if head and head != b"SQLite format 3\x00":
            return Check(name, "warn", f"{path} is not an SQLite database", [fix])
        if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
            return Check(name, "warn", f"{path} is read-only: no {needed_for}", [fix])
        return Check(name, "ok", f"{path} (writable)")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not os.access(folder, os.W_OK):
        return Check(name, "warn", f"{path} cannot be created: {folder} is read-only", [fix])
    return Check(name, "ok", f"{path} (not created yet; its folder is writable)")


def _postgres_check(url: str) -> Check:
    from jarvis.errors import JarvisError
    from jarvis.scheduler.ledger import redact

    if importlib.util.find_spec("psycopg") is None:
        return Check("scheduler", "warn", "[scheduler] store is PostgreSQL but psycopg is not "
                     "installed", ["pip install 'jarvis[postgres]'"])
    try:
        from jarvis.scheduler.store_postgres import PostgresStore

        PostgresStore(url).close()
    except (JarvisError, OSError, Exception) as exc:  # noqa: BLE001 - any driver error is a finding
        return Check("scheduler", "warn", f"the ledger {redact(url)} cannot be used: {exc}")
    return Check("scheduler", "ok", f"the ledger {redact(url)} answers")


def extras_checks(config: Any) -> list[Check]:
    """Optional extras: installed or not, and which the config needs."""
    installed = {name: all(importlib.util.find_spec(p) is not None for p in packages)
                 for name, (packages, _) in EXTRAS.items()}
    needed: dict[str, str] = {}
    search = config.tools.settings.get("web_search", {}).get("backend", "duckduckgo")
    if search == "duckduckgo":
        needed["web"] = "web_search's default backend duckduckgo"
    if config.channels:
        needed["channels"] = f"the channels in config.toml ({', '.join(config.channels)})"
    if config.scheduler.runner == "celery":
        needed["celery"] = "[scheduler] runner = \"celery\""
    if (config.scheduler.store or "").strip():
        needed["postgres"] = "[scheduler] store"
    checks = []
    for name, (_, purpose) in EXTRAS.items():
        if installed[name]:
            checks.append(Check(f"extra {name}", "ok", f"installed: {purpose}"))
        elif name in needed:
            checks.append(Check(f"extra {name}", "warn", f"not installed, but "
                                f"{needed[name]} needs it", [f"pip install 'jarvis[{name}]'"]))
        else:
            checks.append(Check(f"extra {name}", "info", f"not installed ({purpose}); "
                                f"pip install 'jarvis[{name}]'"))
    return checks


def approval_checks(config: Any) -> list[Check]:
    """Standing approvals: scheduled tasks that may run confirmation-gated tools unattended."""
    from jarvis.errors import JarvisError

    if (config.scheduler.store or "").strip():
        return []  # the ledger check above says whether it answers; listing needs a connection
    from jarvis.scheduler.ledger import open_store

    try:
        store = open_store(config, create=False)
    except (JarvisError, OSError):  # no scheduler database yet (or one the check above flags)
        return [Check("approvals", "ok", "no scheduled tasks")]
    try:
        tasks = [t for status in ("active", "paused") for t in store.list_tasks(status)
                 if t.approved_tools]
    except Exception:  # noqa: BLE001 - an unreadable store is reported by the database check
        return []
    finally:
        store.close()
    if not tasks:
        return [Check("approvals", "ok", "no scheduled task may run a confirmation-gated tool "
                      "unattended")]
    return [Check("approvals", "info", f"{len(tasks)} scheduled task(s) may run "
                  f"confirmation-gated tools unattended",
                  [f"task {t.id} ({t.status}): {', '.join(t.approved_tools)}" for t in tasks])]
