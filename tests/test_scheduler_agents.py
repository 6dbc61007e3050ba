"""Workspace agents that declare a `schedule` get exactly one managed scheduler task."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jarvis.core.config import load_config
from jarvis.scheduler.agents import MANAGED_KEY, sync_agent_schedules
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore


def _workspace(root: Path, agents: dict[str, str]) -> Path:
    (root / "agents").mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text('[scheduler]\ndb_path = "sched.db"\n')
    for name, body in agents.items():
        (root / "agents" / f"{name}.toml").write_text(body)
    return root / "config.toml"


def _scheduler(config_path: Path) -> TaskScheduler:
    config = load_config(config_path)
    store = SchedulerStore(str(config.resolve_path(config.scheduler.db_path)))
    return TaskScheduler(store=store, runner=lambda task: "unused", config=config)


BRIEF = 'description = "d"\nbase = "orchestrator"\nschedule = "0 7 * * *"\n'


def test_sync_creates_once_then_is_idempotent(tmp_path: Path) -> None:
    cfg = _workspace(tmp_path, {"brief": BRIEF, "plain": 'description = "no schedule"\n'})
    sched = _scheduler(cfg)
    report = sync_agent_schedules(sched, load_config(cfg))
    assert report.created == ["brief"]
    again = sync_agent_schedules(sched, load_config(cfg))
    assert again.created == [] and again.replaced == [] and again.cancelled == []
    tasks = [t for t in sched.list_tasks() if t.status == "active"]
    assert len(tasks) == 1
    assert tasks[0].agent == "brief" and tasks[0].schedule_value == "0 7 * * *"
    assert tasks[0].metadata[MANAGED_KEY] == "brief"


def test_changed_schedule_replaces_and_removed_agent_cancels(tmp_path: Path) -> None:
    cfg = _workspace(tmp_path, {"brief": BRIEF})
    sched = _scheduler(cfg)
    manual = sched.create_task("by hand", "interval", "3600")
    sync_agent_schedules(sched, load_config(cfg))
    (tmp_path / "agents" / "brief.toml").write_text(BRIEF.replace("0 7", "30 6"))
    report = sync_agent_schedules(sched, load_config(cfg))
    assert report.replaced == ["brief"]
    active = {t.id: t for t in sched.list_tasks() if t.status == "active"}
    assert [t.schedule_value for t in active.values() if t.agent == "brief"] == ["30 6 * * *"]
    (tmp_path / "agents" / "brief.toml").unlink()
    report = sync_agent_schedules(sched, load_config(cfg))
    assert report.cancelled == ["brief"]
    active = [t for t in sched.list_tasks() if t.status == "active"]
    assert [t.id for t in active] == [manual.id]  # tasks made by hand are never touched


def test_scheduler_start_once_schedules_agents(tmp_path: Path, cli_env: dict[str, str]) -> None:
    cfg = _workspace(tmp_path, {"brief": BRIEF})
    cli_env["JARVIS_CONFIG"] = str(cfg)
    proc = subprocess.run([sys.executable, "-m", "jarvis.cli", "scheduler", "start", "--once"],
                          capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "agent brief: scheduled" in proc.stderr
    assert "none due" in proc.stdout
    listed = subprocess.run([sys.executable, "-m", "jarvis.cli", "schedule", "list"],
                            capture_output=True, text=True, env=cli_env, cwd=tmp_path, timeout=60)
    assert "0 7 * * *" in listed.stdout
