"""The on-disk tool list of each MCP server, so listing tools needs no running server.

One JSON file per server under `$JARVIS_HOME/mcp/`, keyed by a hash of what identifies the
server (command, args, env, cwd, url, headers): change any of them and the old list is not
used. Secrets in env or headers go into the hash only, never into the file. A list is
rewritten whenever a live connection fetches it, so the file follows the server.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvis.core.paths import jarvis_home, open_private, private_dir

CACHE_VERSION = 1
KEEP_PER_SERVER = 4


@dataclass(slots=True)
class RemoteTool:
    """A tool as an MCP server lists it (wire names, camelCase annotations)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    title: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "inputSchema": self.input_schema, "annotations": self.annotations,
                "outputSchema": self.output_schema, "title": self.title}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RemoteTool:
        return cls(name=str(data["name"]), description=str(data.get("description") or ""),
                   input_schema=dict(data.get("inputSchema") or {}),
                   annotations=dict(data.get("annotations") or {}),
                   output_schema=data.get("outputSchema"), title=data.get("title"))


def config_key(server: Any, base_dir: Path) -> str:
    """A hash of what identifies the server's process or endpoint."""
    cwd = str((base_dir / server.cwd).resolve()) if server.cwd else None
    ident = {"command": server.command, "args": list(server.args), "env": dict(server.env),
             "cwd": cwd, "url": server.url, "headers": dict(server.headers),
             "base": str(base_dir) if server.command else None}
    raw = json.dumps(ident, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


def cache_dir() -> Path:
    """Where MCP state lives now: $JARVIS_HOME/mcp (a manager fixes it when it is made)."""
    return jarvis_home() / "mcp"


def cache_path(folder: Path, name: str, key: str) -> Path:
    return folder / f"tools-{name}-{key}.json"


def read_tools(folder: Path, name: str, key: str) -> list[RemoteTool] | None:
    """The cached list, or None when there is none (or it is unreadable: then it is refetched)."""
    path = cache_path(folder, name, key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != CACHE_VERSION:
            return None
        return [RemoteTool.from_dict(t) for t in data["tools"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_tools(folder: Path, name: str, key: str, tools: list[RemoteTool]) -> None:
    """Replace the cached list atomically (a reader never sees half a file)."""
    try:
        private_dir(folder)
        _prune(folder, name, key)
        tmp = folder / f".tools-{name}-{key}.{os.getpid()}.tmp"
        with open_private(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"version": CACHE_VERSION, "server": name,
                                 "fetched_at": time.time(),
                                 "tools": [t.to_dict() for t in tools]}, ensure_ascii=False))
        os.replace(tmp, cache_path(folder, name, key))
    except OSError:
        pass  # a cache that cannot be written only costs a reconnect next time


def _prune(folder: Path, name: str, key: str) -> None:
    """Keep a few lists per server name (several projects may share JARVIS_HOME), not all."""
    current = cache_path(folder, name, key).name
    try:
        others = sorted((p for p in folder.glob(f"tools-{name}-*.json") if p.name != current),
                        key=lambda p: p.stat().st_mtime, reverse=True)
        for old in others[KEEP_PER_SERVER - 1:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # another process pruned first


# --- remembered failures ----------------------------------------------------------------
# A server that failed to connect is not tried again for FAILURE_TTL seconds by commands that
# only want its tools (listing, on-demand loading), so each `jarvis tools list` does not pay
# its connect timeout again. `jarvis mcp list` always tries again; a success forgets it.
FAILURE_TTL = 60.0


def failure_path(folder: Path, name: str, key: str) -> Path:
    return folder / f"failed-{name}-{key}.json"


def read_failure(folder: Path, name: str, key: str, ttl: float = FAILURE_TTL) -> tuple[str, float] | None:
    """(reason, when) of a failure remembered less than `ttl` seconds ago, else None."""
    try:
        data = json.loads(failure_path(folder, name, key).read_text(encoding="utf-8"))
        reason, at = str(data["reason"]), float(data["at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not 0 <= time.time() - at < ttl:
        return None
    return reason, at


def write_failure(folder: Path, name: str, key: str, reason: str) -> None:
    try:
        private_dir(folder)
        tmp = folder / f".failed-{name}-{key}.{os.getpid()}.tmp"
        with open_private(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"reason": reason[:2000], "at": time.time()}))
        os.replace(tmp, failure_path(folder, name, key))
    except OSError:
        pass  # not remembering only costs another attempt


def clear_failure(folder: Path, name: str, key: str) -> None:
    try:
        failure_path(folder, name, key).unlink(missing_ok=True)
    except OSError:
        pass
