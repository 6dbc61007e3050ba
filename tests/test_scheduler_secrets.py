"""Store and broker passwords never reach the terminal: not in `user:password@`, not in the
query (`?password=`, `?sslpassword=`), not in a key=value DSN, not where libpq quotes a part of
the URL it cannot parse (it quoted a bad percent-encoded password as it was)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ports import closed_port

from jarvis.scheduler.ledger import redact, redact_error
from jarvis.scheduler.store_postgres import PostgresStore, StoreUnavailable

SECRETS = ("pa%zzsecretword", "paXXsecretword", "topsecret9", "brokersecret1", "brokersecret2",
           "dsnsecret 7")


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://me:secret@db:5432/x", "postgresql://me:***@db:5432/x"),
    ("postgresql://me@db/x", "postgresql://me@db/x"),  # a user name alone is not a secret
    ("postgresql://me@db/x?sslmode=require&password=topsecret9",
     "postgresql://me@db/x?sslmode=require&password=***"),
    ("redis://:brokersecret1@r:6379/0", "redis://:***@r:6379/0"),
    ("host=db password=topsecret9 user=me", "host=db password=*** user=me"),
    ("host=db password='dsnsecret 7' user=me", "host=db password=*** user=me"),
])
def test_redact(url, shown):
    assert redact(url) == shown


def test_an_error_quoting_the_password_is_redacted():
    url = "postgresql://me:pa%zzsecretword@db/x"
    assert redact_error('invalid percent-encoded token: "pa%zzsecretword"', url) == \
        'invalid percent-encoded token: "***"'
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore(url, connect_timeout=1)
    assert "secretword" not in str(caught.value) and "***" in str(caught.value)


@pytest.mark.parametrize("command", [["worker"], ["schedule", "list"],
                                     ["scheduler", "start", "--once"]])
def test_cli_errors_show_no_store_password(cli_env, command):
    env = {**cli_env,
           "JARVIS_SCHEDULER_STORE": "postgresql://u:pa%zzsecretword@127.0.0.1:1/db"
                                     "?sslpassword=topsecret9",
           "JARVIS_SCHEDULER_RUNNER": "celery",
           "JARVIS_CELERY_BROKER": f"redis://:brokersecret1@127.0.0.1:{closed_port()}/0"}
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", *command], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "cannot connect to the scheduler store" in text
    assert "Traceback" not in text and not [s for s in SECRETS if s in text], text


def test_cli_error_shows_no_broker_password(cli_env, pg_url):
    env = {**cli_env, "JARVIS_SCHEDULER_STORE": pg_url + "?sslpassword=topsecret9",
           "JARVIS_SCHEDULER_RUNNER": "celery",
           "JARVIS_CELERY_BROKER": f"redis://:brokersecret1@127.0.0.1:{closed_port()}/0"}
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", "worker"], env=env,
                         capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "cannot reach the Celery broker" in text, text
    assert "Traceback" not in text and not [s for s in SECRETS if s in text], text
    # kombu cannot take ?password= (it failed with a TypeError about dict()): one clear line.
    env["JARVIS_CELERY_BROKER"] = "redis://127.0.0.1:6379/0?password=brokersecret2"
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", "worker"], env=env,
                         capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "not in ?password=" in text, text
    assert "Traceback" not in text and "brokersecret2" not in text
