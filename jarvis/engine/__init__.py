"""Inference engines: the InferenceEngine protocol, the OpenAI-compatible engine, discovery.

Cheap to import: the `openai` package loads only when an engine is built.
"""

from __future__ import annotations

from typing import Any

from jarvis.engine.base import GenerateResult, InferenceEngine, StreamChunk

_LAZY = {
    "OpenAICompatEngine": "jarvis.engine.openai_compat",
    "BACKENDS": "jarvis.engine.backends",
    "get_engine": "jarvis.engine.discovery",
    "discover_engine": "jarvis.engine.discovery",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jarvis.engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["BACKENDS", "GenerateResult", "InferenceEngine", "OpenAICompatEngine", "StreamChunk",
           "discover_engine", "get_engine"]
