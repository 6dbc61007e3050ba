"""`jarvis ask` without a terminal (cron, a script: stdin is not a tty) parks a call that needs
the person when `[approvals] notify` is set: stderr names the run and the exact commands,
the exit code is 4, `--json` says "parked"; the request reaches the person's channel; and
`jarvis approvals approve ID` (run in another folder) continues the run there, once, with the
same executor and guard. Without `notify` it refuses as before. Real processes: the CLI with
stdin from /dev/null, the loopback model and channel receiver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from approvals_support import Receiver, answer_from_request, approval_id, config_text, marks
from approvals_support import workspace as with_danger_tool

from jarvis.testing import FakeOpenAIServer

PARKED = 4


def cli(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`jarvis ARGS` in `cwd` with no terminal: stdin is /dev/null."""
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


def setup(tmp_path: Path, cli_env: dict, engine: FakeOpenAIServer, receiver: Receiver,
          notify: bool = True) -> tuple[Path, dict]:
    folder = with_danger_tool(tmp_path / "ws")
    config = config_text(engine.base_url, receiver, extra="[memory]\ncontext = false\n")
    if not notify:
        config = config.replace('notify = "me"', 'notify = ""')
    (folder / "config.toml").write_text(config)
    return folder, dict(cli_env, OPENAI_API_KEY="test")


def test_ask_without_a_terminal_parks_and_approve_continues_it_once(tmp_path, cli_env):
    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        (tmp_path / "ws").mkdir()
        folder, env = setup(tmp_path, cli_env, engine, receiver)
        target = tmp_path / "out.txt"
        asked = cli(env, folder, "ask", "--tools", "danger", f"write nightly {target}")
        assert asked.returncode == PARKED, asked.stderr
        assert asked.stdout.strip() == ""  # no answer yet: stdout stays empty
        (request,) = receiver.requests()  # the person was asked on their channel
        ident = approval_id(request)
        assert f"jarvis approvals approve {ident}" in asked.stderr
        assert f"jarvis approvals deny {ident}" in asked.stderr
        assert "parked: run " in asked.stderr and "exit code 4" in asked.stderr
        assert marks(target) == []  # nothing ran before the person answered

        # The person approves from another folder: the run continues in the workspace it was
        # asked in (its `danger` tool), and its answer is printed here.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        env_cli = dict(env, JARVIS_CONFIG=str(folder / "config.toml"))
        approved = cli(env_cli, elsewhere, "approvals", "approve", ident)
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.strip() == f"tool said: wrote {target}"
        assert marks(target) == ["written nightly"]

        # Exactly once: a second approve, and a continue, are refused; nothing runs again.
        again = cli(env_cli, elsewhere, "approvals", "approve", ident)
        assert again.returncode != 0 and "Traceback" not in again.stderr
        assert "already" in again.stderr, again.stderr
        run_id = json.loads(cli(env, folder, "approvals", "list", "--all", "--json")
                            .stdout)[0]["run_id"]
        repeat = cli(env, folder, "approvals", "continue", run_id)
        assert repeat.returncode != 0 and "continued already" in repeat.stderr, repeat.stderr
        assert marks(target) == ["written nightly"]

        # The run log has one run, parked then finished, and its request approved.
        shown = json.loads(cli(env, folder, "runs", "show", run_id, "--json").stdout)
        assert shown["status"] == "ok", shown
        assert [a["status"] for a in shown["approvals"]] == ["approved"]
        # The ask's conversation keeps the turn, with the continuation's answer.
        listed = json.loads(cli(env, folder, "conversations", "list", "--json").stdout)
        (conversation,) = listed
        turns = json.loads(cli(env, folder, "conversations", "show", conversation["id"],
                               "--json").stdout)["turn_list"]
        assert [(t["run_id"], t["answer"]) for t in turns] == [
            (run_id, f"tool said: wrote {target}")]


def test_json_says_parked_and_deny_continues_with_a_denied_result(tmp_path, cli_env):
    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        (tmp_path / "ws").mkdir()
        folder, env = setup(tmp_path, cli_env, engine, receiver)
        target = tmp_path / "out.txt"
        asked = cli(env, folder, "ask", "--json", "--tools", "danger", f"write json {target}")
        assert asked.returncode == PARKED, asked.stderr
        out = json.loads(asked.stdout)
        assert out["status"] == "parked" and out["run_id"]
        (pending,) = out["pending_approvals"]
        assert pending["run_id"] == out["run_id"] and pending["tool"] == "danger"
        denied = cli(env, folder, "approvals", "deny", pending["id"], "--reason", "not now")
        assert denied.returncode == 0, denied.stderr
        assert denied.stdout.strip().startswith("tool said: ERROR (denied)"), denied.stdout
        assert marks(target) == []


