"""Runs that start together in a fresh process: first imports on worker threads are safe.

The documented cron set-up (`jarvis scheduler start --once` every few minutes) starts a fresh
process whenever tasks fall due together. One run's engine (the openai package) then made its
first request while the other run's web tool was importing httpx for the first time, and the
request failed about 3 times in 5: "partially initialized module 'httpx' has no attribute
'Timeout'" (openai looks up sys.modules["httpx"] on each request). Each round here is a fresh
`scheduler start --once` with eight due tasks, all run at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from net_support import Reply, serving

from jarvis.testing import FakeOpenAIServer, reply, tool_call

ROUNDS = 4
TASKS = 8


def test_runs_starting_together_in_a_fresh_process_all_succeed(tmp_path: Path, cli_env) -> None:
    from jarvis.core.config import load_config
    from jarvis.runlog import RunLog, run_log_path
    from jarvis.scheduler.ledger import open_store
    from jarvis.scheduler.scheduler import TaskScheduler

    with serving({"/status": lambda s: Reply(200, '{"build": "green"}',
                                             content_type="application/json")}) as net:
        def brain(request):
            if request["messages"][-1]["role"] == "tool":
                return "done"
            return reply(tool_calls=[tool_call("http_request", {"url": net.url("/status")})])

        with FakeOpenAIServer(default=brain) as fake:
            config_path = tmp_path / "config.toml"
            config_path.write_text(f'[scheduler]\nmax_workers = {TASKS}\n\n'
                                   f'[tools.http_request]\nallowed_hosts = ["{net.hostport}"]\n')
            env = dict(cli_env, JARVIS_CONFIG=str(config_path), JARVIS_ENGINE="vllm",
                       VLLM_HOST=fake.url, JARVIS_MODEL="test-model")
            config = load_config(config_path)
            for round_ in range(ROUNDS):
                store = open_store(config)
                scheduler = TaskScheduler(store=store, config=config)
                due = time.time()  # due at once: every task of the round together
                ids = [scheduler.add(f"Check the build ({round_}.{i})", tools=["http_request"],
                                     at=datetime.fromtimestamp(due, UTC).isoformat()).id
                       for i in range(TASKS)]
                store.close()
                out = subprocess.run([sys.executable, "-m", "jarvis.cli", "scheduler", "start",
                                      "--once"], env=env, cwd=tmp_path, capture_output=True,
                                     text=True, timeout=120)
                assert out.returncode == 0, out.stderr
                store = open_store(config)
                log = RunLog(run_log_path(config))
                try:
                    for task_id in ids:
                        (run,) = store.list_runs(task_id)
                        assert run.status == "succeeded", (round_, run.error)
                        (call,) = log.get(run.run_log_id)["tool_calls"]
                        assert call["success"], (round_, call["content"])
                        assert json.loads(call["content"]) == {"build": "green"}
                finally:
                    store.close()
                    log.close()
