"""Finding the workspace a folder is in (its config.toml), as git finds `.git`: used by
jarvis.core.config's lookup order (docs/workspace.md)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path


def find_workspace(start: Path, tables: Iterable[str]) -> Path | None:
    """The config.toml of the workspace `start` is in: `start/config.toml`, else the nearest
    parent folder's that is a jarvis workspace, up to (not including) the home folder or the
    file system's root. A parent's config.toml counts when its folder holds `tools/` or
    `agents/` (what `jarvis init` makes) or the file has a jarvis table ([engine], [tools],
    ...; `tables` names them): another program's config.toml higher up (a static site's) is
    passed by."""
    here = start / "config.toml"
    if here.is_file():
        return here
    try:
        home = Path.home().resolve()
    except (RuntimeError, OSError):
        home = None
    for folder in start.resolve().parents:
        if folder == home or folder.parent == folder:
            return None
        candidate = folder / "config.toml"
        if candidate.is_file() and _is_workspace(candidate, set(tables)):
            return candidate
    return None


def _is_workspace(candidate: Path, tables: set[str]) -> bool:
    folder = candidate.parent
    if (folder / "tools").is_dir() or (folder / "agents").is_dir():
        return True
    try:
        data = tomllib.loads(candidate.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return any(key in tables for key in data)
