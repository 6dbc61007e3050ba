"""The validated-config cache: start-up without pydantic for a configuration already validated.

The first load of a configuration validates it in full with the pydantic models
(jarvis.core.config_schema) and writes the validated values here, in a private file under
$JARVIS_HOME/cache/config (0600). The key is a hash of everything the result depends on: the
file's path and bytes, the environment variables that set keys, HOME and (when a state path
comes from the environment) the working folder, jarvis's version, the source of the config
modules (so a change to the schema invalidates it) and the installed pydantic. A later load
with the same key gets a read-only view built from those values, without importing pydantic.

A view answers attribute reads, the models' own methods (source_of, resolve_path, describe,
settings) and a plain `model_dump()` from the cached values. Anything else (assigning a value,
the rest of pydantic's API, repr, ==, iteration, copying, pickling) first builds the real model
from the same inputs, validated again, and from then on every view of that configuration
reads and writes through it; lists and tables already handed out stay the ones the model holds.
`isinstance(view, JarvisConfig)` (and each section's class) holds: a view's `__class__` is its
model's class once the models are imported; only `type(view)` differs.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from jarvis.core import private_cache
from jarvis.core.config_base import (
    ENV_OVERRIDES,
    PATH_KEYS,
    ApprovalsMethods,
    KeepRunsMethods,
    RootMethods,
)

FORMAT = 1
KEEP_FILES = 8  # newest cache files kept; older ones are removed when one is written
_HERE = Path(__file__).parent
_SCHEMA_FILES = ("config.py", "config_base.py", "config_schema.py", "config_cache.py",
                 "server_names.py", "durations.py", "approvals_config.py", "inbound_config.py")
_schema_digest: str | None = None


def cache_dir() -> Path:
    return private_cache.cache_folder("config")


def _installed(module: str, filename: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    if not origin:
        return f"{module}: none"
    path = Path(origin).parent / filename
    try:
        info = path.stat()
    except OSError:
        return f"{module}: {origin}"
    return f"{path}:{info.st_size}:{info.st_mtime_ns}"


def schema_digest() -> str:
    """jarvis's version, the config modules' source and the installed pydantic, hashed."""
    global _schema_digest
    if _schema_digest is None:
        from jarvis._version import __version__

        digest = hashlib.sha256(f"{FORMAT}\0{__version__}\0".encode())
        for name in _SCHEMA_FILES:
            digest.update((_HERE / name).read_bytes() + b"\0")
        for module, filename in (("pydantic", "version.py"), ("pydantic_core", "__init__.py")):
            digest.update(_installed(module, filename).encode() + b"\0")
        _schema_digest = digest.hexdigest()
    return _schema_digest


def cache_key(source: Path | None, raw: bytes, use_env: bool) -> str | None:
    """The key of a load (None: do not cache it)."""
    try:
        parts: dict[str, Any] = {
            "schema": schema_digest(), "source": str(source) if source else None,
            "file": hashlib.sha256(raw).hexdigest(), "use_env": use_env,
            "home": os.environ.get("HOME"),
        }
    except OSError:
        return None
    if use_env:
        env = {var: os.environ.get(var) for var in ENV_OVERRIDES}
        parts["env"] = env
        path_vars = [var for var, dotted in ENV_OVERRIDES.items() if dotted in PATH_KEYS]
        if any(env[var] for var in path_vars):
            parts["cwd"] = os.getcwd()  # relative state paths from the environment
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def freeze(data: dict[str, Any]) -> str | None:
    """The load's inputs as JSON (None: not JSON, e.g. a TOML date; such a load is not cached)."""
    try:
        return json.dumps(data, allow_nan=True)
    except (TypeError, ValueError):
        return None


# --- writing ------------------------------------------------------------------------------------
def _encode(model: Any) -> list[Any]:
    fields: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if hasattr(type(value), "__pydantic_fields__"):
            fields[name] = _encode(value)
        elif (isinstance(value, dict) and value
              and all(hasattr(type(v), "__pydantic_fields__") for v in value.values())):
            fields[name] = ["d", {k: _encode(v) for k, v in value.items()}]
        else:
            fields[name] = ["v", value]
    return ["m", type(model).__name__, fields, model.__pydantic_extra__]


def store(key: str, config: Any, inputs: str, provenance: dict[str, str],
          source: Path | None) -> None:
    """Write the validated config; a failure to write only means no cache next time."""
    try:
        body = json.dumps({"format": FORMAT, "key": key, "inputs": inputs,
                           "provenance": provenance, "source": str(source) if source else None,
                           "tree": _encode(config)}, allow_nan=True)
    except (TypeError, ValueError):
        return
    private_cache.write(cache_dir(), f"{key}.json", body.encode(), KEEP_FILES)


# --- reading ------------------------------------------------------------------------------------
def load(key: str) -> Any:
    """The view of the cached config of `key`, or None (no usable cache file)."""
    raw = private_cache.read(cache_dir(), f"{key}.json")
    if raw is None:
        return None
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
        return None
    source = Path(entry["source"]) if entry["source"] else None
    state = _State(entry["inputs"], dict(entry["provenance"]), source)
    root = _build(entry["tree"], state, ())
    fields = object.__getattribute__(root, "_jv_f")
    fields["_source"] = source
    fields["_provenance"] = entry["provenance"]
    return root


