"""What a tool may ask jarvis for: the services, and how a tool class declares its needs.

A tool class says what it wants from jarvis in its `needs` class attribute; whoever builds it
(the SDK, `jarvis tools run`, `jarvis serve`, `jarvis mcp serve`, the scheduler's runs) hands
over exactly that and nothing else:

    class Summarize(BaseTool):
        needs = ("engine", "model")            # parameter `engine` gets the engine, ...

    class Recall(BaseTool):
        needs = {"backend": "memory"}          # parameter `backend` gets the memory store

A constructor parameter that is not declared gets nothing from jarvis, whatever its name:
`backend` of web_search is its own setting (searxng, brave, ...), not the memory store.
The registry sits in core and knows no tool, so the declaration is read here, duck-typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# service -> what it is (shown in errors and docs/tools.md)
SERVICES: dict[str, str] = {
    "engine": "the inference engine of the run (an InferenceEngine)",
    "model": "the model name of the run (a str)",
    "memory": "the memory store ([memory] db_path; a MemoryBackend)",
    "scheduler": "the scheduler (a TaskScheduler on [scheduler] db_path)",
    "bus": "the event bus of the run (an EventBus)",
    "config": "the loaded configuration (a JarvisConfig)",
}


def declared_needs(cls: Any) -> dict[str, str]:
    """Constructor parameter -> service, from `cls.needs` (empty when it declares none).

    `needs` is a tuple of service names (each given to the parameter of the same name) or a
    mapping of parameter name to service name. An unknown service is a ValueError naming the
    valid ones (BaseTool turns it into a ToolDefinitionError when the class is defined).
    """
    raw = getattr(cls, "needs", None) or ()
    if isinstance(raw, str):
        raw = (raw,)
    if isinstance(raw, Mapping):
        pairs = [(str(param), str(service)) for param, service in raw.items()]
    else:
        try:
            pairs = [(str(service), str(service)) for service in raw]
        except TypeError:
            raise ValueError(f"needs must be a tuple of service names or a mapping of "
                             f"constructor parameter to service, not {raw!r}") from None
    for _param, service in pairs:
        if service not in SERVICES:
            from jarvis.errors import did_you_mean

            close = did_you_mean(service, SERVICES)
            raise ValueError(f"needs: unknown service {service!r}" + (f" ({close})" if close else "")
                             + f"; jarvis provides {', '.join(SERVICES)}")
    return dict(pairs)


def needed_services(cls: Any) -> set[str]:
    """The services a tool class declares (what its builder must provide)."""
    return set(declared_needs(cls).values()) if isinstance(cls, type) else set()


def service_kwargs(cls: Any, services: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor arguments of `cls` for the services it declares and `services` holds."""
    return {param: services[service] for param, service in declared_needs(cls).items()
            if service in services}
