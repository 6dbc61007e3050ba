"""The workspace: the folder that holds config.toml, `tools/*.py` and `agents/*.toml`.

`jarvis.workspace.agents` reads declarative agents; `jarvis.workspace.tools` loads tool files
by path into ToolRegistry. Both are imported on use (they need pydantic or import user code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def workspace_path(config: Any, value: str) -> Path:
    """A workspace folder setting (tools_dir, agents_dir) resolved against the config file's
    folder. With no config file at all, the workspace is $JARVIS_HOME: a random current
    folder's `tools/` is never executed just because jarvis was started there."""
    if getattr(config, "source", None) is None and not Path(value).expanduser().is_absolute():
        from jarvis.core.paths import jarvis_home

        return jarvis_home() / value
    return config.resolve_path(value)
