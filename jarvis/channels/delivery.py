"""Delivering a finished scheduled run to its task's channel, with retries and backoff.

The scheduler records the run (answer or failure) first and only then calls the notifier, so a
delivery that fails never loses the answer: it stays in the run record and the run log, and
the delivery's own outcome (attempts, error) is recorded next to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("jarvis.scheduler")

MAX_ATTEMPTS = 10
MAX_BACKOFF = 300.0


def run_message(task: Any, run: Any) -> tuple[str, str]:
    """(title, body) telling the user how a run ended."""
    prompt = " ".join(str(task.prompt).split())
    if len(prompt) > 120:
        prompt = prompt[:119] + "…"
    if run.status == "succeeded":
        title = f"jarvis: task {task.id} done"
        body = run.answer or "(the run succeeded with an empty answer)"
    elif run.status == "incomplete":
        title = f"jarvis: task {task.id} stopped without an answer"
        body = f"The run stopped without an answer ({run.error_type}): {run.error or 'no details'}"
    elif run.status == "expired":
        title = f"jarvis: task {task.id} expired"
        body = ("The run waited for your approval and nobody answered in time, so it ended "
                "without doing what it asked for.")
    else:
        title = f"jarvis: task {task.id} failed"
        body = f"The run failed ({run.error_type or 'error'}): {run.error or 'no details'}"
    return title, f"{body}\n\n— {prompt!r}, run #{run.id}"


def deliver(config: Any, channel: str, title: str, body: str, *,
            sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Send with the channel's retries and backoff; return the delivery record
    {channel, status: delivered|failed, attempts, error, at}. Never raises."""
    from jarvis.channels.channels import get_channel, send
    from jarvis.errors import JarvisError

    record: dict[str, Any] = {"channel": channel, "status": "failed", "attempts": 0,
                              "error": None, "at": None}
    try:
        settings = get_channel(config, channel)
    except JarvisError as exc:
        record["error"] = str(exc)
        record["at"] = time.time()
        return record
    attempts = 1 + max(0, min(int(settings.retries), MAX_ATTEMPTS - 1))
    backoff = max(0.0, float(settings.retry_backoff))
    for attempt in range(1, attempts + 1):
        record["attempts"] = attempt
        try:
            outcome = send(config, channel, body, title)
        except JarvisError as exc:  # unusable channel (bad URL, no apprise): retrying won't help
            record["error"] = str(exc)
            break
        except Exception as exc:  # a delivery must never take the scheduler down
            record["error"] = f"{type(exc).__name__}: {exc}"
        else:
            if outcome.ok:
                record.update(status="delivered", error=None)
                break
            record["error"] = outcome.error
        if attempt < attempts:
            delay = min(backoff * 2 ** (attempt - 1), MAX_BACKOFF)
            log.warning("delivery to channel %s failed (attempt %d of %d): %s; retrying in %g s",
                        channel, attempt, attempts, record["error"], delay)
            sleep(delay)
    record["at"] = time.time()
    return record


class ChannelNotifier:
    """The scheduler's notifier: `notifier(task, run) -> delivery record`."""

    def __init__(self, config: Any, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.sleep = sleep

    def __call__(self, task: Any, run: Any) -> dict[str, Any]:
        title, body = run_message(task, run)
        record = deliver(self.config, task.notify, title, body, sleep=self.sleep)
        if record["status"] != "delivered":
            log.warning("task %s: run %d could not be delivered to channel %s after %d "
                        "attempt(s): %s (the answer is kept in the run record)", task.id, run.id,
                        task.notify, record["attempts"], record["error"])
        return record
