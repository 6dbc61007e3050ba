"""Workspace tools: every `*.py` in the tools folder, loaded by path into ToolRegistry.

A tool file is plain Python, not part of a package. It is executed under a private module
name; the tools *defined in it* with `@tool` (or BaseTool subclasses it registers with
`@ToolRegistry.register`) join the registry. Anything it imports stays out: a tool that some
imported module registers as a side effect is rolled back, so only what the file itself
defines counts.

A file that fails (syntax error, import error, an invalid tool, a name clash) is reported
with its path and line and skipped as a whole: none of its tools are registered and the other
files still load. Files whose names start with `_` are not loaded (use them for notes or
drafts). Loading is idempotent: an unchanged file whose tools are still registered is not
executed again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvis.core.registry import ToolRegistry, _identity
from jarvis.workspace import workspace_path

log = logging.getLogger("jarvis.workspace")

MODULE_PREFIX = "_jarvis_workspace_tool_"
MAX_TOOL_FILE_BYTES = 4 * 1_048_576


@dataclass(slots=True)
class ToolFileError:
    """A tool file that did not load: where (file and line) and why."""

    path: Path
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.message}"


@dataclass(slots=True)
class ToolFileReport:
    """What one file contributed (tool names) or why it contributed nothing."""

    path: Path
    tools: list[str] = field(default_factory=list)
    error: ToolFileError | None = None
    ignored: list[str] = field(default_factory=list)


@dataclass(slots=True)
class WorkspaceToolsReport:
    """The outcome of loading a tools folder."""

    folder: Path
    files: list[ToolFileReport] = field(default_factory=list)

    @property
    def tools(self) -> dict[str, Path]:
        """Registered tool name -> the file that defines it."""
        return {name: f.path for f in self.files for name in f.tools}

    @property
    def errors(self) -> list[ToolFileError]:
        return [f.error for f in self.files if f.error is not None]


@dataclass(slots=True)
class _Loaded:
    stamp: tuple[int, int]
    tools: dict[str, Any]
    report: ToolFileReport


# path -> what the last load of that file produced; makes repeated loads cheap and quiet.
_CACHE: dict[Path, _Loaded] = {}
_last_report: WorkspaceToolsReport | None = None
# Loads compare the registry before and after running a file: one load at a time per process.
_LOCK = threading.RLock()


def tools_dir(config: Any) -> Path:
    """The workspace tools folder: `[workspace] tools_dir`, relative to the config file
    (with no config file: under $JARVIS_HOME)."""
    return workspace_path(config, config.workspace.tools_dir)


def last_report() -> WorkspaceToolsReport | None:
    """The report of the most recent `load_workspace_tools` call in this process."""
    return _last_report


def load_workspace_tools(config: Any = None, folder: str | Path | None = None) -> WorkspaceToolsReport:
    """Load every `*.py` tool file of the workspace (or of `folder`) into ToolRegistry.

    Problems are logged (logger `jarvis.workspace`, shown on stderr by default) once per
    version of a file and returned in the report; they never raise.
    """
    global _last_report
    if folder is None:
        if config is None:
            from jarvis.core.config import load_config

            config = load_config()
        folder = tools_dir(config)
    folder = Path(folder)
    report = WorkspaceToolsReport(folder=folder)
    if folder.is_dir():
        ToolRegistry._ensure_loaded()  # built-ins first (not keys(): it runs on-demand loaders)
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_") or not path.is_file():
                continue
            report.files.append(load_tool_file(path, folder=folder))
    _last_report = report
    return report


def load_tool_file(path: str | Path, folder: str | Path | None = None) -> ToolFileReport:
    """Execute one tool file by path and register the tools it defines (all or nothing).

    The source is read through the path policy, beneath `folder` (default: the file's own
    folder): a symlink leading out of it, a FIFO or a huge file is reported, never run.
    """
    with _LOCK:
        return _load_tool_file(Path(path).resolve(), Path(folder or Path(path).parent))


def _read_source(path: Path, folder: Path) -> bytes:
    from jarvis.security.paths import PathPolicy

    policy = PathPolicy([folder], secrets=False, setting="[workspace] tools_dir",
                        outside_hint="keep tool files in the tools folder itself")
    return policy.read(str(path), MAX_TOOL_FILE_BYTES).data


def _load_tool_file(path: Path, folder: Path) -> ToolFileReport:
    ToolRegistry._ensure_loaded()  # built-ins first: a file taking one's name is refused
    try:
        info = path.stat()
        stamp = (info.st_mtime_ns, info.st_size)
    except OSError as exc:
        return _failed(ToolFileReport(path), ToolFileError(path, None, f"cannot read: {exc}"))
    cached = _CACHE.get(path)
    if cached is not None and cached.stamp == stamp and _still_registered(cached.tools):
        return cached.report
    if cached is not None:
        for name, value in cached.tools.items():
            if ToolRegistry._entries.get(name) is value:
                ToolRegistry.unregister(name)

    report = ToolFileReport(path)
    module_name = _module_name(path)
    before = dict(ToolRegistry._entries)
    before_origins = dict(ToolRegistry._origins)
    error: ToolFileError | None = None
    try:
        source = _read_source(path, folder)
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path} as Python source")
        module = importlib.util.module_from_spec(spec)
        # In sys.modules while it runs: dataclasses, pydantic and typing look the module up.
        sys.modules[module_name] = module
        # The bytes that were checked are the bytes that run (no second open by path).
        exec(compile(source, str(path), "exec", dont_inherit=True), module.__dict__)  # noqa: S102
    except SyntaxError as exc:
        error = ToolFileError(path, exc.lineno, f"SyntaxError: {exc.msg}")
    except BaseException as exc:  # noqa: BLE001  (a user file may raise anything, even SystemExit)
        if isinstance(exc, KeyboardInterrupt):
            raise
        error = ToolFileError(path, _line_in(exc, path), f"{type(exc).__name__}: {exc}")

    added = {k: v for k, v in ToolRegistry._entries.items() if before.get(k) is not v}
    if error is None:
        mine: dict[str, Any] = {}
        for name, value in added.items():
            ident = _identity(value)
            if ident is not None and ident[0] == module_name:
                mine[name] = value
            else:
                where = f"{ident[0]}.{ident[1]}" if ident else repr(value)
                report.ignored.append(name)
                log.warning("jarvis: %s: tool %r comes from %s, not from this file; it is not "
                            "loaded (only tools defined in a tool file count)", path, name, where)
        if not mine:
            log.warning("jarvis: %s defines no tools; decorate a function with @tool (from "
                        "jarvis import tool) or register a BaseTool subclass", path)
    if error is not None or report.ignored:
        # All or nothing for a failed file; imported tools never count.
        keep = {} if error is not None else mine
        for name in added:
            if name not in keep:
                ToolRegistry.unregister(name)
                if name in before:
                    ToolRegistry._entries[name] = before[name]
                    ToolRegistry._origins[name] = before_origins[name]
    if error is not None:
        sys.modules.pop(module_name, None)
        _CACHE[path] = _Loaded(stamp, {}, report)
        return _failed(report, error)
    for name in mine:
        ToolRegistry._origins[name] = f"workspace {path}"
    report.tools = sorted(mine)
    _CACHE[path] = _Loaded(stamp, mine, report)
    return report


def _failed(report: ToolFileReport, error: ToolFileError) -> ToolFileReport:
    report.error = error
    log.warning("jarvis: skipped tool file %s (fix it, or rename it to start with '_')", error)
    return report


def _still_registered(tools: dict[str, Any]) -> bool:
    return all(ToolRegistry._entries.get(name) is value for name, value in tools.items())


def _module_name(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode("utf-8")).hexdigest()[:12]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"{MODULE_PREFIX}{digest}_{stem}"


def _line_in(exc: BaseException, path: Path) -> int | None:
    """The innermost line of `path` in the exception's traceback (where the file failed)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == str(path):
            line = frame.lineno
    return line


