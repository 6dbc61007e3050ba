"""Registry names for MCP tools: `SERVER__tool`, always a valid OpenAI function name."""

from __future__ import annotations

import hashlib
import re

# The server-name rule lives in core, where the config validation that uses it sits.
from jarvis.core.server_names import (  # noqa: F401  (re-exported)
    MAX_SERVER_NAME,
    SERVER_NAME_RE,
    check_server_name,
)

SEPARATOR = "__"
MAX_NAME = 64
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def _short_hash(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode("utf-8")).hexdigest()[:8]


def local_names(server: str, remote_names: list[str]) -> dict[str, str]:
    """Map each remote tool name to its registry name `server__tool`.

    Characters an OpenAI function name cannot hold become '_'; a name that would be longer
    than 64 characters, or that collides with another after that cleaning, gets a short hash
    of the original so every remote tool keeps a distinct, stable name.
    """
    cleaned = {remote: f"{server}{SEPARATOR}{_INVALID.sub('_', remote)}" for remote in remote_names}
    counts: dict[str, int] = {}
    for name in cleaned.values():
        counts[name] = counts.get(name, 0) + 1
    out: dict[str, str] = {}
    for remote, name in cleaned.items():
        if counts[name] > 1 or len(name) > MAX_NAME:
            suffix = "_" + _short_hash(server, remote)
            name = name[: MAX_NAME - len(suffix)] + suffix
        out[remote] = name
    return out
