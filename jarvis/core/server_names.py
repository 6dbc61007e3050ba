"""The rule for MCP server names (`[mcp.servers.NAME]`), used by config validation here in
core and by the MCP package, which prefixes tool names with them (`NAME__tool`)."""

from __future__ import annotations

import re

MAX_SERVER_NAME = 32
SERVER_NAME_RE = re.compile(r"^[a-zA-Z0-9-]+(?:_[a-zA-Z0-9-]+)*$")


def check_server_name(name: str) -> str | None:
    """Why `name` cannot name an MCP server, or None when it can."""
    if len(name) > MAX_SERVER_NAME:
        return f"is longer than {MAX_SERVER_NAME} characters"
    if not SERVER_NAME_RE.match(name):
        return ("must use only letters, digits, '-' and single '_' (it prefixes tool names "
                "as NAME__tool, so '__', a leading or trailing '_' and other characters are out)")
    return None
