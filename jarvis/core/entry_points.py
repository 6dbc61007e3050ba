"""The installed entry points of a group, remembered between runs.

Finding them with importlib.metadata reads every installed distribution (importing
importlib.metadata and the email parser on the way): ~25 ms on every `jarvis ask`, for an
answer that changes only when something is installed or removed. The answer is kept in
$JARVIS_HOME/cache/entry-points (private_cache: 0600, written atomically) under a key made of
everything importlib.metadata reads to find it, taken with os.scandir and os.stat:

- sys.path, the Python version, jarvis's version and the group;
- for each sys.path entry, the `*.dist-info` and `*.egg-info` entries of its listing (and the
  EGG-INFO of an `.egg` folder), each with the inode, size, mtime and ctime of the entry
  itself and of its entry_points.txt and, when it has one, of its METADATA and PKG-INFO (a zip
  file on the path: the file's own); a missing entry or file counts as missing.

So a distribution installed or removed (its name comes or goes), reinstalled (a new folder)
or rewritten in place (the file's ctime moves, whatever its size or mtime) gives another key,
and the next run scans again. A `.pth` file or an `.egg-link` (a develop install) acts through
sys.path (the folder it adds is on it at the next start), so sys.path in the key covers it.
A file changed within RACY_NS of the scan could share its timestamp with a later rewrite
(file systems stamp coarsely), so such a scan is not cached.
Another finder on sys.meta_path that can find distributions (its own, outside sys.path) turns
the cache off. A cache file that is missing, unreadable, not private or malformed means a
real scan.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from typing import Any

from jarvis.core import private_cache

FORMAT = 1
KEEP_FILES = 4
RACY_NS = 200_000_000  # a file changed less than 0.2 s before the scan: not cached
_SUFFIXES = (".dist-info", ".egg-info")
# importlib.metadata.EntryPoint.pattern (compiled on first load)
_PATTERN = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"


class EntryPoint:
    """One installed entry point and the distribution that declares it."""

    __slots__ = ("name", "value", "group", "distribution", "version")

    def __init__(self, name: str, value: str, group: str, distribution: str = "",
                 version: str = "") -> None:
        self.name = name
        self.value = value
        self.group = group
        self.distribution = distribution
        self.version = version

    def __repr__(self) -> str:
        return (f"EntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r}, "
                f"distribution={self.distribution!r}, version={self.version!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EntryPoint):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def load(self) -> Any:
        """Import the module the value names and return it, or the attribute it names (as
        importlib.metadata.EntryPoint.load)."""
        import importlib
        import re

        match = re.match(_PATTERN, self.value)
        if match is None:
            raise ValueError(f"entry point {self.name!r} = {self.value!r} is not "
                             "'module' or 'module:attribute'")
        obj: Any = importlib.import_module(match.group("module"))
        for attr in filter(None, (match.group("attr") or "").split(".")):
            obj = getattr(obj, attr)
        return obj


def entry_points(group: str, refresh: bool = False) -> list[EntryPoint]:
    """The installed entry points of `group`, sorted by (name, value), as importlib.metadata
    finds them; from the cache when nothing it reads has changed (`refresh`: scan anyway)."""
    started = time.time_ns()
    key = _key(group, started)
    if key is not None and not refresh:
        cached = _read(key, group)
        if cached is not None:
            return cached
    found = _scan(group)
    if key is not None and key[1]:
        _write(key[0], found)
    return found


def _scan(group: str) -> list[EntryPoint]:
    from importlib.metadata import entry_points as installed

    found = []
    for ep in installed(group=group):
        dist = getattr(ep, "dist", None)
        name = version = ""
        if dist is not None:
            name, version = dist.metadata["Name"] or "", dist.version or ""
        found.append(EntryPoint(ep.name, ep.value, group, name, version))
    return sorted(found, key=lambda ep: (ep.name, ep.value))


def _stat(path: str) -> list[int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _key(group: str, started: int) -> tuple[str, bool] | None:
    """(the key of what importlib.metadata would read now, whether its files are old enough
    to cache a scan under it); None: not cacheable here."""
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and hasattr(finder, "find_distributions"):
            return None
    from jarvis._version import __version__

    newest = 0
    parts: list[Any] = [FORMAT, sys.version, __version__, group, list(sys.path)]
    for root in sys.path:
        if not isinstance(root, str):
            return None
        folder = root or "."
        egg = os.path.basename(folder).lower().endswith(".egg")
        try:
            with os.scandir(folder) as listing:
                found = sorted((entry.name, entry.path) for entry in listing
                               if entry.name.lower().endswith(_SUFFIXES)
                               or (egg and entry.name.lower() == "egg-info"))
        except NotADirectoryError:  # a zip file: its own stat covers what is inside
            parts.append([root, _stat(folder)])
            continue
        except OSError:
            parts.append([root, None])
            continue
        for name, path in found:
            stats = [_stat(path), _stat(f"{path}/entry_points.txt")]
            if stats[1] is not None:  # without entry points, its name and version do not count
                stats += [_stat(f"{path}/METADATA"), _stat(f"{path}/PKG-INFO")]
            for item in stats:
                if item is not None and item[3] > newest:
                    newest = item[3]
            parts.append([root, name, stats])
    digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    return digest, newest < started - RACY_NS


def _read(key: tuple[str, bool], group: str) -> list[EntryPoint] | None:
    raw = private_cache.read(private_cache.cache_folder("entry-points"), f"{key[0]}.json")
    if raw is None:
        return None
    try:
        entry = json.loads(raw)
        if (entry["format"] != FORMAT or entry["key"] != key[0]
                or not isinstance(entry["entry_points"], list)):
            return None
        found = []
        for item in entry["entry_points"]:
            if not (isinstance(item, list) and len(item) == 4
                    and all(isinstance(part, str) for part in item)):
                return None
            found.append(EntryPoint(item[0], item[1], group, item[2], item[3]))
    except (ValueError, TypeError, KeyError):
        return None
    return found


def _write(key: str, found: list[EntryPoint]) -> None:
    body = json.dumps({"format": FORMAT, "key": key,
                       "entry_points": [[ep.name, ep.value, ep.distribution, ep.version]
                                        for ep in found]})
    private_cache.write(private_cache.cache_folder("entry-points"), f"{key}.json",
                        body.encode(), KEEP_FILES)
