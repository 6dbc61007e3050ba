"""file_read: read a UTF-8 text file, safely.

Which files may be read is the path policy's business (`jarvis.security.paths`): the
workspace folder plus `allowed_dirs`, secrets (dotfiles, keys, credential files) refused
unless listed in `allowed_secret_paths`, checked on the fully resolved path and opened beneath
the allowed folder so that no symlink swapped in on the way can lead outside. Outside the
allowed folders a missing file and a forbidden one get the same answer, so the tool cannot be
used to probe for files. Only regular files are read (no devices, FIFOs, sockets or /proc and
/sys pseudo-files), at most 1 MiB (1 048 576 bytes), and only valid UTF-8 text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.security.paths import (
    MAX_FILE_BYTES,
    MAX_PATH_CHARS,
    PSEUDO_ROOTS,
    FileTooLarge,
    NotAFile,
    PathChanged,
    PathDenied,
    PathPolicy,
    resolve_dirs,
)
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

__all__ = ["MAX_FILE_BYTES", "MAX_PATH_CHARS", "PSEUDO_ROOTS", "FileReadTool", "resolve_allowed"]


def resolve_allowed(dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | None,
                    ) -> list[Path] | None:
    """Resolve allowed directories once (None stays None)."""
    return resolve_dirs(dirs)


@ToolRegistry.register("file_read")
class FileReadTool(BaseTool):
    """Read file contents with safety validations."""

    tool_id = "file_read"
    needs = ("config",)  # the workspace folder and the config file (a secret) come from it

    def __init__(self, allowed_dirs: list[str] | None = None,
                 max_bytes: int = MAX_FILE_BYTES, allowed_secret_paths: list[str] | None = None,
                 config: Any = None) -> None:
        self.allowed_dirs = resolve_allowed(allowed_dirs)
        self.max_bytes = max_bytes
        # The workspace is always readable; `allowed_dirs` adds folders to it.
        self.policy = PathPolicy.for_tool(allowed_dirs, allowed_secret_paths, config,
                                          setting="[tools.file_read]")

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="file_read",
            description="Read a UTF-8 text file (at most 1 MiB), optionally only its first "
                        "lines. Hidden files and key or credential files are refused."
                        + self.policy.describe(),
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
            output_labels=frozenset({"private"}),
            egress="none",
        )

    def execute(self, **params: Any) -> ToolResult:
        raw = params.get("path")
        max_lines = params.get("max_lines")
        if max_lines is not None and (not isinstance(max_lines, int) or isinstance(max_lines, bool)
                                      or max_lines < 1):
            return ToolResult.failure("file_read", "max_lines must be a positive integer",
                                      ErrorType.INVALID_ARGS)
        try:
            opened = self.policy.read(raw, self.max_bytes)
        except PathDenied as exc:
            return ToolResult.failure("file_read", str(exc), ErrorType.DENIED)
        except (NotAFile, FileTooLarge, PathChanged) as exc:
            return ToolResult.failure("file_read", str(exc), ErrorType.EXECUTION)
        except ValueError as exc:  # a malformed path
            return ToolResult.failure("file_read", str(exc), ErrorType.EXECUTION)
        except OSError as exc:
            return ToolResult.failure("file_read", _os_message(exc, raw), ErrorType.EXECUTION)
        data = opened.data
        if b"\x00" in data:
            return ToolResult.failure("file_read", f"{raw} is a binary file, not UTF-8 text",
                                      ErrorType.EXECUTION)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolResult.failure("file_read", f"{raw} is not UTF-8 text", ErrorType.EXECUTION)
        lines_total = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        truncated = False
        if max_lines is not None and lines_total > max_lines:
            text = "".join(text.splitlines(keepends=True)[:max_lines])
            truncated = True
        return ToolResult(
            tool_name="file_read",
            content=text,
            metadata={"path": str(opened.path), "size_bytes": len(data),
                      "lines_total": lines_total, "truncated": truncated},
        )


def _os_message(exc: OSError, raw: Any) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"file not found: {raw}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {raw}"
    return f"cannot read {raw}: {exc.strerror or exc}"
