"""Name -> implementation registries (tools, agents, engines).

Every way of adding a tool (built-in modules, `@tool`, workspace `tools/*.py`, plugin entry
points, MCP servers) ends in `ToolRegistry`, so lookup, listing and errors are the same for all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import FunctionType
from typing import Any, ClassVar, TypeVar

from jarvis.errors import DuplicateNameError, UnknownNameError

T = TypeVar("T")


def _same_definition(existing: Any, value: Any) -> bool:
    """True when `value` is `existing` or a re-run of the very same definition.

    A re-run (a module reloaded on purpose, a notebook cell run again) defines a new class or
    function at the same module-level place. Plain values (1 and 2), instances, and classes a
    function makes on each call (`<locals>` in the qualname: two different definitions that
    only share a name) are never re-runs, so registering them twice is a duplicate.
    """
    if existing is value:
        return True
    mine, theirs = _definition(existing), _definition(value)
    return mine is not None and mine == theirs


def _definition(value: Any) -> tuple[str, str] | None:
    """(module, qualname) of a module-level class or function (or a @tool's function)."""
    func = getattr(value, "func", None)  # tools made by @tool carry the function they wrap
    if isinstance(value, type) or isinstance(value, FunctionType):
        target = value
    elif func is not None and isinstance(func, FunctionType):
        target = func
    else:
        return None
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname:
        return None
    return module, qualname


def _identity(value: Any) -> tuple[str, str] | None:
    target = value if isinstance(value, type) or isinstance(value, FunctionType) else type(value)
    func = getattr(value, "func", None)  # tools made by @tool carry the function they wrap
    if func is not None and isinstance(func, FunctionType):
        target = func
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    return (module, qualname) if module and qualname else None


class RegistryBase:
    """A class-level mapping from names to classes, factories or instances."""

    kind: ClassVar[str] = "entry"
    _entries: ClassVar[dict[str, Any]]
    _origins: ClassVar[dict[str, str]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._entries = {}
        cls._origins = {}

    # Subclasses override to import the modules that register the built-ins.
    @classmethod
    def _ensure_loaded(cls) -> None:
        return None

    @classmethod
    def register(cls, key: str, *, origin: str | None = None,
                 replace: bool = False) -> Callable[[T], T]:
        """Class decorator: `@ToolRegistry.register("name")`."""

        def decorator(value: T) -> T:
            cls.register_value(key, value, origin=origin, replace=replace)
            return value

        return decorator

    @classmethod
    def register_value(cls, key: str, value: Any, *, origin: str | None = None,
                       replace: bool = False) -> None:
        """Register `value` under `key`; a name taken by something else is an error."""
        if not isinstance(key, str) or not key:
            raise DuplicateNameError(f"{cls.kind} names must be non-empty strings, got {key!r}")
        if key in cls._entries and not replace and not _same_definition(cls._entries[key], value):
            # The first registration stays; a true re-run of its definition passes.
            raise DuplicateNameError(
                f"{cls.kind} {key!r} is already registered (from {cls._origins.get(key)}); "
                f"pick another name or unregister the first one"
            )
        cls._entries[key] = value
        cls._origins[key] = origin or _describe_origin(value)

    @classmethod
    def unregister(cls, key: str) -> None:
        cls._entries.pop(key, None)
        cls._origins.pop(key, None)

    @classmethod
    def get(cls, key: str) -> Any:
        try:
            return cls._entries[key]
        except KeyError:
            cls._ensure_loaded()
            if key in cls._entries:
                return cls._entries[key]
            raise UnknownNameError(cls.kind, key, cls._entries) from None

    @classmethod
    def create(cls, key: str, *args: Any, **kwargs: Any) -> Any:
        """Instantiate a registered class (an instance is returned as it is)."""
        value = cls.get(key)
        if isinstance(value, type) or (callable(value) and not hasattr(value, "spec")):
            return value(*args, **kwargs)
        return value

    @classmethod
    def contains(cls, key: str) -> bool:
        cls._ensure_loaded()
        return key in cls._entries

    @classmethod
    def keys(cls) -> list[str]:
        cls._ensure_loaded()
        return sorted(cls._entries)

    @classmethod
    def items(cls) -> Iterator[tuple[str, Any]]:
        cls._ensure_loaded()
        return iter(sorted(cls._entries.items()))

    @classmethod
    def origin(cls, key: str) -> str:
        cls.get(key)
        return cls._origins[key]

    @classmethod
    def snapshot(cls) -> tuple[dict[str, Any], dict[str, str]]:
        """Capture the registry (tests restore it to stay independent)."""
        cls._ensure_loaded()
        return dict(cls._entries), dict(cls._origins)

    @classmethod
    def restore(cls, snap: tuple[dict[str, Any], dict[str, str]]) -> None:
        cls._entries.clear()
        cls._entries.update(snap[0])
        cls._origins.clear()
        cls._origins.update(snap[1])

    @classmethod
    def clear(cls) -> None:
        cls._entries.clear()
        cls._origins.clear()


def _describe_origin(value: Any) -> str:
    ident = _identity(value)
    if ident is None:
        return "unknown"
    module = ident[0]
    return "builtin" if module.startswith("jarvis.") else f"module {module}"


def accepted_kwargs(factory: Callable[..., Any], available: dict[str, Any]) -> dict[str, Any]:
    """The subset of `available` that `factory` takes as keyword arguments."""
    import inspect  # here, not at the top: `import jarvis` imports this module

    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(available)
    return {k: v for k, v in available.items() if k in params}


class ToolRegistry(RegistryBase):
    """Every tool jarvis can run, by name.

    On-demand loaders (`set_on_demand`) add tools that are too costly to load up front, e.g.
    an MCP server whose tool list is not cached yet: `get` of a missing name calls
    `loader(name)` (so does `contains`), listing every tool (`keys`, `items`) calls
    `loader(None)`. A loader's `explain(name)` may say why a name it should have provided is
    missing (its server is down); `get` then raises UnavailableToolError with that reason
    instead of a bare "unknown tool".
    """

    kind = "tool"
    _loaded: ClassVar[bool] = False
    _catalog_loader: ClassVar[Callable[[], None] | None] = None
    _catalog_part: ClassVar[Callable[[str], None] | None] = None
    _on_demand: ClassVar[dict[str, Callable[[str | None], None]]] = {}
    _explain: ClassVar[dict[str, Callable[[str], str | None]]] = {}

    @classmethod
    def set_catalog_loader(cls, loader: Callable[[], None] | None,
                           part: Callable[[str], None] | None = None) -> None:
        """Install the hooks that register the built-in catalog on first lookup: `loader`
        registers all of it, `part(name)` only the built-in called `name` (if any).

        The registry sits in core and knows no tool (arrows point down); the package that
        owns the catalog installs these hooks (`jarvis/__init__.py` does, for jarvis.tools,
        the scheduler's tools and the MCP bridge). A lookup by name and a registration under
        a built-in's name load that built-in first, alone (so a newcomer taking its name is
        refused, as with the whole catalog loaded).
        """
        cls._catalog_loader = loader
        cls._catalog_part = part
        cls._loaded = False

    @classmethod
    def _load_builtin(cls, key: str) -> None:
        # Also once the whole catalog is loading (or loaded): a lookup on another thread while
        # it loads waits for that tool's module instead of missing the name.
        part = cls._catalog_part
        if part is not None and isinstance(key, str) and key not in cls._entries:
            part(key)

    @classmethod
    def register_value(cls, key: str, value: Any, *, origin: str | None = None,
                       replace: bool = False) -> None:
        cls._load_builtin(key)
        super().register_value(key, value, origin=origin, replace=replace)

    @classmethod
    def _ensure_loaded(cls) -> None:
        loader = cls._catalog_loader
        if not cls._loaded and loader is not None:
            cls._loaded = True
            loader()

    @classmethod
    def set_on_demand(cls, source: str, loader: Callable[[str | None], None] | None,
                      explain: Callable[[str], str | None] | None = None) -> None:
        """Install (or with None remove) the on-demand loader of `source`."""
        if loader is None:
            cls._on_demand.pop(source, None)
            cls._explain.pop(source, None)
        else:
            cls._on_demand[source] = loader
            if explain is not None:
                cls._explain[source] = explain
            else:
                cls._explain.pop(source, None)

    @classmethod
    def _load_on_demand(cls, key: str | None) -> None:
        for loader in list(cls._on_demand.values()):
            loader(key)

    @classmethod
    def _resolve(cls, key: str) -> None:
        if key not in cls._entries and cls._on_demand:
            cls._ensure_loaded()
            if key not in cls._entries:
                cls._load_on_demand(key)

    @classmethod
    def get(cls, key: str) -> Any:
        cls._load_builtin(key)
        cls._resolve(key)
        if key not in cls._entries:
            cls.check_available(key)
        return super().get(key)

    @classmethod
    def check_available(cls, key: str) -> None:
        """Raise UnavailableToolError when an on-demand source knows why `key` is missing."""
        for explain in list(cls._explain.values()):
            reason = explain(key)
            if reason:
                from jarvis.errors import UnavailableToolError

                raise UnavailableToolError(key, reason)

    @classmethod
    def contains(cls, key: str) -> bool:
        cls._load_builtin(key)
        if key in cls._entries:
            return True
        cls._resolve(key)
        return super().contains(key)

    @classmethod
    def keys(cls) -> list[str]:
        cls._load_on_demand(None)
        return super().keys()

    @classmethod
    def items(cls) -> Iterator[tuple[str, Any]]:
        cls._load_on_demand(None)
        return super().items()

    @classmethod
    def snapshot(cls) -> tuple[Any, ...]:
        return (*super().snapshot(), dict(cls._on_demand), dict(cls._explain))

    @classmethod
    def restore(cls, snap: tuple[Any, ...]) -> None:
        super().restore(snap)
        if len(snap) > 2:
            cls._on_demand.clear()
            cls._on_demand.update(snap[2])
        if len(snap) > 3:
            cls._explain.clear()
            cls._explain.update(snap[3])

    @classmethod
    def create_with(cls, key: str, services: dict[str, Any]) -> Any:
        """Instantiate a tool with the services it declares in its `needs` (engine, model,
        memory, scheduler, bus, config; see jarvis.core.services), and nothing else."""
        from jarvis.core.services import service_kwargs

        value = cls.get(key)
        if isinstance(value, type):
            return value(**service_kwargs(value, services))
        return value


class AgentRegistry(RegistryBase):
    """Agent classes by name (simple, react, orchestrator, workspace agents)."""

    kind = "agent"


class EngineRegistry(RegistryBase):
    """Inference engine backends by name."""

    kind = "engine"
