"""Engine selection: by name, by environment, and by probing local hosts."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from ports import closed_port

from jarvis.core.config import load_config
from jarvis.core.registry import EngineRegistry
from jarvis.engine.discovery import discover_engine, get_engine
from jarvis.engine.openai_compat import OpenAICompatEngine
from jarvis.errors import EngineError, UnknownNameError
from jarvis.testing import FakeOpenAIServer, ScriptedEngine

LOCAL = ("ollama", "vllm", "llamacpp", "lmstudio", "sglang")


def _write_hosts(hosts: dict[str, str]) -> Path:
    lines = ["[engine.hosts]"] + [f'{k} = "{v}"' for k, v in hosts.items()]
    path = Path("config.toml")
    path.write_text("\n".join(lines) + "\n")
    return path


def _nothing_listening() -> dict[str, str]:
    return {name: f"http://127.0.0.1:{closed_port()}" for name in LOCAL}


def test_discovery_with_nothing_reachable_fails_fast_and_says_what_it_tried():
    hosts = _nothing_listening()
    _write_hosts(hosts)
    start = time.perf_counter()
    with pytest.raises(EngineError) as info:
        discover_engine(load_config())
    assert time.perf_counter() - start < 3.0  # probes bounded at 0.4 s; room for a loaded machine
    message = str(info.value)
    assert len(message) < 200 and "\n" not in message  # one short line ...
    assert all(name in message for name in hosts)  # ... naming what was tried
    details = info.value.details  # the rest, for --verbose
    for name, host in hosts.items():
        assert f"{name} at {host}/v1" in details
    assert "ollama serve" in details and "JARVIS_ENGINE" in details and "OLLAMA_HOST" in details


def test_discovery_bounds_a_host_that_never_answers():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections, never answers
    try:
        hosts = _nothing_listening()
        hosts["ollama"] = f"http://127.0.0.1:{silent.getsockname()[1]}"
        _write_hosts(hosts)
        start = time.perf_counter()
        with pytest.raises(EngineError, match="no inference engine is reachable") as info:
            discover_engine(load_config(), timeout=0.3)
        assert time.perf_counter() - start < 3.0  # 0.3 s + 0.1; room for a loaded machine
        assert "no answer within 0.3 s" in info.value.details
    finally:
        silent.close()


def test_discovery_picks_the_reachable_engine_in_priority_order():
    with FakeOpenAIServer(models=["m1"]) as low, FakeOpenAIServer(models=["m2"]) as high:
        hosts = _nothing_listening()
        hosts["sglang"] = low.url
        hosts["vllm"] = high.url
        _write_hosts(hosts)
        found = discover_engine(load_config())
        assert (found.backend, found.models) == ("vllm", ["m2"])
        engine = get_engine(load_config())
        assert isinstance(engine, OpenAICompatEngine) and engine.engine_id == "vllm"
        assert engine.default_model() == "m2"  # from the probe, no second request
        assert [r.method for r in high.log].count("GET") == 2  # one probe per discovery


def test_named_engine_and_host_from_environment(monkeypatch):
    with FakeOpenAIServer(["hello"]) as server:
        monkeypatch.setenv("JARVIS_ENGINE", "llamacpp")
        monkeypatch.setenv("LLAMACPP_HOST", server.url)
        monkeypatch.setenv("JARVIS_MODEL", "tiny")
        engine = get_engine(load_config())
        assert engine.engine_id == "llamacpp" and engine.base_url == server.base_url
        assert engine.generate([{"role": "user", "content": "x"}]).content == "hello"
        assert server.requests[0]["model"] == "tiny"
        engine.close()


def test_argument_host_beats_environment(monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:1")
    engine = get_engine(load_config(), "ollama", host="http://10.0.0.5:11434")
    assert engine.base_url == "http://10.0.0.5:11434/v1"


def test_host_without_an_engine_name_is_an_error():
    from jarvis.errors import UserError

    with pytest.raises(UserError, match="-e/--engine"):
        get_engine(load_config(), host="http://127.0.0.1:1")


def test_unknown_engine_lists_valid_names():
    with pytest.raises(UnknownNameError) as info:
        get_engine(load_config(), "olama")
    for name in ("ollama", "vllm", "llamacpp", "lmstudio", "sglang", "openai"):
        assert name in str(info.value)


def test_custom_engine_from_the_registry():
    EngineRegistry.register_value("scripted", lambda model="": ScriptedEngine(["hi"], model=model or "s"))
    engine = get_engine(load_config(), "scripted", model="mine")
    assert engine.generate([{"role": "user", "content": "x"}]).model == "mine"
