"""`python -m jarvis.testing serve ...`: the fake OpenAI-compatible server from the command
line, for tests that run it in another process."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from jarvis.testing.server import FakeOpenAIServer, RecordedRequest

SCRIPT_KEYS = frozenset({"content", "tool_calls", "usage", "finish_reason", "model",
                         "status", "error", "retry_after", "disconnect", "obey", "answer",
                         "secret_pattern",
                         # {"misbehave": KIND, ...}: the hostile answers (docs/engines-agents.md)
                         "misbehave", "interval", "seconds", "chunk", "decoded_mib"})


def _load_script(path: str) -> list[Any]:
    """The replies in a --script file; a problem is one line naming the file (SystemExit)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise SystemExit(f"error: cannot read --script {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise SystemExit(f"error: --script {path} is not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise SystemExit(f"error: --script {path}: expected a JSON list of replies")
    from jarvis.testing.obey import DEFAULT_SECRET, Obey
    for number, item in enumerate(data, 1):
        if isinstance(item, str):
            continue
        if not isinstance(item, dict):
            raise SystemExit(f"error: --script {path}: reply {number} is a "
                             f"{type(item).__name__}; use a string or an object")
        unknown = sorted(set(item) - SCRIPT_KEYS)
        if unknown:
            raise SystemExit(f"error: --script {path}: reply {number} has unknown key(s) "
                             f"{', '.join(unknown)}; valid: {', '.join(sorted(SCRIPT_KEYS))}")
        if item.get("obey"):  # a model that follows instructions it reads (testing.obey)
            data[number - 1] = Obey(str(item.get("answer", "done")),
                                    str(item.get("secret_pattern") or DEFAULT_SECRET))
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jarvis.testing serve ...`: run a FakeOpenAIServer until interrupted."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m jarvis.testing",
                                     description="Run jarvis's fake OpenAI-compatible server.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve scripted replies on a loopback port")
    serve.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    serve.add_argument("--reply", action="append", default=[], help="a text reply (repeatable)")
    serve.add_argument("--script", help="a JSON file with a list of replies")
    serve.add_argument("--default", help="text served once the script is used up")
    serve.add_argument("--model", action="append", default=[], help="a model to list")
    serve.add_argument("--record", help="append each request to this file as a JSON line "
                       "{\"method\", \"path\", \"body\"}")
    args = parser.parse_args(argv)

    items: list[Any] = list(args.reply)
    if args.script:
        items.extend(_load_script(args.script))
    record_lock = threading.Lock()

    def record(req: RecordedRequest) -> None:
        if args.record:
            with record_lock, open(args.record, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"method": req.method, "path": req.path, "body": req.body}) + "\n")

    server = FakeOpenAIServer(items, models=args.model or ("test-model",), default=args.default,
                              port=args.port, on_request=record)
    with server:
        print(server.base_url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    sys.stdout.flush()
    return 0
