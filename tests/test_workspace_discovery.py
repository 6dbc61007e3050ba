"""The workspace is found upward from the current folder, as git finds .git (issue 25, item 3):
a subfolder of the workspace sees its tools; an unknown name says which workspace (or that
none) is in use; the search stops at the home folder and passes by other programs'
config.toml; a task remembers the workspace it was created in."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
UNITS = '{"value": 5, "from_unit": "km", "to_unit": "mi"}'


def jarvis(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def home_env(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return dict(cli_env, HOME=str(home))


def make_workspace(folder: Path, env: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    assert jarvis(folder, env, "init").returncode == 0
    shutil.copy(REPO / "tools" / "units.py", folder / "tools" / "units.py")
    return folder


def test_a_subfolder_uses_the_workspace_above(tmp_path: Path, home_env) -> None:
    ws = make_workspace(Path(home_env["HOME"]) / "assistant", home_env)
    deep = ws / "notes" / "2024"
    deep.mkdir(parents=True)
    out = jarvis(deep, home_env, "tools", "run", "convert_units", UNITS)
    assert out.returncode == 0 and out.stdout == "5 km = 3.106855961 mi\n", out.stderr
    assert jarvis(deep, home_env, "config", "path").stdout.strip() == str(ws / "config.toml")


def test_an_unknown_name_says_which_workspace_is_in_use(tmp_path: Path, home_env) -> None:
    ws = make_workspace(Path(home_env["HOME"]) / "assistant", home_env)
    (ws / "sub").mkdir()
    out = jarvis(ws / "sub", home_env, "tools", "run", "convert_unit", UNITS)
    assert out.returncode == 2
    assert "(did you mean 'convert_units'?)" in out.stderr
    assert f"the workspace in use is {ws} (config {ws / 'config.toml'}; its tools in " \
           f"{ws / 'tools'})" in out.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (("tools", "run", "convert_units", UNITS), ("ask", "-a", "researcher", "hi")):
        out = jarvis(elsewhere, home_env, *args)
        assert out.returncode == 2, out.stderr
        assert (f"no config.toml was found in {elsewhere} or the folders above it, so no "
                f"workspace tools/ or agents/ are loaded") in out.stderr
        assert len(out.stderr.splitlines()) == 1


def test_the_search_stops_at_home_and_passes_other_programs_configs(tmp_path: Path,
                                                                      home_env) -> None:
    home = Path(home_env["HOME"])
    make_workspace(home / "ws-parent", home_env)
    # The home folder itself is never taken as a workspace (a stray ~/config.toml)...
    shutil.copytree(home / "ws-parent", home, dirs_exist_ok=True)
    project = home / "projects" / "x"
    project.mkdir(parents=True)
    found = jarvis(project, home_env, "config", "path")
    assert found.returncode == 1 and "no config file found" in found.stderr
    # ...and a static site's config.toml above is not a jarvis workspace.
    site = tmp_path / "site"
    (site / "content" / "posts").mkdir(parents=True)
    (site / "config.toml").write_text('baseURL = "https://example.org/"\ntitle = "Blog"\n')
    assert jarvis(site / "content" / "posts", home_env, "config", "path").returncode == 1
    # A jarvis config higher up is found even without tools/ or agents/ beside it.
    (site / "config.toml").write_text('[engine]\nmodel = "m"\n')
    assert jarvis(site / "content" / "posts", home_env,
                  "config", "path").stdout.strip() == str(site / "config.toml")


def test_a_task_runs_in_the_workspace_it_was_created_in(tmp_path: Path, home_env) -> None:
    import json
    import time
    from datetime import UTC, datetime

    from jarvis.testing import FakeOpenAIServer, reply, tool_call

    ws = make_workspace(Path(home_env["HOME"]) / "assistant", home_env)
    (ws / "notes").mkdir()
    script = [reply(tool_calls=[tool_call("convert_units", {"value": 5, "from_unit": "km",
                                                            "to_unit": "mi"})]), "About 3.1 miles."]
    with FakeOpenAIServer(script) as fake:
        env = dict(home_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="test-model")
        typo = jarvis(ws / "notes", env, "schedule", "add", "Convert 5 km", "--every", "3600",
                      "--tools", "convert_unit")
        assert typo.returncode == 2
        assert "unknown tool 'convert_unit' (did you mean 'convert_units'?)" in typo.stderr
        assert f"the workspace in use is {ws}" in typo.stderr
        due = time.time()  # due now (--at allows a time a few seconds past)
        at = datetime.fromtimestamp(due, UTC).isoformat(timespec="seconds")
        added = jarvis(ws / "notes", env, "schedule", "add", "Convert 5 km to miles", "--at", at,
                       "--tools", "convert_units", "--json")
        assert added.returncode == 0, added.stderr
        task = json.loads(added.stdout)
        assert task["workspace"] == str(ws / "config.toml")
        elsewhere = tmp_path / "elsewhere"  # no config.toml here or above: no workspace tools
        elsewhere.mkdir()
        once = jarvis(elsewhere, env, "scheduler", "start", "--once")
        assert once.returncode == 0, once.stdout + once.stderr
        assert f"task {task['task_id']}: run #1 succeeded" in once.stdout
    runs = json.loads(jarvis(elsewhere, env, "schedule", "runs", "--json").stdout)
    assert runs[0]["answer"] == "About 3.1 miles."
