"""`schedule` and `scheduler` are one group under two names, and a mistyped subcommand of any
group gets a did-you-mean and the group's commands (issue 25, item 4)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def jarvis(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_both_names_take_every_subcommand(cli_env, tmp_path) -> None:
    started = jarvis(cli_env, tmp_path, "schedule", "start", "--once")
    assert started.returncode == 0, started.stderr
    assert "nothing to run: no active scheduled tasks" in started.stdout
    added = jarvis(cli_env, tmp_path, "scheduler", "add", "Water the plants", "--cron", "0 9 * * *")
    assert added.returncode == 0, added.stderr
    listed = jarvis(cli_env, tmp_path, "scheduler", "list")
    assert listed.returncode == 0 and "Water the plants" in listed.stdout
    assert jarvis(cli_env, tmp_path, "scheduler", "start", "--once").returncode == 0


def test_a_mistyped_subcommand_points_to_the_right_one(cli_env, tmp_path) -> None:
    out = jarvis(cli_env, tmp_path, "scheduler", "lst")
    assert out.returncode == 2
    assert ("Error: No such command 'lst'. Did you mean 'list'? `jarvis scheduler` has: add, "
            "cancel, list, pause, resume, run, runs, show, start.") in out.stderr
    out = jarvis(cli_env, tmp_path, "tools", "lsit")
    assert out.returncode == 2 and "Did you mean 'list'?" in out.stderr