class _State:
    """What the views of one loaded config share: how to build the real model, once."""

    __slots__ = ("inputs", "provenance", "source", "full", "root", "lock")

    def __init__(self, inputs: str, provenance: dict[str, str], source: Path | None) -> None:
        self.inputs = inputs
        self.provenance = provenance
        self.source = source
        self.full: Any = None
        self.root: Any = None
        self.lock = threading.Lock()

    def materialize(self) -> Any:
        with self.lock:
            if self.full is None:
                from jarvis.core.config_schema import validate_config

                full = validate_config(json.loads(self.inputs), self.provenance, self.source)
                _adopt(self.root, full)
                self.full = full
            return self.full


def _adopt(view: Any, full: Any) -> None:
    """Make the model hold the containers the view already handed out (same values)."""
    fields = object.__getattribute__(view, "_jv_f")
    extras = object.__getattribute__(view, "_jv_x")
    for name, value in fields.items():
        if name == "_provenance":
            full._provenance = value
        elif isinstance(value, _Node):
            _adopt(value, getattr(full, name))
        elif isinstance(value, dict) and value and all(isinstance(v, _Node) for v in value.values()):
            held = getattr(full, name)
            for key, child in value.items():
                _adopt(child, held[key])
        elif isinstance(value, list | dict) and not name.startswith("_"):
            full.__dict__[name] = value
    if extras is not None and full.__pydantic_extra__ is not None:
        for name, value in extras.items():
            full.__pydantic_extra__[name] = value


def _build(encoded: list[Any], state: _State, path: tuple[Any, ...]) -> Any:
    _, name, fields, extras = encoded
    cls = _view_class(name)
    node = cls.__new__(cls)
    values: dict[str, Any] = {}
    for field, entry in fields.items():
        if entry[0] == "m":
            values[field] = _build(entry, state, (*path, field))
        elif entry[0] == "d":
            values[field] = {k: _build(v, state, (*path, field, k)) for k, v in entry[1].items()}
        else:
            values[field] = entry[1]
    object.__setattr__(node, "_jv_state", state)
    object.__setattr__(node, "_jv_path", path)
    object.__setattr__(node, "_jv_f", values)
    object.__setattr__(node, "_jv_x", extras)
    if not path:
        state.root = node
    return node


class _Node:
    """A read-only view of one validated model (see the module's docstring)."""

    __slots__ = ("_jv_state", "_jv_path", "_jv_f", "_jv_x")
    __hash__ = None  # type: ignore[assignment]  # as pydantic's models

    _jv_model = ""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: F811
        """The model's class once the models are imported (then isinstance(view, JarvisConfig)
        holds, as for the model), without building the model; until then the view's own."""
        schema = sys.modules.get("jarvis.core.config_schema")
        own = type(self)
        return getattr(schema, own._jv_model, own) if schema is not None else own

    def _jv_full(self) -> Any:
        node = object.__getattribute__(self, "_jv_state").materialize()
        path = object.__getattribute__(self, "_jv_path")
        i = 0
        while i < len(path):
            node = getattr(node, path[i])
            if isinstance(node, dict):
                i += 1
                node = node[path[i]]
            i += 1
        return node

    def __getattr__(self, name: str) -> Any:
        if object.__getattribute__(self, "_jv_state").full is None:
            fields = object.__getattribute__(self, "_jv_f")
            if name in fields:
                return fields[name]
            extras = object.__getattribute__(self, "_jv_x")
            if extras is not None and name in extras:
                return extras[name]
            if name == "model_dump":
                return self._jv_model_dump
        return getattr(self._jv_full(), name)

    def _jv_model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if args or kwargs or object.__getattribute__(self, "_jv_state").full is not None:
            return self._jv_full().model_dump(*args, **kwargs)
        return _dump(self)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._jv_full(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._jv_full(), name)

    def __repr__(self) -> str:
        return repr(self._jv_full())

    def __str__(self) -> str:
        return str(self._jv_full())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Node):
            other = other._jv_full()
        return bool(self._jv_full() == other)

    def __iter__(self) -> Any:
        return iter(self._jv_full())

    def __copy__(self) -> Any:
        return copy.copy(self._jv_full())

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Any:
        return copy.deepcopy(self._jv_full(), memo)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self._jv_full().__reduce_ex__(protocol)

    def __dir__(self) -> list[str]:
        return dir(self._jv_full())


def _dump(node: _Node) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in object.__getattribute__(node, "_jv_f").items():
        if name.startswith("_"):
            continue
        if isinstance(value, _Node):
            out[name] = _dump(value)
        elif isinstance(value, dict) and value and all(isinstance(v, _Node) for v in value.values()):
            out[name] = {k: _dump(v) for k, v in value.items()}
        else:
            out[name] = copy.deepcopy(value)
    out.update(copy.deepcopy(object.__getattribute__(node, "_jv_x") or {}))
    return out


class _ToolsMethods:
    __slots__ = ()

    @property
    def settings(self) -> dict[str, dict[str, Any]]:
        state = object.__getattribute__(self, "_jv_state")
        if state.full is not None:
            return self._jv_full().settings  # type: ignore[attr-defined, no-any-return]
        return dict(object.__getattribute__(self, "_jv_x") or {})


_MIXINS: dict[str, type] = {"JarvisConfig": RootMethods, "KeepRuns": KeepRunsMethods,
                            "ToolsConfig": _ToolsMethods, "ApprovalsConfig": ApprovalsMethods}
_CLASSES: dict[str, type] = {}


def _view_class(name: str) -> type:
    """The view class of model `name` (one per model, so each registers with its model)."""
    cls = _CLASSES.get(name)
    if cls is None:
        bases = (_Node, _MIXINS[name]) if name in _MIXINS else (_Node,)
        cls = _CLASSES[name] = type(f"{name}View", bases, {"__slots__": (), "_jv_model": name})
    return cls
