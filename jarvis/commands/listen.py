"""`jarvis listen`: answer messages from Telegram and e-mail ([inbound.NAME] in config.toml)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import click

from jarvis.commands._common import echo_json, load_cli_config
from jarvis.core.terminal import visible


def log_inbound_to_stderr() -> None:
    """The listeners' log (logger `jarvis.inbound`, INFO and up) as timestamped lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s jarvis listen: %(message)s",
                                           datefmt="%Y-%m-%dT%H:%M:%S"))
    logger = logging.getLogger("jarvis.inbound")
    if not any(getattr(h, "_jarvis_inbound", False) for h in logger.handlers):
        handler._jarvis_inbound = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def run_until_signal(listeners: list[Any], stop: threading.Event, grace: float) -> None:
    """Wait for the listeners; SIGINT/SIGTERM (or all of them ending) stops them all. A
    listener answering a message gets `grace` seconds to finish it; one only waiting for
    messages (a Telegram long poll) is not waited for: nothing is lost by leaving it."""
    import signal

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.is_set() and any(item.thread.is_alive() for item in listeners):
            for item in listeners:
                item.thread.join(0.1)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(item.thread.is_alive() and item.busy
                                                  for item in listeners):
            time.sleep(0.05)
    finally:
        stop.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def listen_beside(config: Any) -> Any:
    """Start the enabled listeners beside the scheduler daemon when `[scheduler] listen = true`;
    returns what stops them (a no-op when nothing was started)."""
    from jarvis.inbound.listener import chosen_inbounds, start_listeners

    if not config.scheduler.listen:
        return lambda: None
    if not chosen_inbounds(config):
        logging.getLogger("jarvis.scheduler").warning(
            "[scheduler] listen = true, but no [inbound.NAME] is enabled: nothing to listen to")
        return lambda: None
    from jarvis.sdk import Jarvis

    log_inbound_to_stderr()
    stop = threading.Event()
    system = Jarvis(config=config, default_client="http")
    listeners = start_listeners(system, stop)

    def stop_all() -> None:
        stop.set()
        deadline = time.monotonic() + config.scheduler.shutdown_timeout
        while time.monotonic() < deadline and any(item.thread.is_alive() and item.busy
                                                  for item in listeners):
            time.sleep(0.05)
        system.close()

    return stop_all


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


@click.command()
@click.argument("names", nargs=-1)
@click.option("--once", is_flag=True, help="Fetch once, answer what came, and exit.")
@click.option("--list", "show_list", is_flag=True, help="List the messages received (newest "
              "first) with what became of them, instead of listening.")
@click.option("-n", "--limit", type=click.IntRange(1, 10_000), default=20, show_default=True,
              help="With --list: how many.")
@click.option("--json", "as_json", is_flag=True, help="With --list: print them as JSON.")
@click.pass_context
def listen(ctx: click.Context, names: tuple[str, ...], once: bool, show_list: bool, limit: int,
           as_json: bool) -> None:
    """Answer messages from Telegram and e-mail: every enabled [inbound.NAME] of config.toml
    (or only NAMES), until SIGINT/SIGTERM. Each message is a run in its sender's conversation;
    only senders in the inbound's `allow` list are answered.

    \b
    Examples:
      jarvis listen                 # every enabled inbound
      jarvis listen phone --once    # fetch once (cron), answer, exit
      jarvis listen --list          # what came in, and what was done with it
    """
    from jarvis.errors import UserError
    from jarvis.inbound.listener import chosen_inbounds, open_ledger, start_listeners

    config = load_cli_config()
    if show_list:
        try:
            ledger = open_ledger(config, create=False)
        except UserError:
            rows = []  # no scheduler database yet: nothing was received
        else:
            try:
                rows = ledger.list(names[0] if len(names) == 1 else None, limit=limit)
            finally:
                ledger.store.close()
        if as_json:
            echo_json(rows)
        elif not rows:
            click.echo("no messages received yet", err=True)
        for row in [] if as_json else rows:
            extra = f" ({row['error']})" if row.get("error") else ""
            click.echo(visible(f"{_when(row['received_at'])}  {row['inbound']}  {row['status']:<11}"
                               f"  from {row['sender'] or '?'}  conversation "
                               f"{row['conversation_id'] or '-'}{extra}", 400, one_line=True))
        return
    if not chosen_inbounds(config, names):
        raise UserError("nothing to listen to: add an [inbound.NAME] table to config.toml (see "
                        "docs/inbound.md) or enable one")
    log_inbound_to_stderr()
    from jarvis.sdk import Jarvis

    stop = threading.Event()
    with Jarvis(config=config, default_client="http") as j:
        listeners = start_listeners(j, stop, names, once=once)
        run_until_signal(listeners, stop, config.scheduler.shutdown_timeout)
    failed = [item for item in listeners if item.failed]
    if failed:
        for item in failed:
            click.echo(f"Error: inbound {item.name}: {item.failed}", err=True)
        ctx.exit(1)
