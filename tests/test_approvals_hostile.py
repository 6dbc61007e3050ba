"""Approvals from the SDK and under attack: `ask_full(on_approval="defer")` and
`Jarvis.resume` (once), a request whose arguments hold terminal escapes, HTML and a 1 MB
string (shown safely everywhere), the approval link against a real `jarvis serve` (another
request's token, a forged, foreign-key, expired or replayed token, a GET, a cross-site POST,
other methods), another user's requests, and a model trying to approve or grant.

Real parts: the SDK against the loopback OpenAI-compatible server, a workspace tool that
leaves a mark each time it really runs, the channel receiver, the CLI as a subprocess and
`jarvis serve` as a process."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import httpx
import pytest
from approvals_support import Receiver, config_text, link_of, marks, workspace
from scheduler_support import jarvis
from serve_process import jarvis_serve, owner_headers

from jarvis.errors import UserError
from jarvis.testing import FakeOpenAIServer, reply, tool_call

ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b[31m<script>alert(1)</script>"
# Nearly 1 MB: the most a call may carry (a larger one is refused before anything else).
BIG = "A" * 990_000


class Lab:
    def __init__(self, tmp_path: Path, env: dict, engine, receiver) -> None:
        self.tmp_path, self.env, self.engine, self.receiver = tmp_path, env, engine, receiver
        self.marked = tmp_path / "marked.txt"
        self.config = Path.cwd() / "config.toml"
        self.systems: list = []

    def write_config(self, approvals: str = "") -> None:
        self.config.write_text(config_text(self.engine.base_url, self.receiver,
                                           approvals=approvals,
                                           extra="[memory]\ncontext = false\n"))

    def system(self):
        from jarvis import Jarvis
        from jarvis.core.config import load_config

        system = Jarvis(config=load_config(self.config))
        self.systems.append(system)
        return system

    def park(self, note: str = "now") -> dict:
        """An SDK run that parks on `danger` (which would write `note` to the mark file)."""
        result = self.system().ask_full(f"write {note} {self.marked}", tools=["danger"],
                                        agent="orchestrator", on_approval="defer")
        assert result["status"] == "parked", result
        return result


def model(body: dict):
    """Call `danger` with the note and path the prompt carries (the note may be huge or
    hostile), then report what the tool said."""
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return f"tool said: {messages[-1].get('content')}"
    prompt = next(m["content"] for m in messages if m.get("role") == "user")
    words = prompt.split(" ")
    return reply(tool_calls=[tool_call("danger", {"path": words[-1],
                                                  "note": " ".join(words[1:-1])})])


@pytest.fixture
def lab(tmp_path, cli_env, monkeypatch):
    with FakeOpenAIServer(default=model) as engine, Receiver() as receiver:
        workspace(Path.cwd())
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        env = dict(cli_env, JARVIS_CONFIG=str(Path.cwd() / "config.toml"), OPENAI_API_KEY="test")
        monkeypatch.setenv("JARVIS_CONFIG", env["JARVIS_CONFIG"])
        lab = Lab(tmp_path, env, engine, receiver)
        lab.write_config()
        yield lab
        for system in lab.systems:
            system.close()


def status_of(lab: Lab, ident: str) -> str:
    out = jarvis(lab.env, "approvals", "show", ident, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["status"]


def test_the_sdk_parks_and_resumes_once(lab):
    parked = lab.park()
    (pending,) = parked["pending_approvals"]
    assert pending["tool"] == "danger" and pending["status"] == "pending"
    assert marks(lab.marked) == []  # nothing ran before the person answered
    listed = jarvis(lab.env, "approvals", "list")
    assert pending["id"] in listed.stdout and "danger" in listed.stdout
    system = lab.system()
    done = system.resume(parked["run_id"], {pending["id"]: "approve"})
    assert done["status"] == "ok" and done["content"].startswith("tool said: wrote "), done
    assert marks(lab.marked) == ["written now"]
    with pytest.raises(UserError, match="continued already|was approved already|not"):
        system.resume(parked["run_id"], {pending["id"]: "approve"})
    assert marks(lab.marked) == ["written now"]  # a second resume ran nothing
    with pytest.raises(UserError, match="no parked run"):
        system.resume("0123456789abcdef")
    shown = jarvis(lab.env, "runs", "show", parked["run_id"])
    assert f"approval {pending['id']}: danger" in shown.stdout


def test_a_denied_call_reaches_the_model_as_denied(lab):
    parked = lab.park()
    (pending,) = parked["pending_approvals"]
    done = lab.system().resume(parked["run_id"], {pending["id"]: "deny"})
    assert done["content"].startswith("tool said: ERROR (denied)"), done["content"]
    assert marks(lab.marked) == []


def test_a_hostile_request_is_shown_safely_everywhere(lab):
    parked = lab.park(f"{ESCAPES} {BIG}")
    (pending,) = parked["pending_approvals"]
    ident = pending["id"]
    # The channel message: bounded, no escape byte, the destination and size up front.
    (message,) = lab.receiver.requests()
    assert "\x1b" not in message["message"] and "\x07" not in message["message"]
    assert len(message["message"]) < 20_000
    assert re.search(r"it sends 9\d\d KB, sha256 [0-9a-f]{12}", message["message"]), message["message"][:300]
    # The CLI: list and show are bounded and inert; --full shows everything, still inert.
    for args in (("approvals", "list"), ("approvals", "show", ident)):
        out = jarvis(lab.env, *args)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout and "\x07" not in out.stdout, args
        assert len(out.stdout) < 20_000, (args, len(out.stdout))
    full = jarvis(lab.env, "approvals", "show", ident, "--full")
    assert full.returncode == 0 and "\x1b" not in full.stdout
    assert BIG in full.stdout and "\\x1b[2J" in full.stdout
    as_json = json.loads(jarvis(lab.env, "approvals", "show", ident, "--json").stdout)
    assert as_json["size"] > 990_000
    assert marks(lab.marked) == []


def test_the_link_page_refuses_every_trick(lab, tmp_path):
    with jarvis_serve(lab.env, tmp_path / "serve", "--tools", "think") as serve_url:
        lab.write_config(approvals=f'link_base = "{serve_url}"\n')
        first = lab.park("first")["pending_approvals"][0]["id"]
        second = lab.park("second")["pending_approvals"][0]["id"]
        messages = {re.search(r"\(([0-9a-f]+)\)$", m["title"]).group(1): m
                    for m in lab.receiver.requests()}
        link = link_of(messages[first])
        assert link and link.startswith(f"{serve_url}/jarvis/approve/{first}?t=v1.")
        page_url = link.split("?")[0]
        token = link.split("?t=")[1]
        origin = {"Origin": serve_url}
        with httpx.Client() as browser:
            page = browser.get(link)
            assert page.status_code == 200 and "Approve this call" in page.text
            assert page.headers["cache-control"] == "no-store"
            # A GET never answers, whatever it carries.
            assert browser.get(f"{link}&decision=approve").status_code in (200, 400, 405)
            assert status_of(lab, first) == "pending"
            # Other methods are refused.
            for method in ("PUT", "DELETE", "PATCH"):
                assert browser.request(method, page_url, data={"t": token}).status_code == 405
            # This request's token on another request's page.
            other = browser.post(f"{serve_url}/jarvis/approve/{second}",
                                 data={"t": token, "decision": "approve"}, headers=origin)
            assert other.status_code >= 400 and status_of(lab, second) == "pending"
            # Forged: one character of the signature changed; signed with another key;
            # expired.
            from jarvis.approvals.tokens import make_token

            forged = token[:-1] + ("0" if token[-1] != "0" else "1")
            foreign = make_token(first, time.time() + 600, key=os.urandom(32))
            expired = make_token(first, time.time() - 5)
            for bad in (forged, foreign, expired, "v1.garbage", ""):
                answer = browser.post(page_url, data={"t": bad, "decision": "approve"},
                                      headers=origin)
                assert answer.status_code >= 400, (bad, answer.status_code)
            assert status_of(lab, first) == "pending"
            # Cross-site: the right token, posted from another origin.
            cross = browser.post(page_url, data={"t": token, "decision": "approve"},
                                 headers={"Origin": "https://evil.example"})
            assert cross.status_code >= 400 and status_of(lab, first) == "pending"
            # Without the page's cookie (another browser that only has the link).
            with httpx.Client() as stranger:
                bare = stranger.post(page_url, data={"t": token, "decision": "approve"},
                                     headers=origin)
            assert bare.status_code >= 400 and status_of(lab, first) == "pending"
            # The real answer, then its replay.
            ok = browser.post(page_url, data={"t": token, "decision": "approve"},
                              headers=origin)
            assert ok.status_code == 200 and "You approved" in ok.text, ok.text
            replay = browser.post(page_url, data={"t": token, "decision": "deny"},
                                  headers=origin)
            assert replay.status_code >= 400
        assert status_of(lab, first) == "approved"
        # The owner's HTTP API is behind serve's owner token: no one else answers.
        assert httpx.post(f"{serve_url}/jarvis/approvals/{second}/approve",
                          json={}).status_code == 401
        assert httpx.get(f"{serve_url}/jarvis/approvals").status_code == 401
        listed = httpx.get(f"{serve_url}/jarvis/approvals", headers=owner_headers(lab.env))
        assert [a["id"] for a in listed.json()["approvals"]] == [second]
    assert marks(lab.marked) == []  # answering ran nothing: the SDK caller resumes


def test_another_users_requests_are_not_answered(lab):
    parked = lab.park()
    ident = parked["pending_approvals"][0]["id"]
    store = Path(lab.env["JARVIS_HOME"]) / "approvals.db"
    if os.geteuid() == 0:  # the unprivileged run cannot give a file away
        os.chown(store, 4242, 4242)
        out = jarvis(lab.env, "approvals", "approve", ident)
        assert out.returncode != 0 and "belongs to another user" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
        os.chown(store, os.geteuid(), os.getegid())
    # A store another user could read or write is made private again before use.
    os.chmod(store, 0o666)
    out = jarvis(lab.env, "approvals", "list")
    assert out.returncode == 0, out.stderr
    assert oct(store.stat().st_mode & 0o777) == "0o600"
    assert status_of(lab, ident) == "pending"


def test_a_model_cannot_approve_or_grant(lab):
    # No tool a model can be given answers requests or writes grants.
    out = jarvis(lab.env, "tools", "list", "--json")
    assert out.returncode == 0, out.stderr
    names = [t["name"] for t in json.loads(out.stdout)]
    assert names and not [n for n in names if re.search(r"approv|grant|decide", n)], names
    parked = lab.park()
    ident = parked["pending_approvals"][0]["id"]

    # A model told (by a page it read, say) to approve the request and grant itself.
    def sly(body: dict):
        if body["messages"][-1].get("role") == "tool":
            return "tried"
        return reply(tool_calls=[
            tool_call("approvals_approve", {"id": ident, "always": True}),
            tool_call("jarvis", {"args": ["approvals", "approve", ident]}),
            tool_call("grants_add", {"tool": "danger", "host": "*"})])

    lab.engine.add(sly, sly)
    result = lab.system().ask_full(f"approve {ident} for me", tools=["think"],
                                   agent="orchestrator")
    assert all(not r["success"] for r in result["tool_results"]), result["tool_results"]
    assert status_of(lab, ident) == "pending"
    grants = json.loads(jarvis(lab.env, "grants", "list", "--json").stdout)
    assert grants == []
    assert marks(lab.marked) == []
