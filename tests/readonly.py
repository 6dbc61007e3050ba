"""Run a command with a folder read-only, for root too (file modes do not stop root): bubblewrap
binds the whole file system as it is and the folder read-only over it (EROFS on any write)."""

from __future__ import annotations

import shutil
from pathlib import Path


def read_only(*folders: Path) -> list[str]:
    """The command prefix that runs what follows with `folders` read-only."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bubblewrap (bwrap) is needed: apt-get install bubblewrap"
    prefix = [bwrap, "--dev-bind", "/", "/"]
    for folder in folders:
        prefix += ["--ro-bind", str(folder), str(folder)]
    return prefix + ["--"]
