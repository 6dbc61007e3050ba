"""A public testing kit: run agents offline against scripted model replies.

- `ScriptedEngine`: an in-process InferenceEngine that replays scripted replies (text and tool
  calls) and records every request it got.
- `FakeOpenAIServer`: a real loopback HTTP server speaking the OpenAI chat-completions protocol
  (`POST /v1/chat/completions`, plain and SSE streaming, tool calls in both, usage;
  `GET /v1/models`). It serves scripted replies in order and records each request body, so
  a real `jarvis ask` subprocess, or any OpenAI client, can be tested end to end.

A script item is one of:
  - a string: a final text reply;
  - `reply(content, tool_calls=[tool_call(name, args), ...], usage=...)` or the same as a dict
    `{"content": ..., "tool_calls": [{"name": ..., "arguments": {...}}]}`;
  - `HTTPFailure(status, message)` / `{"status": 503, "error": "..."}`: answer with an error;
  - `Disconnect()` / `{"disconnect": true}`: drop the connection without answering;
  - `Misbehave(kind, ...)` / `{"misbehave": kind, "interval": ..., "seconds": ...}`: an answer
    that never ends well (keep-alive comments, empty deltas, one byte at a time, or an
    endless flood), to test a client's deadlines and size limits;
  - a callable `fn(request_body) -> item`, to answer from the request itself;
  - `obey(answer)` (`{"obey": true, "answer": "..."}` in a --script file): a model that
    follows instructions it finds in what it reads (`<<jarvis-test-call {...}>>` markers;
    jarvis.testing.obey), as a prompt-injected model does, for attack and utility suites.

From the command line (for tests that run the server in another process):
    python -m jarvis.testing serve --reply "Hello" --script replies.json --record requests.jsonl
prints the base URL (`http://127.0.0.1:PORT/v1`) on its first line, then serves until stopped.

Modules: script (script items and their queue), engine (ScriptedEngine), server
(FakeOpenAIServer), obey (the obedient model), cli (`python -m jarvis.testing`).
"""

from __future__ import annotations

from jarvis.testing.cli import main as main
from jarvis.testing.engine import ScriptedEngine
from jarvis.testing.obey import obey
from jarvis.testing.script import Disconnect, HTTPFailure, Misbehave, reply, tool_call
from jarvis.testing.server import FakeOpenAIServer

__all__ = [
    "Disconnect",
    "Misbehave",
    "FakeOpenAIServer",
    "HTTPFailure",
    "ScriptedEngine",
    "obey",
    "reply",
    "tool_call",
]
