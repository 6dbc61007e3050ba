"""Inference engines: the InferenceEngine protocol, the OpenAI-compatible engine, discovery.

Cheap to import: the `openai` package loads only when an engine is built.
"""

from __future__ import annotations

from jarvis._lazy import lazy_getattr
from jarvis.engine.base import GenerateResult, InferenceEngine, StreamChunk

_LAZY = {
    "OpenAICompatEngine": "jarvis.engine.openai_compat",
    "BACKENDS": "jarvis.engine.backends",
    "get_engine": "jarvis.engine.discovery",
    "discover_engine": "jarvis.engine.discovery",
}


__getattr__ = lazy_getattr("jarvis.engine", _LAZY, globals())


__all__ = ["BACKENDS", "GenerateResult", "InferenceEngine", "OpenAICompatEngine", "StreamChunk",
           "discover_engine", "get_engine"]
