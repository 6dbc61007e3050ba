"""config.toml: the workspace configuration, validated with pydantic.

Looked up in this order: an explicit path (`--config` / JARVIS_CONFIG), `./config.toml`, then
`$JARVIS_HOME/config.toml`; with none, the defaults below apply. Environment variables in
ENV_OVERRIDES replace single keys. An unknown key or a wrong type is a ConfigError naming the
key and the file. Relative paths in the file are relative to the file's folder.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jarvis.core.paths import jarvis_home
from jarvis.errors import ConfigError

# Environment variable -> dotted config key. Documented in the README.
ENV_OVERRIDES: dict[str, str] = {
    "JARVIS_ENGINE": "engine.default",
    "JARVIS_MODEL": "engine.model",
    "OLLAMA_HOST": "engine.hosts.ollama",
    "VLLM_HOST": "engine.hosts.vllm",
    "LLAMACPP_HOST": "engine.hosts.llamacpp",
    "LMSTUDIO_HOST": "engine.hosts.lmstudio",
    "SGLANG_HOST": "engine.hosts.sglang",
    "OPENAI_BASE_URL": "engine.hosts.openai",
    "JARVIS_AGENT": "agent.default",
    "JARVIS_MAX_TURNS": "agent.max_turns",
    "JARVIS_MEMORY_DB": "memory.db_path",
    "JARVIS_SCHEDULER_DB": "scheduler.db_path",
    "JARVIS_RUNS_DB": "runs.db_path",
    "JARVIS_RUN_LOG": "runs.enabled",
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EngineHosts(_Section):
    ollama: str = "http://localhost:11434"
    vllm: str = "http://localhost:8000"
    llamacpp: str = "http://localhost:8080"
    lmstudio: str = "http://localhost:1234"
    sglang: str = "http://localhost:30000"
    openai: str = "https://api.openai.com/v1"


class EngineConfig(_Section):
    default: str = Field("", description="engine backend; empty means discover a local one")
    model: str = Field("", description="model name; empty means the engine's first model")
    temperature: float = 0.7
    max_tokens: int | None = None
    timeout: float = Field(120.0, gt=0, description="seconds per request")
    discovery_timeout: float = Field(0.4, gt=0, description="seconds per probe when discovering")
    max_retries: int = Field(3, ge=0, le=10)
    hosts: EngineHosts = Field(default_factory=EngineHosts)


class AgentConfig(_Section):
    default: str = Field("", description="agent name; empty: orchestrator with tools, else simple")
    max_turns: int = Field(10, ge=1, le=100)
    tools: list[str] = Field(default_factory=list)
    system: str = ""


class ToolsConfig(BaseModel):
    """[tools]: which tools exist, executor defaults, and one table per tool for its settings,
    e.g. [tools.file_read] allowed_dirs = ["."]."""

    model_config = ConfigDict(extra="allow")

    enabled: list[str] | None = Field(None, description="tools available; None means all")
    default_timeout: float = Field(30.0, gt=0)
    max_output_chars: int = Field(100_000, gt=0)

    @property
    def settings(self) -> dict[str, dict[str, Any]]:
        return dict(self.__pydantic_extra__ or {})

    def model_post_init(self, __context: Any) -> None:
        for key, value in (self.__pydantic_extra__ or {}).items():
            if not isinstance(value, dict):
                raise ValueError(f"tools.{key} must be a table of settings for tool {key!r}")


class MemoryConfig(_Section):
    enabled: bool = True
    db_path: str = ""
    context: bool = Field(True, description="put relevant memory into ask's context")
    context_top_k: int = Field(3, ge=1, le=50)
    chunk_size: int = Field(1000, ge=100, le=100_000)
    chunk_overlap: int = Field(100, ge=0)


class SchedulerConfig(_Section):
    db_path: str = ""
    grace_seconds: float = Field(3600.0, ge=0, description="how late a missed run may still run")
    max_workers: int = Field(2, ge=1, le=64)


class McpServerConfig(_Section):
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True
    timeout: float = Field(30.0, gt=0, description="seconds per call")
    connect_timeout: float = Field(10.0, gt=0)
    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)
    tool_timeouts: dict[str, float] = Field(default_factory=dict)


class McpConfig(_Section):
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)


class WorkspaceConfig(_Section):
    tools_dir: str = "tools"
    agents_dir: str = "agents"


class RunsConfig(_Section):
    enabled: bool = True
    db_path: str = ""


class JarvisConfig(_Section):
    engine: EngineConfig = Field(default_factory=EngineConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    runs: RunsConfig = Field(default_factory=RunsConfig)

    # Not part of the file: where it came from, for relative paths and `config show`.
    _source: Path | None = None

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def base_dir(self) -> Path:
        """The folder relative paths are resolved against (the config file's, else cwd)."""
        return self._source.parent if self._source is not None else Path.cwd()

    def resolve_path(self, value: str | os.PathLike[str]) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.base_dir / path)


def find_config(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to use, by the documented lookup order (None: defaults only)."""
    explicit = path or os.environ.get("JARVIS_CONFIG")
    if explicit:
        candidate = Path(explicit).expanduser()
        if not candidate.is_file():
            raise ConfigError(f"config file {candidate} does not exist")
        return candidate
    for candidate in (Path.cwd() / "config.toml", jarvis_home() / "config.toml"):
        if candidate.is_file():
            return candidate
    return None


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot apply an override to {dotted}: {key} is not a table")
    node[last] = value


def _format_error(exc: ValidationError, where: str) -> str:
    problems = []
    for err in exc.errors()[:5]:
        key = ".".join(str(p) for p in err.get("loc", ()))
        msg = "unknown key" if err.get("type") == "extra_forbidden" else err.get("msg", "invalid")
        problems.append(f"{key}: {msg}")
    return f"invalid config in {where}: " + "; ".join(problems)


def load_config(path: str | os.PathLike[str] | None = None, *,
                overrides: dict[str, Any] | None = None, use_env: bool = True) -> JarvisConfig:
    """Load, override and validate the configuration."""
    source = find_config(path)
    data: dict[str, Any] = {}
    if source is not None:
        try:
            data = tomllib.loads(source.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source} is not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc}") from None
    if use_env:
        for var, dotted in ENV_OVERRIDES.items():
            value = os.environ.get(var)
            if value is not None and value != "":
                _set_dotted(data, dotted, value)
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    where = str(source) if source else "defaults and environment"
    try:
        config = JarvisConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, where)) from None
    except ValueError as exc:
        raise ConfigError(f"invalid config in {where}: {exc}") from None
    config._source = source.resolve() if source is not None else None
    return config
