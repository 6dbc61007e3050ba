"""What config.toml's loader, its models and its validated cache share (no pydantic here)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

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
    "JARVIS_SCHEDULER_STORE": "scheduler.store",
    "JARVIS_SCHEDULER_RUNNER": "scheduler.runner",
    "JARVIS_CELERY_BROKER": "scheduler.celery.broker",
    "JARVIS_RUNS_DB": "runs.db_path",
    "JARVIS_RUN_LOG": "runs.enabled",
    "JARVIS_SANDBOX": "sandbox.isolation",
}



class RootMethods:
    """JarvisConfig's own methods, shared by the pydantic model and the cached view."""

    __slots__ = ()
    if TYPE_CHECKING:
        _source: Path | None
        _provenance: dict[str, str]

    @property
    def source(self) -> Path | None:
        return self._source

    def source_of(self, dotted: str) -> str:
        """Where the value of `dotted` (e.g. "engine.model") came from: "default", the config
        file's path, the name of the environment variable that set it, or "override"."""
        key = dotted
        while key:
            if key in self._provenance:
                return self._provenance[key]
            key = key.rpartition(".")[0]
        return "default"

    @property
    def base_dir(self) -> Path:
        """The folder relative paths are resolved against (the config file's, else cwd)."""
        return self._source.parent if self._source is not None else Path.cwd()

    def resolve_path(self, value: str | os.PathLike[str]) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.base_dir / path)


class KeepRunsMethods:
    """KeepRuns's own method, shared by the model and the cached view."""

    __slots__ = ()
    if TYPE_CHECKING:
        days: float | None
        count: int | None

    def describe(self) -> str:
        parts = [f"{self.days:g} days" if self.days is not None else "",
                 f"{self.count} runs per task" if self.count is not None else ""]
        return " and ".join(p for p in parts if p)


# The tables of config.toml: JarvisConfig's fields (a test keeps the two equal), known here
# without pydantic (the workspace lookup tells a jarvis config.toml by them).
SECTIONS: tuple[str, ...] = (
    "engine", "agent", "tools", "memory", "scheduler", "mcp", "workspace", "runs", "serve",
    "channels", "sandbox", "egress", "conversations", "inbound", "approvals",
)

# Per-tool settings whose key ends like this hold paths: relative ones are resolved against
# the config file's folder, never the current folder (e.g. [tools.file_read] allowed_dirs).
PATH_SETTING_SUFFIXES: tuple[str, ...] = ("_dir", "_dirs", "_path", "_paths", "_file", "_files")
# State files and folders given in the file, resolved the same way.
PATH_KEYS: tuple[str, ...] = ("memory.db_path", "scheduler.db_path", "runs.db_path",
                              "approvals.db_path")


class ApprovalsMethods:
    """ApprovalsConfig's own property, shared by the model and the cached view."""

    __slots__ = ()
    if TYPE_CHECKING:
        expire_after: str

    @property
    def expire_seconds(self) -> float:
        from jarvis.core.durations import parse_duration

        return parse_duration(self.expire_after)
