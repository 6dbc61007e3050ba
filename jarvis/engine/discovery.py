"""Finding an engine: by name, or by probing the configured local hosts concurrently.

Probes (jarvis.engine.probe) use the standard library (no openai import), all at once, each
bounded by `[engine] discovery_timeout`, so with nothing running the answer comes back in well
under a second, with a message listing what was tried and how to start or point at an engine.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from jarvis.core.registry import EngineRegistry, accepted_kwargs
from jarvis.engine.backends import BACKENDS, LOCAL_BACKENDS, base_url
from jarvis.engine.probe import ProbeResult, probe
from jarvis.errors import EngineError, UnknownNameError


def _candidates(config: Any) -> list[tuple[str, str, str | None]]:
    hosts = config.engine.hosts
    out = [(name, base_url(BACKENDS[name], getattr(hosts, name)), None) for name in LOCAL_BACKENDS]
    # OpenAI-compatible services count only when the user pointed at one.
    if os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY"):
        out.append(("openai", base_url(BACKENDS["openai"], hosts.openai),
                    os.environ.get("OPENAI_API_KEY")))
    return out


def discover_engine(config: Any, timeout: float | None = None) -> ProbeResult:
    """Probe every candidate at once; the first reachable one in priority order wins.

    Raises EngineError listing what was tried and how to start or point at an engine.
    """
    timeout = timeout if timeout is not None else config.engine.discovery_timeout
    candidates = _candidates(config)
    results: list[ProbeResult] = [ProbeResult(name, url, error=f"no answer within {timeout:g} s")
                                  for name, url, _ in candidates]
    done = [threading.Event() for _ in candidates]

    def run(i: int, name: str, url: str, key: str | None) -> None:
        results[i] = probe(url, timeout, name, key)
        done[i].set()

    for i, (name, url, key) in enumerate(candidates):
        threading.Thread(target=run, args=(i, name, url, key), daemon=True,
                         name=f"jarvis-probe-{name}").start()
    deadline = time.monotonic() + timeout + 0.1
    for i in range(len(candidates)):
        # In priority order: stop waiting as soon as the best possible answer is known.
        if not done[i].wait(max(0.0, deadline - time.monotonic())):
            continue
        if results[i].ok:
            return results[i]
    # One short line (what was tried, what to do); the per-engine errors and start hints go
    # to `details`, which the CLI prints with --verbose.
    names = ", ".join(dict.fromkeys(r.backend for r in results))
    # No CLI flag in the message: the SDK raises it too (the CLI adds "--verbose shows
    # details"; `details` hold what was tried and how to start one).
    error = EngineError(f"no inference engine is reachable (tried {names}); start one, or set "
                        f"JARVIS_ENGINE and its host (e.g. OLLAMA_HOST)")
    from jarvis.security.redact import redact_url

    tried = "\n".join(f"  {r.backend} at {redact_url(r.url)}: {r.error}" for r in results)
    hints = "\n".join(f"  {n}: {BACKENDS[n].start_hint}" for n in LOCAL_BACKENDS)
    error.details = (f"tried:\n{tried}\nstart one:\n{hints}\nor point jarvis at a running one: "
                     f"-e/--engine NAME or JARVIS_ENGINE, and its host with --host, OLLAMA_HOST, "
                     f"VLLM_HOST, LLAMACPP_HOST, LMSTUDIO_HOST, SGLANG_HOST or OPENAI_BASE_URL "
                     f"(or [engine.hosts] in config.toml)")
    raise error


def engine_names() -> list[str]:
    return sorted(set(BACKENDS) | set(EngineRegistry.keys()))


def get_engine(config: Any = None, name: str | None = None, host: str | None = None,
               model: str | None = None, default_client: str = "auto") -> Any:
    """Build the engine to use: `name` (else config/JARVIS_ENGINE, else discovery).

    Hosts come from `host`, then the environment, then config.toml (the environment is folded
    into the config by `load_config`). Custom engines registered in EngineRegistry are built
    with whichever of config/host/model their constructor takes. `default_client` is the HTTP
    client used when `[engine] client` is "auto" ("auto" again: chosen per URL, see
    jarvis.engine.transport.auto_client).
    """
    if config is None:
        from jarvis.core.config import load_config

        config = load_config()
    ec = config.engine
    name = name or ec.default
    models = None
    if not name and host:
        from jarvis.errors import UserError

        raise UserError(f"a host ({host}) was given without an engine name; name it with "
                        f"-e/--engine or JARVIS_ENGINE ({', '.join(engine_names())})")
    if not name:
        found = discover_engine(config)
        name, host, models = found.backend, found.url, found.models
    if name in EngineRegistry._entries:  # user engines win over the built-in backend names
        factory = EngineRegistry.get(name)
        return factory(**accepted_kwargs(factory, {"config": config, "host": host,
                                                   "model": model or ec.model}))
    if name not in BACKENDS:
        raise UnknownNameError("engine", name, engine_names(),
                               hint="set -e/--engine or JARVIS_ENGINE to one of them")
    from jarvis.engine.openai_compat import OpenAICompatEngine

    return OpenAICompatEngine(
        name, host or getattr(ec.hosts, name), model=model or ec.model, timeout=ec.timeout,
        max_retries=ec.max_retries, retry_backoff=ec.retry_backoff,
        connect_timeout=ec.connect_timeout, models=models,
        client=default_client if ec.client == "auto" else ec.client,
        max_response_bytes=ec.max_response_bytes,
        vision=ec.vision, vision_models=dict(ec.vision_models))
