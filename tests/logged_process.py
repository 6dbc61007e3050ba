"""A subprocess whose stderr lines are collected as they come, for tests that wait on what a
daemon, worker or server logs."""

from __future__ import annotations

import subprocess
import threading

from waiting import wait_for


class LoggedProcess:
    """`proc` (started with stderr=PIPE, text=True), its stderr read line by line on a thread.
    `name` says which process in failure messages."""

    line_timeout = 30.0

    def __init__(self, proc: subprocess.Popen, name: str) -> None:
        self.proc = proc
        self.name = name
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, needle: str, timeout: float | None = None) -> str:
        """The first stderr line holding `needle`; fails at once if the process exited first."""
        def found() -> str | None:
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}) before "
                                     f"logging {needle!r}:\n{self.text()[-4000:]}")
            return next((line for line in list(self.lines) if needle in line), None)

        return wait_for(found, self.line_timeout if timeout is None else timeout,
                        f"log line {needle!r} of {self.name}")

    def close_streams(self) -> None:
        """After the process ended: the reader's last lines, then the pipes closed."""
        self._reader.join(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
