"""The workspace: the folder that holds config.toml, `tools/*.py` and `agents/*.toml`.

`jarvis.workspace.agents` reads declarative agents; `jarvis.workspace.tools` loads tool files
by path into ToolRegistry. Both are imported on use (they need pydantic or import user code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def describe_workspace(config: Any) -> str:
    """Which workspace is in use, for errors about names it should define (an unknown tool or
    agent): its config.toml, or that none was found from here."""
    source = getattr(config, "source", None)
    if source is not None:
        return (f"the workspace in use is {Path(source).parent} (config {source}; its tools in "
                f"{workspace_path(config, config.workspace.tools_dir)})")
    return (f"no config.toml was found in {Path.cwd()} or the folders above it, so no "
            f"workspace tools/ or agents/ are loaded; run jarvis in your workspace (or below "
            f"it), or pass --config PATH")


def workspace_path(config: Any, value: str) -> Path:
    """A workspace folder setting (tools_dir, agents_dir) resolved against the config file's
    folder. With no config file at all, the workspace is $JARVIS_HOME: a random current
    folder's `tools/` is never executed just because jarvis was started there."""
    if getattr(config, "source", None) is None and not Path(value).expanduser().is_absolute():
        from jarvis.core.paths import jarvis_home

        return jarvis_home() / value
    return config.resolve_path(value)
