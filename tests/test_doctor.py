"""`jarvis doctor` checks what a user needs (issue 25, item 5): the config and its tool tables,
the engine and its model, MCP servers, the databases, optional extras, standing approvals and
the sandbox; it exits 1 when `jarvis ask` cannot work, and `--json` gives the same as data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_support import write_config
from ports import closed_port
from readonly import read_only

from jarvis.testing import FakeOpenAIServer

HOST_VARS = ("OLLAMA_HOST", "VLLM_HOST", "LLAMACPP_HOST", "LMSTUDIO_HOST", "SGLANG_HOST")


def doctor(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", "doctor", *args], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def report(env: dict[str, str], cwd: Path) -> tuple[int, dict[str, dict]]:
    out = doctor(env, cwd, "--json")
    data = json.loads(out.stdout)
    return out.returncode, {c["name"]: c for c in data["checks"]} | {"_": data}


@pytest.fixture
def fake():
    with FakeOpenAIServer(["unused"], models=["test-model", "other-model"]) as server:
        yield server


@pytest.fixture
def ws(tmp_path: Path, cli_env) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    assert subprocess.run([sys.executable, "-m", "jarvis.cli", "init"], cwd=folder, env=cli_env,
                          capture_output=True).returncode == 0
    return folder


def test_everything_in_order_exits_0(ws: Path, cli_env, fake) -> None:
    env = dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="test-model")
    out = doctor(env, ws)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("config ") and " ok " in line and "valid, 1 tool table(s)"
               in line for line in lines), out.stdout
    assert any(line.startswith("engine ") and "vllm at " in line and "2 model(s): test-model, "
               "other-model" in line for line in lines)
    assert any(line.startswith("model ") and "test-model (configured)" in line for line in lines)
    for name in ("memory", "scheduler", "run log", "extra web", "extra channels", "approvals"):
        assert any(line.startswith(name + " ") for line in lines), name
    assert any(line.startswith("sandbox: ") for line in lines)
    code, checks = report(env, ws)
    assert code == 0 and checks["_"]["ok"] is True and checks["_"]["ask_works"] is True
    assert checks["engine"]["status"] == "ok" and checks["model"]["status"] == "ok"
    assert "sandbox" in checks["_"] and "mechanism" in checks["_"]["sandbox"]


def test_no_engine_means_ask_cannot_work(ws: Path, cli_env) -> None:
    port = closed_port()
    env = dict(cli_env, **{var: f"http://127.0.0.1:{port}" for var in HOST_VARS})
    out = doctor(env, ws)
    assert out.returncode == 1
    assert "FAIL  no inference engine is reachable" in out.stdout
    assert "jarvis ask cannot work here: see engine above" in out.stderr
    code, checks = report(env, ws)
    assert code == 1 and checks["engine"]["status"] == "fail"
    assert checks["_"]["ask_works"] is False
    assert any("connection refused" in line for line in checks["engine"]["details"])


def test_a_model_the_engine_does_not_offer_fails(ws: Path, cli_env, fake) -> None:
    env = dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="qwen3:8b")
    code, checks = report(env, ws)
    assert code == 1
    assert checks["model"]["status"] == "fail"
    assert checks["model"]["summary"] == ("'qwen3:8b' is not offered by vllm; it offers "
                                          "test-model, other-model")


def test_an_invalid_config_fails_and_the_rest_is_still_checked(ws: Path, cli_env, fake) -> None:
    config = ws / "config.toml"
    config.write_text(config.read_text().replace('allowed_dirs = ["."]', 'allowed_dir = ["."]'))
    env = dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url)
    out = doctor(env, ws)
    assert out.returncode == 1
    assert "config" in out.stdout and "FAIL  invalid config in" in out.stdout
    assert "allowed_dir (did you mean 'allowed_dirs'?)" in out.stdout
    assert "sandbox: " in out.stdout and "engine " in out.stdout  # the other checks still ran


def test_read_only_databases_are_a_warning(ws: Path, cli_env, fake, jarvis_home: Path) -> None:
    subprocess.run([sys.executable, "-m", "jarvis.cli", "memory", "index", str(ws / "tools")],
                   cwd=ws, env=cli_env, capture_output=True, check=True)
    env = dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="test-model")
    out = subprocess.run([*read_only(jarvis_home), sys.executable, "-m", "jarvis.cli", "doctor",
                          "--json"], env=env, cwd=ws, capture_output=True, text=True, timeout=120)
    checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["memory"]["status"] == "warn"
    assert checks["memory"]["summary"] == (f"{jarvis_home / 'memory.db'} is read-only: no memory "
                                           f"search and the context of ask")
    assert checks["run log"]["status"] == "warn"
    assert json.loads(out.stdout)["ask_works"] is True


def test_a_failed_mcp_server_is_a_warning(ws: Path, cli_env, fake) -> None:
    write_config(ws, {"broken": {"command": "/nonexistent/server"}},
                 extra='[engine]\nmodel = "test-model"\n')
    env = dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url)
    code, checks = report(env, ws)
    assert checks["mcp broken"]["status"] == "warn", checks["mcp broken"]
    assert checks["_"]["ask_works"] is True
    assert code == (0 if checks["_"]["ok"] else 1)


def test_standing_approvals_are_listed(ws: Path, cli_env, fake) -> None:
    added = subprocess.run([sys.executable, "-m", "jarvis.cli", "schedule", "add", "Index notes",
                            "--every", "86400", "--tools", "memory_index", "--approve-tools",
                            "memory_index", "--json"], cwd=ws, env=cli_env, capture_output=True,
                           text=True)
    task_id = json.loads(added.stdout)["task_id"]
    env = dict(cli_env, JARVIS_ENGINE="vllm", VLLM_HOST=fake.url, JARVIS_MODEL="test-model")
    _, checks = report(env, ws)
    assert checks["approvals"]["status"] == "info"
    assert checks["approvals"]["details"] == [f"task {task_id} (active): memory_index"]
