"""A chat run of `jarvis serve` that needs the person parks (with `[approvals] notify`): the
client's reply says which request waits and how to answer it, the request reaches the
person's channel, and once approved (the CLI, or serve's own HTTP API) the server continues
the run once and sends its answer to the channel. Real processes: `jarvis serve`, the CLI,
the loopback model and channel receiver."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from approvals_support import Receiver, answer_from_request, approval_id, config_text, marks
from approvals_support import workspace as with_danger_tool
from scheduler_support import jarvis
from serve_process import jarvis_serve, owner_headers
from waiting import wait_for

from jarvis.testing import FakeOpenAIServer


def chat(serve_url: str, env: dict, text: str, stream: bool = False) -> httpx.Response:
    return httpx.post(f"{serve_url}/v1/chat/completions", headers=owner_headers(env),
                      json={"model": "orchestrator", "stream": stream,
                            "messages": [{"role": "user", "content": text}]}, timeout=60)


def answers(receiver: Receiver) -> list[dict]:
    return [m for m in receiver.messages() if m["title"].startswith("jarvis: answer (")]


def test_a_chat_run_parks_and_the_server_continues_it_once(tmp_path, cli_env):
    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        (tmp_path / "serve").mkdir()
        folder = with_danger_tool(tmp_path / "serve")
        config = config_text(engine.base_url, receiver, extra="[memory]\ncontext = false\n")
        env = dict(cli_env, OPENAI_API_KEY="test")
        cli = dict(env, JARVIS_CONFIG=str(folder / "config.toml"))
        first, second = tmp_path / "first.txt", tmp_path / "second.txt"
        with jarvis_serve(env, folder, "--tools", "danger", config=config) as serve_url:
            reply = chat(serve_url, env, f"write now {first}")
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["jarvis"]["status"] == "parked"
            (pending,) = body["jarvis"]["pending_approvals"]
            text = body["choices"][0]["message"]["content"]
            assert f"jarvis approvals approve {pending['id']}" in text
            assert "sent to your channel me" in text
            request = wait_for(lambda: receiver.requests()[:1], 30, "the request")[0]
            assert approval_id(request) == pending["id"]
            assert marks(first) == []  # nothing ran before the person answered
            out = jarvis(cli, "approvals", "approve", pending["id"])
            assert out.returncode == 0, out.stderr
            answer = wait_for(lambda: answers(receiver), 30, "the answer at the channel")[0]
            assert answer["message"] == f"tool said: wrote {first}", answer
            assert marks(first) == ["written now"]
            # A second answer is refused and runs nothing again.
            again = httpx.post(f"{serve_url}/jarvis/approvals/{pending['id']}/approve",
                               json={}, headers=owner_headers(env))
            assert again.status_code == 409
            # The SDK does not continue serve's runs: the server does.
            from jarvis import Jarvis
            from jarvis.core.config import load_config
            from jarvis.errors import UserError

            with Jarvis(config=load_config(folder / "config.toml")) as system:
                try:
                    system.resume(body["jarvis"]["run_id"])
                except UserError as exc:
                    assert "continued already" in str(exc) or "jarvis serve" in str(exc)
                else:
                    raise AssertionError("a served run was resumed twice")
            # Streamed too, approved through serve's HTTP API this time.
            streamed = chat(serve_url, env, f"write later {second}", stream=True)
            assert streamed.status_code == 200
            events = [json.loads(line[6:]) for line in streamed.text.splitlines()
                      if line.startswith("data: {")]
            said = "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                           if e.get("choices"))
            final = [e for e in events if e.get("jarvis")][-1]["jarvis"]
            assert final["status"] == "parked" and "needs your approval" in said
            ident = final["pending_approvals"][0]["id"]
            answered = httpx.post(f"{serve_url}/jarvis/approvals/{ident}/approve", json={},
                                  headers=owner_headers(env))
            assert answered.status_code == 200, answered.text
            wait_for(lambda: len(answers(receiver)) == 2, 30, "the second answer")
            assert marks(second) == ["written later"]
    assert marks(first) == ["written now"]
    assert len(answers(receiver)) == 2 and len(receiver.requests()) == 2


def test_without_a_channel_serve_refuses_as_before(tmp_path, cli_env):
    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        (tmp_path / "serve").mkdir()
        folder = with_danger_tool(tmp_path / "serve")
        config = config_text(engine.base_url, receiver, extra="[memory]\ncontext = false\n")
        config = config.replace('notify = "me"', 'notify = ""')
        env = dict(cli_env, OPENAI_API_KEY="test")
        target = tmp_path / "t.txt"
        with jarvis_serve(env, folder, "--tools", "danger", config=config) as serve_url:
            body = chat(serve_url, env, f"write now {target}").json()
    assert "status" not in body["jarvis"]
    assert body["choices"][0]["message"]["content"].startswith("tool said: ERROR (denied)")
    assert marks(target) == [] and receiver.requests() == []
    assert Path(target).exists() is False


def test_two_servers_racing_continue_a_chat_run_once(tmp_path, cli_env, monkeypatch):
    """Two ServedRuns (two servers on one store) find the same answered run at once: one
    continues it, the other's claim is refused; the tool ran once, one answer was sent."""
    import threading

    from jarvis import Jarvis
    from jarvis.approvals import decide
    from jarvis.approvals.served import ServedRuns
    from jarvis.core.config import load_config

    with FakeOpenAIServer(default=answer_from_request) as engine, Receiver() as receiver:
        with_danger_tool(Path.cwd())
        path = Path.cwd() / "config.toml"
        path.write_text(config_text(engine.base_url, receiver,
                                    extra="[memory]\ncontext = false\n"))
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        target = tmp_path / "t.txt"
        with Jarvis(config=load_config(path)) as one, Jarvis(config=load_config(path)) as two:
            parked = one.ask_full(f"write now {target}", tools=["danger"], agent="orchestrator",
                                  source="serve", on_approval="defer")
            assert parked["status"] == "parked"
            decide(parked["pending_approvals"][0]["id"], True, by="test", config=one.config)
            start = threading.Barrier(2)
            done: list[int] = []

            def race(system) -> None:
                start.wait()
                done.append(ServedRuns(system).tick())

            threads = [threading.Thread(target=race, args=(s,)) for s in (one, two)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        assert sorted(done) == [0, 1], done
        assert marks(target) == ["written now"]
        assert len(answers(receiver)) == 1
