"""file_read: read a UTF-8 text file, safely.

Paths are fully resolved (symlinks and `..`) before the allowed-directory check, which compares
whole path components, so `/data-evil` is not inside `/data`. Outside the allowed directories a
missing file and a forbidden one get the same answer, so the tool cannot be used to probe for
files. Only regular files are read (no devices, FIFOs, sockets or /proc and /sys pseudo-files),
at most 1 MB, and only valid UTF-8 text.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

MAX_FILE_BYTES = 1_000_000
MAX_PATH_CHARS = 4_096
PSEUDO_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def resolve_allowed(dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | None,
                    ) -> list[Path] | None:
    """Resolve allowed directories once (None means unrestricted)."""
    if dirs is None:
        return None
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]  # `allowed_dirs = "notes"` means one folder, not one per character
    return [Path(os.path.realpath(os.path.expanduser(os.fspath(d)))) for d in dirs]


def check_path(raw: Any, allowed: list[Path] | None) -> Path:
    """Resolve a model-given path and check it against `allowed`; raise PermissionError or
    ValueError with a message safe to show the model."""
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("path must be a non-empty string")
    if len(raw) > MAX_PATH_CHARS or "\x00" in raw:
        raise ValueError("path is not a valid file path")
    resolved = Path(os.path.realpath(os.path.expanduser(raw)))
    if allowed is not None and not any(resolved.is_relative_to(root) for root in allowed):
        raise PermissionError(f"access denied or file not found: {raw}")
    if any(resolved.is_relative_to(root) for root in PSEUDO_ROOTS):
        raise PermissionError(f"{raw} is a device or pseudo-file, not a regular file")
    return resolved


@ToolRegistry.register("file_read")
class FileReadTool(BaseTool):
    """Read file contents with safety validations."""

    tool_id = "file_read"

    def __init__(self, allowed_dirs: list[str] | None = None,
                 max_bytes: int = MAX_FILE_BYTES) -> None:
        self.allowed_dirs = resolve_allowed(allowed_dirs)
        self.max_bytes = max_bytes

    @property
    def spec(self) -> ToolSpec:
        where = ("" if self.allowed_dirs is None else
                 " Allowed directories: " + ", ".join(str(d) for d in self.allowed_dirs) + ".")
        return ToolSpec(
            name="file_read",
            description="Read a UTF-8 text file (at most 1 MB), optionally only its first lines."
                        + where,
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path to the file to read"},
                    "max_lines": {"type": "integer", "minimum": 1,
                                  "description": "Maximum lines to return (default: all)"},
                },
                "required": ["path"],
            },
            category="filesystem",
            latency_estimate=0.001,
            timeout_seconds=10.0,
        )

    def execute(self, **params: Any) -> ToolResult:
        raw = params.get("path")
        max_lines = params.get("max_lines")
        if max_lines is not None and (not isinstance(max_lines, int) or isinstance(max_lines, bool)
                                      or max_lines < 1):
            return ToolResult.failure("file_read", "max_lines must be a positive integer",
                                      ErrorType.INVALID_ARGS)
        try:
            path = check_path(raw, self.allowed_dirs)
            text, size = self._read(path, raw)
        except PermissionError as exc:
            return ToolResult.failure("file_read", str(exc), ErrorType.DENIED)
        except (ValueError, OSError) as exc:
            message = str(exc) if isinstance(exc, ValueError) else _os_message(exc, raw)
            return ToolResult.failure("file_read", message, ErrorType.EXECUTION)
        lines_total = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        truncated = False
        if max_lines is not None and lines_total > max_lines:
            text = "".join(text.splitlines(keepends=True)[:max_lines])
            truncated = True
        return ToolResult(
            tool_name="file_read",
            content=text,
            metadata={"path": str(path), "size_bytes": size, "lines_total": lines_total,
                      "truncated": truncated},
        )

    def _read(self, path: Path, raw: str) -> tuple[str, int]:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if self.allowed_dirs is not None:
                raise FileNotFoundError(f"file not found: {raw}") from None
            raise
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise ValueError(f"{raw} is {kind}")
        if info.st_size > self.max_bytes:
            raise ValueError(f"{raw} is {info.st_size} bytes; the limit is {self.max_bytes}")
        # O_NONBLOCK: if the file was swapped for a FIFO after the stat, open() won't hang.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode) or opened.st_ino != info.st_ino:
                raise ValueError(f"{raw} changed while it was being opened")
            with os.fdopen(fd, "rb", closefd=False) as handle:
                data = handle.read(self.max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > self.max_bytes:
            raise ValueError(f"{raw} is larger than {self.max_bytes} bytes")
        if b"\x00" in data:
            raise ValueError(f"{raw} is a binary file, not UTF-8 text")
        try:
            return data.decode("utf-8"), len(data)
        except UnicodeDecodeError:
            raise ValueError(f"{raw} is not UTF-8 text") from None


def _os_message(exc: OSError, raw: Any) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"file not found: {raw}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {raw}"
    return f"cannot read {raw}: {exc.strerror or exc}"
