"""Helpers for the `jarvis serve` tests: a real server on a loopback port."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from jarvis.core.config import load_config
from jarvis.server import ServerThread, ServeSettings, build_app
from jarvis.tools.base import tool


@tool(register=False)
def explode(reason: str) -> str:
    """Always fails (a tool bug).

    Args:
        reason: what to complain about.
    """
    raise RuntimeError(f"boom: {reason}")


@tool(register=False)
def submit(answer: int) -> dict:
    """Submit an answer; 42 is right.

    Args:
        answer: the answer.
    """
    right = answer == 42
    return {"observation": "correct" if right else "wrong", "reward": 1.0 if right else 0.0,
            "finished": True}


def jarvis_for(fake: Any = None) -> Any:
    """A Jarvis on the fake OpenAI server (or one that is never asked)."""
    from jarvis.sdk import Jarvis

    config = load_config(overrides={"engine.max_retries": 0, "runs.enabled": False,
                                    "memory.enabled": False})
    if fake is None:
        return Jarvis(config=config, engine="vllm", host="http://127.0.0.1:9", model="none")
    return Jarvis(config=config, engine="vllm", host=fake.url, model="test-model")


@contextlib.contextmanager
def running(settings: ServeSettings | None = None, *, tools: list[str] | None = None,
            extra_tools: list[Any] = (), fake: Any = None, tool_settings: dict | None = None
            ) -> Iterator[ServerThread]:
    """A server exposing `tools` (names, built from the registry) plus tool instances."""
    from jarvis.tools.catalog import build_tools

    settings = settings or ServeSettings()
    names = tools if tools is not None else ["think", "calculator"]
    built = build_tools(names, settings=tool_settings or {}) + list(extra_tools)
    jarvis = jarvis_for(fake)
    app = build_app(settings, tools=built, jarvis=jarvis)
    try:
        with ServerThread(app) as server:
            server.app_state = app.state
            yield server
    finally:
        jarvis.close()
