"""The `mcp` SDK's log records, as one line each on jarvis's stderr.

The SDK logs with `logger.exception(...)` when a server writes junk on stdout or an HTTP
session ends badly; with no logging configured, Python prints those as full tracebacks on
the terminal, once per junk line. Here they become one line (`jarvis: mcp: REASON`), the same
line is printed at most MAX_REPEATS times per process, and only JARVIS_DEBUG=1 shows the
tracebacks (and the SDK's debug records). An application that configured the `mcp` logger
itself (gave it handlers) is left alone.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

MAX_REPEATS = 3
_installed = False
_lock = threading.Lock()


def _debug() -> bool:
    return os.environ.get("JARVIS_DEBUG", "") not in ("", "0")


class OneLineHandler(logging.Handler):
    """Writes `jarvis: mcp: message: exception` to stderr; repeats are counted, not printed."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage().strip().splitlines()[0] if record.getMessage().strip() else ""
            exc = record.exc_info[1] if record.exc_info else None
            if exc is not None:
                from jarvis.mcp.errors import describe

                text = f"{text}: {describe(exc)}" if text else describe(exc)
            text = text[:400]
            count = self.seen.get(text, 0) + 1
            self.seen[text] = count
            if count > MAX_REPEATS and not _debug():
                return
            if count == MAX_REPEATS and not _debug():
                text += " (repeated; further copies are not shown)"
            from jarvis.core.terminal import visible

            # A record can quote a server's junk output: its escape sequences are shown, not run.
            line = f"jarvis: mcp: {visible(text, one_line=True)}\n"
            if _debug() and record.exc_info:
                import traceback

                line += "".join(traceback.format_exception(*record.exc_info))
            sys.stderr.write(line)
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never break a connection
            self.handleError(record)


def install() -> None:
    """Route the `mcp` logger and jarvis's MCP stdio transport's through OneLineHandler
    (once; not a logger the app configured itself)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        handler = OneLineHandler()
        # jarvis's own stdio transport (jarvis/mcp/stdio.py) reports what the SDK's would.
        for name in ("mcp", "jarvis.mcp.stdio"):
            logger = logging.getLogger(name)
            if logger.handlers:
                continue
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG if _debug() else logging.WARNING)
            logger.propagate = False
