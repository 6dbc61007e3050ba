"""Where jarvis keeps its state: JARVIS_HOME (default ~/.jarvis)."""

from __future__ import annotations

import os
from pathlib import Path


def jarvis_home(create: bool = False) -> Path:
    """The state folder: $JARVIS_HOME, or ~/.jarvis."""
    home = Path(os.environ.get("JARVIS_HOME") or Path.home() / ".jarvis").expanduser()
    if create:
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, no permission, ...
            from jarvis.errors import ConfigError

            raise ConfigError(f"cannot use {home} as the jarvis state folder: {exc}; point "
                              "JARVIS_HOME at a writable folder") from exc
    return home


def state_path(configured: str | os.PathLike[str] | None, default_name: str) -> Path:
    """A state file: the configured path if given, else JARVIS_HOME/default_name."""
    if configured:
        return Path(configured).expanduser()
    return jarvis_home(create=True) / default_name
