"""Plugins: pip-installed packages that add tools through the `jarvis` entry-point group.

A package declares, in its pyproject.toml:

    [project.entry-points.jarvis]
    weather = "jarvis_weather:weather"        # a tool made with @tool, a BaseTool subclass,
                                              # a module whose import registers tools, or a
                                              # function that registers (or returns) tools

Every tool it adds ends in ToolRegistry, the same path built-in and workspace tools take.
JARVIS_LOAD_PLUGINS selects what is loaded: unset loads every installed plugin, a comma list
loads those entry-point names, and an empty value loads none (the test suite sets it empty).
A plugin that fails to load is reported with its file and line and never stops the others.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import traceback
import types
from dataclasses import dataclass, field
from typing import Any

from jarvis.core.registry import ToolRegistry

log = logging.getLogger("jarvis.plugins")

GROUP = "jarvis"
ENV_VAR = "JARVIS_LOAD_PLUGINS"


@dataclass(slots=True)
class PluginInfo:
    """One entry point of the `jarvis` group and what loading it did."""

    name: str
    value: str  # "module:attribute" as the package declared it
    distribution: str = ""
    version: str = ""
    status: str = "loaded"  # loaded | skipped | failed | missing
    tools: list[str] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "distribution": self.distribution,
                "version": self.version, "status": self.status, "tools": list(self.tools),
                "error": self.error}


@dataclass(slots=True)
class PluginReport:
    """Every plugin seen, and the JARVIS_LOAD_PLUGINS selection that applied."""

    selection: list[str] | None  # None: all installed plugins
    plugins: list[PluginInfo] = field(default_factory=list)

    @property
    def errors(self) -> list[PluginInfo]:
        return [p for p in self.plugins if p.status in ("failed", "missing")]


# entry-point name -> (its value, the tools it registered): repeated loads are cheap and quiet.
_CACHE: dict[str, tuple[str, dict[str, Any], PluginInfo]] = {}
_last_report: PluginReport | None = None
# Loads compare the registry before and after loading: one load at a time per process.
_LOCK = threading.RLock()


def selection_from_env() -> list[str] | None:
    """JARVIS_LOAD_PLUGINS as a list of names; None when unset (meaning: all)."""
    raw = os.environ.get(ENV_VAR)
    if raw is None:
        return None
    return [n.strip() for n in raw.split(",") if n.strip()]


def last_report() -> PluginReport | None:
    return _last_report


# The scan is cached on disk (jarvis.core.entry_points: keyed by what it reads, so an install,
# removal or rewrite is seen by the next run) and in the process for the same sys.path (a pip
# install in the middle of a run is picked up by `refresh=True`).
_SCAN: tuple[tuple[str, ...], list[Any]] | None = None


def installed_plugins(refresh: bool = False) -> list[Any]:
    """The installed entry points of the `jarvis` group, sorted by name (EntryPoint: name,
    value, distribution, version, load())."""
    global _SCAN
    key = tuple(sys.path)
    if refresh or _SCAN is None or _SCAN[0] != key:
        from jarvis.core.entry_points import entry_points

        _SCAN = (key, entry_points(GROUP, refresh=refresh))
    return list(_SCAN[1])


def load_plugins(selection: list[str] | None | str = "env") -> PluginReport:
    """Load the selected plugins' tools into ToolRegistry (default selection: the env var)."""
    with _LOCK:
        return _load_plugins(selection)


def _load_plugins(selection: list[str] | None | str) -> PluginReport:
    global _last_report
    wanted = selection_from_env() if selection == "env" else selection
    report = PluginReport(selection=None if wanted is None else list(wanted))
    if wanted == []:
        _last_report = report
        return report
    seen: set[str] = set()
    for ep in installed_plugins():
        info = PluginInfo(ep.name, ep.value, ep.distribution, ep.version)
        report.plugins.append(info)
        if wanted is not None and ep.name not in wanted:
            info.status = "skipped"
            continue
        if ep.name in seen:
            _fail(info, f"another installed package already provides plugin {ep.name!r}; "
                  "uninstall one of them")
            continue
        seen.add(ep.name)
        ToolRegistry._ensure_loaded()  # built-ins first, so a clash is blamed on the plugin
        _load_one(ep, info)
    for name in wanted or []:
        if name not in seen:
            installed = ", ".join(sorted({p.name for p in report.plugins})) or "(none installed)"
            info = PluginInfo(name, "", status="missing")
            info.error = (f"plugin {name!r} named in {ENV_VAR} is not installed; installed "
                          f"plugins: {installed}")
            log.warning("jarvis: %s", info.error)
            report.plugins.append(info)
    _last_report = report
    return report


