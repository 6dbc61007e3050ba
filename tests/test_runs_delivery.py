"""`jarvis runs show` says whether a scheduled run's result reached its channel: delivered,
failed (with the error, without the channel URL's secret parts), or not requested. Through
the CLI as subprocesses, the default SdkRunner against the loopback OpenAI-compatible server,
and a real HTTP receiver on loopback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from net_support import Reply, serving

from jarvis.testing import FakeOpenAIServer

SECRET = "hook-tok3n-s3cr3t-91f2"


@pytest.fixture
def env_for(cli_env, tmp_path):
    def make(engine_url: str, hook_url: str) -> dict[str, str]:
        config = tmp_path / "config.toml"
        config.write_text(
            f'[engine]\ndefault = "openai"\nmodel = "test-model"\nmax_retries = 0\n'
            f'[engine.hosts]\nopenai = "{engine_url}"\n'
            f'[scheduler]\ndb_path = "{tmp_path / "s.db"}"\n'
            f'[channels.hook]\nurl = "{hook_url}"\nretries = 1\nretry_backoff = 0.01\n')
        return dict(cli_env, JARVIS_CONFIG=str(config), OPENAI_API_KEY="test")
    return make


def jarvis(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                          text=True, env=env, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def scheduled_run(env: dict[str, str], *notify: str) -> str:
    """Add a task, run it once with the default runner; the run log id of that run."""
    added = jarvis(env, "schedule", "add", "Summarize the new issues", "--every", "3600",
                   *notify, "--json")
    assert added.returncode == 0, added.stderr
    task_id = json.loads(added.stdout)["task_id"]
    ran = jarvis(env, "schedule", "run", task_id)
    assert ran.returncode == 0, ran.stderr
    (record,) = json.loads(jarvis(env, "schedule", "runs", task_id, "--json").stdout)
    assert record["run_log_id"], record
    return record["run_log_id"]


def show(env: dict[str, str], run_log_id: str) -> tuple[str, dict]:
    text, as_json = jarvis(env, "runs", "show", run_log_id), jarvis(env, "runs", "show",
                                                                     run_log_id, "--json")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


def test_runs_show_says_a_scheduled_run_was_delivered(env_for):
    with FakeOpenAIServer(["Three new issues."]) as engine, \
            serving({"/hook": lambda seen: Reply(200, "ok")}) as hook:
        env = env_for(engine.base_url, f"json://{hook.hostport}/hook")
        run_log_id = scheduled_run(env, "--notify", "hook")
        text, data = show(env, run_log_id)
    assert len(hook.seen) == 1
    assert "delivery: delivered to hook (1 attempt)" in text.splitlines()
    assert data["delivery"]["status"] == "delivered" and data["delivery"]["channel"] == "hook"
    assert data["delivery"]["attempts"] == 1 and data["content"] == "Three new issues."


def test_runs_show_gives_a_failed_delivery_with_its_error_and_no_secret(env_for):
    with FakeOpenAIServer(["Three new issues."]) as engine, \
            serving({f"/{SECRET}": lambda seen: Reply(500, f"no such hook {SECRET}")}) as hook:
        env = env_for(engine.base_url, f"json://{hook.hostport}/{SECRET}")
        run_log_id = scheduled_run(env, "--notify", "hook")
        text, data = show(env, run_log_id)
    assert len(hook.seen) == 2  # tried, and retried once: it really failed
    (line,) = [line for line in text.splitlines() if line.startswith("delivery:")]
    assert line.startswith("delivery: FAILED to hook after 2 attempt(s): "), line
    delivery = data["delivery"]
    assert delivery["status"] == "failed" and delivery["attempts"] == 2
    assert delivery["error"] and delivery["error"] in line
    assert SECRET not in text and SECRET not in json.dumps(data)
    assert data["content"] == "Three new issues."  # the answer is kept all the same


def test_runs_show_says_when_no_delivery_was_requested(env_for):
    with FakeOpenAIServer(["An answer.", "Another answer."]) as engine:
        env = env_for(engine.base_url, "json://127.0.0.1:9/unused")
        scheduled = scheduled_run(env)  # a task without --notify
        asked = jarvis(env, "ask", "What is new?")
        assert asked.returncode == 0, asked.stderr
        listed = json.loads(jarvis(env, "runs", "list", "--json").stdout)
        cli_run = next(r["id"] for r in listed if r["source"] == "cli")
        shown = [show(env, run_id) for run_id in (scheduled, cli_run)]
    for text, data in shown:
        assert "delivery: not requested" in text.splitlines()
        assert data["delivery"] == {"status": "not_requested"}


def test_runs_show_links_a_failed_scheduled_run_to_its_delivery(env_for):
    # The run log entry of a run that failed mid-ask lacked the scheduled run's ids, so its
    # delivery (the failure, sent to the channel) could not be shown.
    from jarvis.testing import HTTPFailure

    with FakeOpenAIServer([HTTPFailure(400, "the model refused")]) as engine, \
            serving({"/hook": lambda seen: Reply(200, "ok")}) as hook:
        env = env_for(engine.base_url, f"json://{hook.hostport}/hook")
        added = jarvis(env, "schedule", "add", "Summarize", "--every", "3600", "--notify",
                       "hook", "--json")
        task_id = json.loads(added.stdout)["task_id"]
        ran = jarvis(env, "schedule", "run", task_id)
        (record,) = json.loads(jarvis(env, "schedule", "runs", task_id, "--json").stdout)
        text, data = show(env, record["run_log_id"])
    assert ran.returncode != 0 and record["status"] == "failed", ran.stderr
    assert json.loads(hook.seen[0].body)["title"] == f"jarvis: task {task_id} failed"
    assert data["status"] == "error" and data["metadata"]["scheduled_run"]["task_id"] == task_id
    assert data["delivery"]["status"] == "delivered"
    assert "delivery: delivered to hook (1 attempt)" in text.splitlines()
