"""config.toml: the workspace configuration, validated with pydantic.

Looked up in this order: an explicit path (`--config` / JARVIS_CONFIG), `./config.toml`, then
`$JARVIS_HOME/config.toml`; with none, the defaults below apply. Environment variables in
ENV_OVERRIDES replace single keys. An unknown key or a wrong type is a ConfigError naming the
key and the file. Relative paths in the file are relative to the file's folder.

The models live in jarvis.core.config_schema (re-exported here). Validating with pydantic
costs ~140 ms of start-up, so a configuration validated once is kept, validated, in a private
cache under $JARVIS_HOME (jarvis.core.config_cache); a later load of the same file, environment,
jarvis and schema reads it back as a read-only view without importing pydantic. Anything a view
cannot answer from the validated values (assignment, pydantic's API) loads the real models first.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jarvis.core.paths import jarvis_home
from jarvis.errors import ConfigError

if TYPE_CHECKING:
    from jarvis.core.config_schema import JarvisConfig

from jarvis.core.config_base import (  # noqa: F401  (re-exported)
    ENV_OVERRIDES,
    PATH_KEYS,
    PATH_SETTING_SUFFIXES,
    SECTIONS,
    KeepRunsMethods,
    RootMethods,
)


def find_config(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to use, by the documented lookup order (None: defaults only):
    `path` / JARVIS_CONFIG, ./config.toml, the nearest workspace above the current folder
    (as git finds .git; see find_workspace), then $JARVIS_HOME/config.toml."""
    explicit = path or os.environ.get("JARVIS_CONFIG")
    if explicit:
        candidate = Path(explicit).expanduser()
        if not candidate.is_file():
            raise ConfigError(f"config file {candidate} does not exist")
        return candidate
    from jarvis.core.workspace_lookup import find_workspace

    found = find_workspace(Path.cwd(), SECTIONS)
    if found is not None:
        return found
    candidate = jarvis_home() / "config.toml"
    return candidate if candidate.is_file() else None


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot apply an override to {dotted}: {key} is not a table")
    node[last] = value


def _leaves(data: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys of every non-table value in parsed TOML."""
    keys = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            keys.extend(_leaves(value, dotted + "."))  # an empty table sets nothing
        else:
            keys.append(dotted)
    return keys



def load_config(path: str | os.PathLike[str] | None = None, *,
                overrides: dict[str, Any] | None = None, use_env: bool = True) -> JarvisConfig:
    """Load, override and validate the configuration."""
    import tomllib

    from jarvis.core import config_cache

    source = find_config(path)
    data: dict[str, Any] = {}
    provenance: dict[str, str] = {}
    raw = b""
    if source is not None:
        source = source.resolve()
        try:
            raw = source.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc}") from None
    key = None if overrides else config_cache.cache_key(source, raw, use_env)
    if key is not None:
        view = config_cache.load(key)
        if view is not None:
            return view  # type: ignore[return-value]  # a read-only JarvisConfig (see above)
    if source is not None:
        try:  # decoded as read_text does (universal newlines)
            text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source} is not valid TOML: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"cannot read {source}: {exc}") from None
        provenance = dict.fromkeys(_leaves(data), str(source))
    if use_env:
        for var, dotted in ENV_OVERRIDES.items():
            value = os.environ.get(var)
            if value is not None and value != "":
                _set_dotted(data, dotted, value)
                provenance[dotted] = var
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
        provenance[dotted] = "override"
    inputs = config_cache.freeze(data) if key is not None else None
    from jarvis.core.config_schema import validate_config

    config = validate_config(data, provenance, source)
    if key is not None and inputs is not None:
        config_cache.store(key, config, inputs, provenance, source)
    return config


_SCHEMA_NAMES = frozenset({
    "AgentConfig", "ApprovalsConfig", "ConversationsConfig", "InboundConfig", "ModelPrice",
    "CeleryConfig", "ChannelConfig", "EgressConfig", "EngineConfig",
    "EngineHosts", "JarvisConfig", "KeepRuns", "McpConfig", "McpServerConfig", "MemoryConfig",
    "RunsConfig", "SandboxConfig", "SchedulerConfig", "ServeConfig", "ToolsConfig",
    "WorkspaceConfig", "validate_config",
})


def __getattr__(name: str) -> Any:
    """The models (JarvisConfig, SchedulerConfig, ...), imported with pydantic on first use."""
    if name in _SCHEMA_NAMES:
        from jarvis.core import config_schema

        return getattr(config_schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