def _load_one(ep: Any, info: PluginInfo) -> None:
    origin = f"plugin {ep.name}" + (f" ({info.distribution} {info.version})"
                                    if info.distribution else "")
    cached = _CACHE.get(ep.name)
    if cached is not None and cached[0] == ep.value:
        # Already tried in this process: put its tools back if the registry lost them (a
        # module is imported once), and report a failure once, not on every load.
        for name, value in cached[1].items():
            if ToolRegistry._entries.get(name) is not value:
                ToolRegistry.register_value(name, value, origin=origin, replace=True)
        info.tools, info.status, info.error = sorted(cached[1]), cached[2].status, cached[2].error
        return
    before = dict(ToolRegistry._entries)
    before_origins = dict(ToolRegistry._origins)

    def roll_back() -> None:
        for name in [k for k, v in ToolRegistry._entries.items() if before.get(k) is not v]:
            ToolRegistry.unregister(name)
            if name in before:
                ToolRegistry._entries[name] = before[name]
                ToolRegistry._origins[name] = before_origins[name]

    try:
        obj = ep.load()
        if isinstance(obj, types.ModuleType):
            # A module entry point: the tools its import registered are the plugin's.
            names = [k for k, v in ToolRegistry._entries.items() if before.get(k) is not v]
        else:
            # An object entry point: only that object (or what it returns) counts; tools
            # its module registered on import as a side effect belong to other entry points.
            roll_back()
            names = _register_object(obj, ep.name)
    except BaseException as exc:  # noqa: BLE001  (plugin code may raise anything)
        if isinstance(exc, KeyboardInterrupt):
            raise
        roll_back()
        _fail(info, f"{_where(exc)}{type(exc).__name__}: {exc}")
        _CACHE[ep.name] = (ep.value, {}, info)
        return
    added = {name: ToolRegistry._entries[name] for name in names}
    for name in added:
        ToolRegistry._origins[name] = origin
    info.tools = sorted(added)
    if not added:
        log.warning("jarvis: plugin %r (%s) registered no tools", ep.name, ep.value)
    _CACHE[ep.name] = (ep.value, added, info)


def _register_object(obj: Any, plugin: str) -> list[str]:
    """Register what an entry point gives (a tool, a tool class, or a function that
    registers or returns tools); returns the names it registered."""
    from jarvis.tools.base import BaseTool

    if isinstance(obj, BaseTool):
        ToolRegistry.register_value(obj.spec.name, obj)
        return [obj.spec.name]
    if inspect.isclass(obj):
        if not issubclass(obj, BaseTool):
            raise TypeError(f"{obj.__qualname__} is a class but not a BaseTool subclass")
        name = obj.tool_id or obj().spec.name
        ToolRegistry.register_value(name, obj)
        return [name]
    if callable(obj) and not isinstance(obj, types.ModuleType):
        before = dict(ToolRegistry._entries)
        result = obj()
        names = [k for k, v in ToolRegistry._entries.items() if before.get(k) is not v]
        items = result if isinstance(result, (list, tuple)) else [result]
        for item in items:
            if item is not None:
                names.extend(n for n in _register_object(item, plugin) if n not in names)
        return names
    raise TypeError(f"plugin {plugin!r} points at a {type(obj).__name__}; expected a tool, a "
                    "BaseTool subclass, a module, or a function that registers tools")


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}: "
    # The innermost frame outside jarvis and importlib is the plugin's own code.
    from pathlib import Path

    own = str(Path(__file__).resolve().parent)
    for frame in reversed(frames):
        if "importlib" not in frame.filename and not frame.filename.startswith(own):
            return f"{frame.filename}:{frame.lineno}: "
    return ""


def _fail(info: PluginInfo, message: str) -> None:
    info.status = "failed"
    info.error = message
    log.warning("jarvis: plugin %r (%s) was not loaded: %s", info.name, info.value, message)
