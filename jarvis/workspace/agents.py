"""Workspace agents: every `*.toml` in the agents folder declares one named agent.

An agent file names a base loop, a prompt and tools; it never holds code:

    name = "researcher"
    description = "Answers from what is in memory."
    base = "react"
    instructions = "You are a careful researcher..."
    tools = ["memory_search", "think"]
    max_turns = 8
    schedule = "0 7 * * *"     # optional: the scheduler runs it on this cron expression
    notify = "phone"           # optional: each scheduled run's answer goes to this channel

Files are validated with a pydantic model (extra="forbid"): a typo'd key, a wrong type or bad
TOML is a ConfigError naming the file and the key. One broken file never hides the others:
`load_agents` returns the good specs and the problems side by side.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from jarvis.errors import ConfigError
from jarvis.workspace import workspace_path

MAX_AGENT_FILE_BYTES = 256_000
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TOOL_RE = re.compile(r"^\S{1,128}$")


class AgentSpec(BaseModel):
    """One declarative agent, as read from `agents/NAME.toml`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the agent's name (default: the file name without .toml)")
    description: str = ""
    base: Literal["react", "orchestrator"] = Field(
        "react", description="the agent loop: react (prompted tool use) or orchestrator "
        "(native function calling)")
    model: str | None = Field(None, description="model name; None uses the configured model")
    instructions: str = Field("", description="the system prompt")
    tools: list[str] = Field(default_factory=list,
                             description="tool registry names, MCP tools included")
    max_turns: int = Field(10, ge=1, le=100)
    schedule: str | None = Field(None, description="cron expression; the scheduler runs the "
                                 "agent on it")
    timezone: str = Field("UTC", description="IANA time zone the schedule is read in")
    prompt: str = Field("Do your scheduled task now.",
                        description="what a scheduled run asks the agent")
    notify: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
                               description="channel ([channels.NAME]) that receives each "
                               "scheduled run's answer")
    budget_usd: float | None = Field(None, gt=0, le=1_000_000, allow_inf_nan=False,
                                     description="USD one run may spend (default: [agent])")
    budget_seconds: float | None = Field(None, gt=0, le=30 * 24 * 3600, allow_inf_nan=False,
                                         description="seconds one run may take")
    max_tool_calls: int | None = Field(None, ge=0, le=1_000_000,
                                       description="tool calls one run may make")

    _source: Path | None = PrivateAttr(None)

    @property
    def source(self) -> Path | None:
        """The file this agent was read from (None when built in code)."""
        return self._source

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError("must be 1-64 letters, digits, '_', '-' or '.', starting with a "
                             "letter or digit")
        return value

    @field_validator("tools")
    @classmethod
    def _check_tools(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _TOOL_RE.match(name):
                raise ValueError(f"{name!r} is not a tool name")
        duplicates = sorted({n for n in value if value.count(n) > 1})
        if duplicates:
            raise ValueError(f"lists {', '.join(duplicates)} more than once")
        return value

    @field_validator("schedule")
    @classmethod
    def _check_schedule(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        from croniter import croniter  # lazy: only agent files with a schedule need it

        if not value or not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron expression (e.g. \"0 7 * * *\" for "
                             "07:00 every day)")
        return value

    def to_dict(self) -> dict[str, Any]:
        """Every key, JSON-ready, plus the source file (for `jarvis agents show --json`)."""
        data = self.model_dump()
        data["source"] = str(self._source) if self._source else None
        return data


@dataclass(slots=True)
class AgentFileError:
    """An agent file that could not be read: which file, and why (with the key)."""

    path: Path
    message: str
    name: str | None = None  # the `name` it declares, when the TOML at least parsed

    def to_error(self) -> ConfigError:
        return ConfigError(self.message)


@dataclass(slots=True)
class AgentScan:
    """The result of reading an agents folder: the valid agents and the broken files."""

    folder: Path
    agents: list[AgentSpec] = field(default_factory=list)
    errors: list[AgentFileError] = field(default_factory=list)


def agents_dir(config: Any = None) -> Path:
    """The workspace agents folder: `[workspace] agents_dir`, relative to the config file
    (with no config file: under $JARVIS_HOME)."""
    config = _config(config)
    return workspace_path(config, config.workspace.agents_dir)


def parse_agent_file(path: str | os.PathLike[str]) -> AgentSpec:
    """Read and validate one agent file; ConfigError names the file and the bad key."""
    path = Path(path)
    result = _read(path)
    if isinstance(result, AgentFileError):
        raise result.to_error()
    return result


def load_agents(config: Any = None) -> AgentScan:
    """Read every `*.toml` in the agents folder, keeping going past broken files."""
    folder = agents_dir(config)
    scan = AgentScan(folder=folder)
    if not folder.is_dir():
        return scan
    seen: dict[str, Path] = {}
    for path in sorted(folder.glob("*.toml")):
        if not path.is_file():
            continue
        result = _read(path)
        if isinstance(result, AgentFileError):
            scan.errors.append(result)
            continue
        if result.name in seen:
            scan.errors.append(AgentFileError(
                path, f"agent file {path}: name {result.name!r} is already used by "
                f"{seen[result.name]}; rename one of them", name=result.name))
            continue
        seen[result.name] = path
        scan.agents.append(result)
    return scan


def list_agents(config: Any = None) -> list[AgentSpec]:
    """Every agent in the workspace, sorted by name. A broken agent file is a ConfigError
    naming the file and the key (use `load_agents` to get the good ones and the errors)."""
    scan = load_agents(config)
    if scan.errors:
        raise ConfigError("; ".join(e.message for e in scan.errors))
    return sorted(scan.agents, key=lambda a: a.name)


def find_agent(config: Any, name: str) -> AgentSpec | None:
    """The workspace agent called `name`, or None if no file declares it.

    If the file that would declare it is broken (same file name, or a `name` key that
    matches), that is a ConfigError naming the file and the key: never a silent None.
    """
    scan = load_agents(config)
    for spec in scan.agents:
        if spec.name == name:
            return spec
    for error in scan.errors:
        if error.name == name or error.path.stem == name:
            raise error.to_error()
    return None


def scheduled_agents(config: Any = None) -> list[AgentSpec]:
    """The valid agents that declare a `schedule` (broken files are left to `agents list`)."""
    return [a for a in load_agents(config).agents if a.schedule]


def _config(config: Any) -> Any:
    if config is None:
        from jarvis.core.config import load_config

        return load_config()
    return config


# (path, mtime, size) -> what reading it gave: the SDK looks agents up on every ask.
_CACHE: dict[tuple[Path, int, int], AgentSpec | AgentFileError] = {}


def _read(path: Path) -> AgentSpec | AgentFileError:
    try:
        info = path.stat()
    except OSError as exc:
        return AgentFileError(path, f"cannot read agent file {path}: {exc}")
    key = (path, info.st_mtime_ns, info.st_size)
    cached = _CACHE.get(key)
    if cached is None:
        if len(_CACHE) > 1024:
            _CACHE.clear()
        cached = _CACHE[key] = _parse(path, info.st_size)
    return cached


def _read_text(path: Path) -> str:
    """The file's text, read through the path policy beneath its folder: a symlink leading
    out of the agents folder, a FIFO or an oversized file is refused, never read."""
    from jarvis.security.paths import PathPolicy

    policy = PathPolicy([path.parent], secrets=False, setting="[workspace] agents_dir",
                        outside_hint="keep agent files in the agents folder itself")
    return policy.read(str(path), MAX_AGENT_FILE_BYTES).data.decode("utf-8")


def _parse(path: Path, size: int) -> AgentSpec | AgentFileError:
    try:
        if size > MAX_AGENT_FILE_BYTES:
            return AgentFileError(path, f"agent file {path} is {size} bytes; the limit is "
                                  f"{MAX_AGENT_FILE_BYTES}")
        data = tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError as exc:
        return AgentFileError(path, f"agent file {path} is not valid TOML: {exc}")
    except (OSError, ValueError) as exc:  # also UnicodeDecodeError and the policy's refusals
        return AgentFileError(path, f"cannot read agent file {path}: {exc}")
    declared = data.get("name") if isinstance(data.get("name"), str) else None
    data.setdefault("name", path.stem)
    try:
        spec = AgentSpec.model_validate(data)
    except ValidationError as exc:
        return AgentFileError(path, f"invalid agent file {path}: {_describe(exc)}", declared)
    spec._source = path.resolve()
    return spec


def _describe(exc: ValidationError) -> str:
    valid = ", ".join(AgentSpec.model_fields)
    problems = []
    for err in exc.errors()[:5]:
        key = ".".join(str(p) for p in err.get("loc", ())) or "(file)"
        if err.get("type") == "extra_forbidden":
            problems.append(f"unknown key {key!r} (valid keys: {valid})")
        else:
            msg = err.get("msg", "invalid").removeprefix("Value error, ")
            problems.append(f"{key}: {msg}")
    return "; ".join(problems)