def test_answered_elsewhere_the_run_is_continued_by_approvals_continue(tmp_path, cli_env):
    """Answered through `decide` (the link, HTTP and a chat reply use it): `jarvis approvals
    continue RUN` continues it; nothing continues it twice."""
    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        (tmp_path / "ws").mkdir()
        folder, env = setup(tmp_path, cli_env, engine, receiver)
        target = tmp_path / "out.txt"
        out = json.loads(cli(env, folder, "ask", "--json", "--tools", "danger",
                             f"write phone {target}").stdout)
        (pending,) = out["pending_approvals"]
        early = cli(env, folder, "approvals", "continue", out["run_id"])
        assert early.returncode != 0 and "still waits for approval" in early.stderr
        from jarvis.approvals import decide
        from jarvis.core.config import load_config

        decide(pending["id"], True, by="test (phone)", config=load_config(folder / "config.toml"))
        done = cli(env, folder, "approvals", "continue", out["run_id"])
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"tool said: wrote {target}"
        twice = cli(env, folder, "approvals", "continue", out["run_id"])
        assert twice.returncode != 0 and "continued already" in twice.stderr
        assert marks(target) == ["written phone"]


def test_without_notify_ask_refuses_as_before(tmp_path, cli_env):
    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        (tmp_path / "ws").mkdir()
        folder, env = setup(tmp_path, cli_env, engine, receiver, notify=False)
        target = tmp_path / "out.txt"
        asked = cli(env, folder, "ask", "--json", "--tools", "danger", f"write never {target}")
        assert asked.returncode == 0, asked.stderr
        out = json.loads(asked.stdout)
        assert out["status"] == "ok" and "pending_approvals" not in out
        assert out["content"].startswith("tool said: ERROR (denied)"), out["content"]
        assert marks(target) == [] and receiver.requests() == []
        assert 'set [approvals] notify = "CHANNEL"' in asked.stderr, asked.stderr


def test_two_continues_racing_continue_the_run_once(tmp_path, cli_env):
    """Two `jarvis approvals continue RUN` started together: the approvals store's
    compare-and-set gives the run to one; the other is refused; the tool ran once."""
    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        (tmp_path / "ws").mkdir()
        folder, env = setup(tmp_path, cli_env, engine, receiver)
        target = tmp_path / "out.txt"
        out = json.loads(cli(env, folder, "ask", "--json", "--tools", "danger",
                             f"write race {target}").stdout)
        (pending,) = out["pending_approvals"]
        from jarvis.approvals import decide
        from jarvis.core.config import load_config

        decide(pending["id"], True, by="test", config=load_config(folder / "config.toml"))
        racers = [subprocess.Popen([sys.executable, "-m", "jarvis.cli", "approvals", "continue",
                                    out["run_id"]], env=env, cwd=folder,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [(p.wait(60), *p.communicate()) for p in racers]
    codes = sorted(code for code, _, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    loser = next(err for code, _, err in results if code != 0)
    assert "continued already" in loser or "could not be claimed" in loser, loser
    assert marks(target) == ["written race"]


def test_an_approve_killed_during_the_continuation_is_not_continued_again(tmp_path, cli_env):
    """kill -9 of `jarvis approvals approve` after the approved call ran, before the run
    finished: the run is not continued again (its call happened once); `continue` says so."""
    import signal
    import threading

    after_tool = threading.Event()
    gate = threading.Event()

    def model(body: dict):
        if body["messages"][-1].get("role") == "tool":
            after_tool.set()
            gate.wait(60)
        return answer_from_request(body)

    with FakeOpenAIServer(default=model) as engine, Receiver() as receiver:
        (tmp_path / "ws").mkdir()
        folder, env = setup(tmp_path, cli_env, engine, receiver)
        target = tmp_path / "out.txt"
        out = json.loads(cli(env, folder, "ask", "--json", "--tools", "danger",
                             f"write killed {target}").stdout)
        (pending,) = out["pending_approvals"]
        approving = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "approvals", "approve",
                                      pending["id"]], env=env, cwd=folder,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        try:
            assert after_tool.wait(30)
            assert marks(target) == ["written killed"]
        finally:
            approving.send_signal(signal.SIGKILL)
            approving.wait(10)
            gate.set()
        again = cli(env, folder, "approvals", "continue", out["run_id"])
        assert again.returncode != 0 and "continued already" in again.stderr, again.stderr
        repeat = cli(env, folder, "approvals", "approve", pending["id"])
        assert repeat.returncode != 0 and "already" in repeat.stderr
    assert marks(target) == ["written killed"]
