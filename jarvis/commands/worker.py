"""`jarvis worker`: a Celery worker that executes scheduled runs sent by `jarvis scheduler start`."""

from __future__ import annotations

import click

from jarvis.commands._common import load_cli_config, log_scheduler_to_stderr, system_factory


@click.command()
@click.option("--concurrency", type=click.IntRange(1, 256), default=None,
              help="Runs executed at once, one process each (default: [scheduler.celery] "
              "concurrency).")
@click.option("--runner", default=None, metavar="MODULE:FACTORY",
              help="TaskRunner to execute runs with (default: the SDK, as `jarvis ask`).")
@click.option("--loglevel", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                              case_sensitive=False),
              default="INFO", show_default=True, help="Celery's log level.")
def worker(concurrency: int | None, runner: str | None, loglevel: str) -> None:
    """Execute scheduled runs on this machine until SIGTERM/SIGINT.

    Needs the shared ledger and a broker in config.toml (or the environment):

    \b
      [scheduler]
      store = "postgresql://jarvis@db-host:5432/jarvis"   # JARVIS_SCHEDULER_STORE
      runner = "celery"
      [scheduler.celery]
      broker = "redis://redis-host:6379/0"                # JARVIS_CELERY_BROKER

    Runs go through the same path as `jarvis ask` (tools, approvals, run log); each run's
    run log entry is stored in the ledger, so `jarvis schedule runs --run ID` shows it on any
    machine. See docs/scheduler.md, "Running on several machines".
    """
    from jarvis.scheduler.worker import run_worker

    log_scheduler_to_stderr("worker")
    config = load_cli_config()

    # One Jarvis per pool process and workspace, built there on its first run.
    run_worker(config, concurrency=concurrency, runner=runner, factory=system_factory(config),
               loglevel=loglevel.upper())
