"""A scheduled run that needs the person, end to end, as real processes: `jarvis scheduler
start` (the SDK runner against a loopback OpenAI-compatible server), `jarvis serve`, and the
person's channel (a loopback receiver behind an Apprise json:// URL).

The task calls a workspace tool that needs confirmation and appends a line to a file each
time it really runs. The run parks; the request reaches the receiver with the CLI command
and a link; the person answers through the CLI, the link's page or serve's HTTP API; the run
continues where it stopped and its result reaches the channel once; the tool ran once. Then
the races: a daemon killed -9 between the approval and the continuation, two approvals at
once, two daemons: one continuation each time. Denial and expiry end the way they should.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from approvals_support import (
    Receiver,
    answer_from_request,
    approval_id,
    config_text,
    link_of,
    marks,
    workspace,
)
from scheduler_support import Daemon, jarvis, query
from serve_process import owner_headers
from waiting import wait_for

from jarvis.scheduler.schedules import iso
from jarvis.testing import FakeOpenAIServer


@pytest.fixture
def lab(tmp_path, cli_env):
    """An engine, a receiver, a workspace with the tool, and the config they share."""
    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        work = workspace(Path.cwd())
        db = tmp_path / "scheduler.db"
        config = work / "config.toml"
        config.write_text(config_text(engine.base_url, receiver, scheduler_db=db))
        env = dict(cli_env, JARVIS_CONFIG=str(config), OPENAI_API_KEY="test")
        yield Lab(tmp_path, env, engine, receiver, db, config, work)


class Lab:
    def __init__(self, tmp_path, env, engine, receiver, db, config, work) -> None:
        self.tmp_path, self.env, self.engine, self.receiver = tmp_path, env, engine, receiver
        self.db, self.config, self.work = db, config, work
        self.marked = tmp_path / "marked.txt"
        self.daemons: list[Daemon] = []

    def add_task(self, *extra: str) -> str:
        out = jarvis(self.env, "schedule", "add", f"write now {self.marked}", "--at",
                     iso(time.time()), "--tools", "danger", "--agent", "orchestrator",
                     "--notify", "me", "--json", *extra)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["task_id"]

    def daemon(self) -> Daemon:
        daemon = Daemon(self.env, "--poll", "0.2", runner=None, cwd=str(self.work))
        self.daemons.append(daemon)
        return daemon

    def request(self) -> dict:
        return wait_for(lambda: self.receiver.requests()[-1:], 30,
                        "the approval request at the receiver")[0]

    def run_status(self) -> str:
        rows = query(self.db, "SELECT status FROM runs ORDER BY id DESC LIMIT 1")
        return rows[0][0] if rows else ""

    def result(self, task_id: str) -> dict:
        return wait_for(lambda: self.receiver.results(task_id), 30, "the task's result")[0]

    def stop(self) -> None:
        for daemon in self.daemons:
            if daemon.proc.poll() is None:
                assert daemon.stop() == 0, daemon.text()[-3000:]
            else:
                daemon.close()  # one killed -9: its pipes still want closing


def _approve_cli(lab: Lab, request: dict, serve_url: str | None) -> None:
    out = jarvis(lab.env, "approvals", "approve", approval_id(request))
    assert out.returncode == 0, out.stderr
    assert "approved" in out.stderr and "the scheduler continues its run" in out.stderr


def _approve_http(lab: Lab, request: dict, serve_url: str | None) -> None:
    ident = approval_id(request)
    refused = httpx.post(f"{serve_url}/jarvis/approvals/{ident}/approve", json={})
    assert refused.status_code == 401  # behind serve's owner token
    answered = httpx.post(f"{serve_url}/jarvis/approvals/{ident}/approve", json={},
                          headers=owner_headers(lab.env))
    assert answered.status_code == 200, answered.text
    assert answered.json()["status"] == "approved"


def _approve_link(lab: Lab, request: dict, serve_url: str | None) -> None:
    link = link_of(request)
    assert link and link.startswith(f"{serve_url}/jarvis/approve/{approval_id(request)}?t=v1.")
    with httpx.Client() as browser:
        page = browser.get(link)
        assert page.status_code == 200 and "Approve this call" in page.text
        assert lab.run_status() == "parked"  # showing the page changed nothing
        token = re.search(r"name='t' value='([^']+)'", page.text).group(1)
        answered = browser.post(link.split("?")[0], data={"t": token, "decision": "approve"},
                                headers={"Origin": serve_url})
    assert answered.status_code == 200 and "You approved" in answered.text, answered.text


@pytest.mark.parametrize("answer", [_approve_cli, _approve_http, _approve_link],
                         ids=["cli", "http", "link"])
def test_a_parked_task_continues_once_after_the_person_approves(lab, answer, tmp_path):
    from serve_process import jarvis_serve

    with jarvis_serve(lab.env, tmp_path / "serve", "--tools", "think") as serve_url:
        # The request's message links to serve's page: [approvals] link_base says where.
        lab.config.write_text(config_text(lab.engine.base_url, lab.receiver,
                                          scheduler_db=lab.db,
                                          approvals=f'link_base = "{serve_url}"\n'))
        task_id = lab.add_task()
        lab.daemon()
        try:
            request = lab.request()
            assert request["title"].startswith("jarvis: approve danger? (")
            body = request["message"]
            assert f"jarvis approvals approve {approval_id(request)}" in body
            assert "deny:    jarvis approvals deny" in body
            assert link_of(request), body
            wait_for(lambda: lab.run_status() == "parked", 15, "the run parked")
            assert marks(lab.marked) == []  # nothing ran before the person answered
            answer(lab, request, serve_url)
            result = lab.result(task_id)
            assert result["message"].startswith(f"tool said: wrote {lab.marked}")
            assert marks(lab.marked) == ["written now"]
            wait_for(lambda: lab.run_status() == "succeeded", 15, "the run recorded")
        finally:
            lab.stop()
    # Delivered once: one request, one result; the tool ran once.
    assert len(lab.receiver.requests()) == 1 and len(lab.receiver.results(task_id)) == 1
    assert marks(lab.marked) == ["written now"]
    runs = json.loads(jarvis(lab.env, "schedule", "runs", task_id, "--json").stdout)
    (run,) = runs
    assert run["status"] == "succeeded" and run["parked_at"] is not None
    assert [a["status"] for a in run["approvals"]] == ["approved"]
    shown = jarvis(lab.env, "runs", "show", run["run_log_id"])
    assert f"approval {approval_id(request)}: danger" in shown.stdout
    assert ": approved by " in shown.stdout
    listing = jarvis(lab.env, "schedule", "runs", task_id)
    assert f"[approval {approval_id(request)}: approved]" in listing.stdout


def test_a_denied_call_gives_the_model_a_denied_result_and_the_run_goes_on(lab):
    task_id = lab.add_task()
    lab.daemon()
    try:
        request = lab.request()
        out = jarvis(lab.env, "approvals", "deny", approval_id(request), "--reason", "not now")
        assert out.returncode == 0, out.stderr
        result = lab.result(task_id)
    finally:
        lab.stop()
    assert result["message"].startswith("tool said: ERROR (denied): refused: tool danger "
                                        "requires confirmation")
    assert "the person declined" in result["message"]
    assert marks(lab.marked) == []
    shown = jarvis(lab.env, "approvals", "list", "--all")
    assert "denied by" in shown.stdout


def test_kill_9_between_the_approval_and_the_continuation_gives_one_continuation(lab):
    task_id = lab.add_task()
    first = lab.daemon()
    request = lab.request()
    wait_for(lambda: lab.run_status() == "parked", 15, "the run parked")
    first.kill9()
    assert jarvis(lab.env, "approvals", "approve", approval_id(request)).returncode == 0
    # Two daemons start at once: one of them continues the run, once.
    lab.daemon()
    lab.daemon()
    try:
        lab.result(task_id)
        wait_for(lambda: lab.run_status() == "succeeded", 15, "the run recorded")
    finally:
        lab.stop()
    assert marks(lab.marked) == ["written now"]
    assert len(lab.receiver.results(task_id)) == 1
    continued = [d for d in lab.daemons[1:] if any("continues (its approvals are answered)"
                                                     in line for line in d.lines)]
    assert len(continued) == 1, [d.text()[-2000:] for d in lab.daemons[1:]]


def test_a_continuation_killed_before_it_ran_the_call_continues_once_elsewhere(lab):
    """The daemon claims the continuation and dies (-9) before running anything: the next
    daemon finds the run (its pid is dead), puts it back to parked, and continues it."""
    task_id = lab.add_task()
    first = lab.daemon()
    request = lab.request()
    wait_for(lambda: lab.run_status() == "parked", 15, "the run parked")
    first.kill9()
    # What a daemon that claimed and died leaves: the run "running", owned by a dead pid.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    from jarvis.scheduler.store import owner_id

    owner = owner_id().split(":")
    owner[1] = dead
    assert jarvis(lab.env, "approvals", "approve", approval_id(request)).returncode == 0
    import sqlite3

    conn = sqlite3.connect(lab.db)
    with conn:
        changed = conn.execute("UPDATE runs SET status = 'running', claimed_by = ?, "
                               "lease_until = ?, resumes = resumes + 1 WHERE status = 'parked'",
                               (":".join(owner), time.time() + 600)).rowcount
    conn.close()
    assert changed == 1
    second = lab.daemon()
    try:
        lab.result(task_id)
        wait_for(lambda: lab.run_status() == "succeeded", 15, "the run recorded")
    finally:
        lab.stop()
    assert marks(lab.marked) == ["written now"]
    assert any("continues again" in line for line in second.lines), second.text()[-2000:]


def test_two_approvals_at_once_give_one_continuation(lab, tmp_path):
    from serve_process import jarvis_serve

    task_id = lab.add_task()
    lab.daemon()
    try:
        request = lab.request()
        ident = approval_id(request)
        with jarvis_serve(lab.env, tmp_path / "serve", "--tools", "think") as serve_url:
            outcomes: list = []

            def cli() -> None:
                outcomes.append(("cli", jarvis(lab.env, "approvals", "approve", ident)))

            def http() -> None:
                outcomes.append(("http", httpx.post(
                    f"{serve_url}/jarvis/approvals/{ident}/approve", json={},
                    headers=owner_headers(lab.env), timeout=30)))

            threads = [threading.Thread(target=f) for f in (cli, cli, http, http)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        ok = [o for kind, o in outcomes if (o.returncode == 0 if kind == "cli"
                                            else o.status_code == 200)]
        refused = [o for kind, o in outcomes if (o.returncode == 1 if kind == "cli"
                                                 else o.status_code == 409)]
        assert len(ok) == 1 and len(refused) == 3, outcomes
        lab.result(task_id)
        wait_for(lambda: lab.run_status() == "succeeded", 15, "the run recorded")
    finally:
        lab.stop()
    assert marks(lab.marked) == ["written now"]
    assert len(lab.receiver.results(task_id)) == 1


def test_nobody_answers_the_run_ends_expired(lab):
    lab.config.write_text(config_text(lab.engine.base_url, lab.receiver, scheduler_db=lab.db,
                                      approvals='expire_after = "2s"\n'))
    task_id = lab.add_task()
    lab.daemon()
    try:
        request = lab.request()
        result = lab.result(task_id)
        wait_for(lambda: lab.run_status() == "expired", 15, "the run expired")
    finally:
        lab.stop()
    assert result["title"] == f"jarvis: task {task_id} expired"
    assert marks(lab.marked) == []
    late = jarvis(lab.env, "approvals", "approve", approval_id(request))
    assert late.returncode == 1 and "expired" in late.stderr
    (run,) = json.loads(jarvis(lab.env, "schedule", "runs", task_id, "--json").stdout)
    assert run["status"] == "expired" and run["error_type"] == "expired"
    assert [a["status"] for a in run["approvals"]] == ["expired"]
    shown = json.loads(jarvis(lab.env, "runs", "show", run["run_log_id"], "--json").stdout)
    assert shown["status"] == "expired"