def check_tool_settings(config: Any) -> None:
    """Every `[tools.NAME]` table must name a registered tool that takes settings and hold
    only its settings, each of the right type: a typo such as `[tools.file_raed]` or
    `allowed_dir` would otherwise leave file_read unrestricted without a word, or break an
    unrelated command later. ConfigError names the file, the table and the fix (did-you-mean).

    Only tools registered now count (built-ins, and the workspace and plugin tools once
    loaded); MCP servers are not contacted: their tools take no settings.
    """
    from jarvis.errors import ConfigError, did_you_mean
    from jarvis.tools.catalog import check_settings, setting_names

    where = str(config.source) if getattr(config, "source", None) else "the configuration"
    entries = ToolRegistry.snapshot()[0]
    for name, table in config.tools.settings.items():
        value = entries.get(name)
        if value is None:
            configurable = sorted(n for n, v in entries.items()
                                  if isinstance(v, type) and setting_names(v) != [])
            close = did_you_mean(name, configurable) or did_you_mean(name, entries)
            raise ConfigError(f"invalid config in {where}: [tools.{name}] names no tool"
                              + (f" ({close})" if close else "")
                              + f"; tools with settings: {', '.join(configurable)}")
        try:
            check_settings(name, value, table)
        except ConfigError as exc:
            raise ConfigError(f"invalid config in {where}: {exc}") from None
        _check_setting_types(name, table, where)


def _check_setting_types(name: str, settings: dict[str, Any], where: str) -> None:
    """Each setting must fit the type its tool's constructor declares: a wrong type such as
    `allowed_dirs = 5` would otherwise fail deep inside the tool with a traceback."""
    import inspect
    import typing

    from pydantic import TypeAdapter, ValidationError

    from jarvis.errors import ConfigError

    cls = ToolRegistry.get(name)
    if not isinstance(cls, type):
        return  # build_tool reports settings given to a tool that takes none
    try:
        hints = typing.get_type_hints(cls.__init__)
        params = inspect.signature(cls).parameters
    except (NameError, TypeError, ValueError):
        return  # unresolvable annotations: the tool checks its own settings
    for key, value in settings.items():
        hint = hints.get(key)
        if key not in params or hint is None or hint is Any:
            continue  # unknown keys are named by build_tool
        try:
            TypeAdapter(hint).validate_python(value, strict=True)
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            raise ConfigError(f"invalid config in {where}: tools.{name}.{key}: {problem} "
                              f"(got {value!r})") from None
