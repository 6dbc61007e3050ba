"""Registry names for MCP tools: `SERVER__tool`, always a valid OpenAI function name."""

from __future__ import annotations

import hashlib
import re

SEPARATOR = "__"
MAX_NAME = 64
MAX_SERVER_NAME = 32
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
SERVER_NAME_RE = re.compile(r"^[a-zA-Z0-9-]+(?:_[a-zA-Z0-9-]+)*$")


def _short_hash(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode("utf-8")).hexdigest()[:8]


def check_server_name(name: str) -> str | None:
    """Why `name` cannot name an MCP server, or None when it can."""
    if len(name) > MAX_SERVER_NAME:
        return f"is longer than {MAX_SERVER_NAME} characters"
    if not SERVER_NAME_RE.match(name):
        return ("must use only letters, digits, '-' and single '_' (it prefixes tool names "
                "as NAME__tool, so '__', a leading or trailing '_' and other characters are out)")
    return None


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
