"""Secrets in output: `jarvis config show` (and its --json) hides secret values by name, URL
passwords and query tokens, and secret options in MCP args."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.security.redact import MASK, is_secret_name, redact_args, redact_url, redact_value


@pytest.mark.parametrize("name", ["api_key", "OPENAI_KEY", "PRIVATE_KEY", "GH_PAT", "token",
                                  "GITHUB_TOKEN", "accessToken", "apikey", "DB_PASSWORD",
                                  "passwd", "Authorization", "X-Auth", "client_secret",
                                  "AWS_SECRET_ACCESS_KEY", "cookie", "SESSION", "credentials",
                                  "x-api-key", "Bearer", "DB_PASS", "SMTP_PASS", "REDIS_PASS",
                                  "PASSPHRASE", "gpg_passphrase", "sshKeyPassphrase", "smtpPass",
                                  "mysqlpass", "pass", "DB_PASS2"])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["path", "db_path", "model", "host", "url", "command",
                                  "allowed_secret_paths", "cwd", "patterns", "author", "keep",
                                  "timeout", "HOME", "name", "BYPASS", "bypass_proxy", "COMPASS",
                                  "compass_heading", "surpass", "passive", "passthrough",
                                  "password_file", "DB_PASS_FILE", "passage", "webhook_events"])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_urls() -> None:
    assert redact_url("postgres://u:pw@db:5432/x") == f"postgres://u:{MASK}@db:5432/x"
    assert redact_url("https://ghp_abc@github.com/x.git") == f"https://{MASK}@github.com/x.git"
    assert redact_url("redis://:hunter2@cache:6379/0") == f"redis://:{MASK}@cache:6379/0"
    masked = redact_url("https://api.example/v1?api_key=XYZ&q=cats&sig=abc")
    assert "XYZ" not in masked and "abc" not in masked and "q=cats" in masked
    assert redact_url("https://example.com/plain?q=1") == "https://example.com/plain?q=1"
    assert redact_url("see http://a:b@h/ and http://c:d@i/") == (
        f"see http://a:{MASK}@h/ and http://c:{MASK}@i/")


def test_args() -> None:
    args = ["-y", "@modelcontextprotocol/server-github", "--token", "T1", "--api-key=T2",
            "--verbose", "--password", "-x", "GITHUB_TOKEN=T3", "postgres://u:T4@db/x",
            "ghp_abcdefghijklmnopqrstuvwxyz0123", "--auth-token=", "--port", "8080"]
    out = redact_args(args)
    assert out == ["-y", "@modelcontextprotocol/server-github", "--token", MASK,
                   f"--api-key={MASK}", "--verbose", "--password", "-x", f"GITHUB_TOKEN={MASK}",
                   f"postgres://u:{MASK}@db/x", MASK, "--auth-token=", "--port", "8080"]


def test_values_only_hide_strings() -> None:
    assert redact_value("session_idle_seconds", 900.0) == 900.0
    assert redact_value("max_sessions", 256) == 256
    assert redact_value("tokens", ["a", "b"]) == [MASK, MASK]
    assert redact_value("env", {"GH_PAT": "x", "HOME": "/h"}) == {"GH_PAT": MASK, "HOME": "/h"}
    assert redact_value("api_key", "") == ""  # nothing set: nothing to hide, and it shows
    assert redact_value("X-Custom", "Bearer abc.def") == f"Bearer {MASK}"
    assert redact_value("model", "sk-abcdefghijklmnopqrstuvwx") == MASK


CONFIG = """
[engine.hosts]
vllm = "http://admin:enginepw@127.0.0.1:8000"

[mcp.servers.gh]
command = "npx"
args = ["-y", "server-github", "--token", "SECRET-ARG-1", "--api-key=SECRET-ARG-2"]
env = { OPENAI_KEY = "SECRET-ENV-1", PRIVATE_KEY = "SECRET-ENV-2", GH_PAT = "SECRET-ENV-3", DB_PASSWORD = "SECRET-ENV-4", LOG_LEVEL = "debug" }

[mcp.servers.db]
url = "https://user:SECRET-URL-1@mcp.example/mcp?api_key=SECRET-URL-2&region=eu"
headers = { Authorization = "Bearer SECRET-HDR-1", X-Session = "SECRET-HDR-2", Accept = "text/plain" }
"""


def test_config_show_hides_every_secret(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "work" / "config.toml").write_text(CONFIG)
    for args in (["config", "show"], ["config", "show", "--json"]):
        proc = subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                              text=True, env=cli_env, timeout=60, cwd=tmp_path / "work")
        assert proc.returncode == 0, proc.stderr
        assert "SECRET" not in proc.stdout and "enginepw" not in proc.stdout, proc.stdout
        # What is not secret still shows, so the output stays useful.
        assert "server-github" in proc.stdout and "region=eu" in proc.stdout
        assert "debug" in proc.stdout and "text/plain" in proc.stdout
    values = json.loads(proc.stdout)["values"]
    assert values["mcp.servers.gh.env.GH_PAT"]["value"] == MASK
    assert values["mcp.servers.gh.args"]["value"][3] == MASK
    assert values["mcp.servers.db.url"]["value"].startswith(f"https://user:{MASK}@mcp.example")


# --- attacks on the masking (second pass) ------------------------------------------------------
BYPASSES = r"""
[mcp.servers.remote]
command = "env GITHUB_TOKEN=SECRET-C1 my-server --token SECRET-C2"
args = ["-y", "mcp-remote", "https://mcp.example/sse", "--header", "Authorization: Bearer SECRET-A1", "-H", "X-API-Key: SECRET-A2", "--header=Authorization:Bearer SECRET-A4", "CONN=Server=db;Password=SECRET-A3;"]
env = { DB = "Server=db;User Id=sa;Password=SECRET-E1;", HF = "hf_SECRETabcdefghijklmnopqrstuvwxyz12", GOOGLE = "AIzaSyD-SECRETabcdefghijklmnopqrstuvw", STRIPE = "sk_live_SECRETabcdefghijklmnop", NPM = "npm_SECRETabcdefghijklmnopqrstuvwxyz0123", PEM = "-----BEGIN PRIVATE KEY-----\nSECRET-E2\n-----END PRIVATE KEY-----", DSN = "host=db user=u password=SECRET-E3 dbname=x", LOG_LEVEL = "debug" }

[mcp.servers.web]
url = "https://mcp.example/cb?region=eu#access_token=SECRET-F1"
headers = { Cookie2 = "sid=SECRET-H2", X-Custom = "Basic SECRET-H1", Accept = "text/plain" }
"""


def test_config_show_hides_secrets_inside_values(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Secrets that hide inside innocent-looking values: `--header "Authorization: Bearer
    ..."` in mcp-remote args (the usual way to give a remote MCP server a token), connection
    strings with Password=, NAME=token inside a command line, well-known token shapes
    (Hugging Face, Google, Stripe, npm), PEM keys, URL fragments."""
    (tmp_path / "work" / "config.toml").write_text(BYPASSES)
    for args in (["config", "show"], ["config", "show", "--json"]):
        proc = subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                              text=True, env=cli_env, timeout=60, cwd=tmp_path / "work")
        assert proc.returncode == 0, proc.stderr
        leaked = sorted({line for line in proc.stdout.splitlines() if "SECRET" in line})
        assert leaked == [], leaked
        for shown in ("mcp-remote", "my-server", "Server=db", "region=eu", "debug",
                      "text/plain", "https://mcp.example/sse", "dbname=x"):
            assert shown in proc.stdout, shown


def test_text_masking_keeps_ordinary_text() -> None:
    for text in ("see https://example.com/a?q=1#section", "key points: none", "12:30",
                 "Server=db;Database=x;", "--verbose --port 8080", "author=me",
                 "Authorization header is optional"):
        assert redact_value("description", text) == text, text


# --- passwords named `pass`, and webhook URLs whose path is the secret -------------------------
@pytest.mark.parametrize("url, shown", [
    ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com/***"),
    ("https://discord.com/api/webhooks/123456/SECRETtoken", "https://discord.com/api/webhooks/***"),
    ("https://discordapp.com/api/webhooks/123456/SECRETtoken",
     "https://discordapp.com/api/webhooks/***"),
    ("https://acme.webhook.office.com/webhookb2/SECRET-guid@tenant/IncomingWebhook/SECRET2/x",
     "https://acme.webhook.office.com/webhookb2/***"),
    ("https://api.telegram.org/bot123:SECRETtok/sendMessage", "https://api.telegram.org/***"),
    ("https://hooks.zapier.com/hooks/catch/1/SECRET/", "https://hooks.zapier.com/hooks/***"),
    ("https://maker.ifttt.com/trigger/ev/with/key/SECRET", "https://maker.ifttt.com/***"),
    ("https://ntfy.sh/SECRET-topic", "https://ntfy.sh/***"),
    # Self-hosted (Mattermost, Rocket.Chat, n8n): the path after /hooks/ or /webhook/.
    ("https://chat.example/hooks/SECRETid", "https://chat.example/hooks/***"),
    ("https://n8n.example/webhook/SECRET-uuid?code=SECRETcode",
     f"https://n8n.example/webhook/***?code={MASK}"),
])
def test_webhook_urls_hide_their_path(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_value("url", url) == shown
    assert redact_value("notes", f"post to {url} daily") == f"post to {shown} daily"


def test_a_webhook_name_hides_the_path_of_any_url() -> None:
    url = "https://alerts.example.com/in/SECRETpath/x?team=SECRETq"
    for name in ("WEBHOOK_URL", "slack_webhook", "alertWebhookUrl", "webhook"):
        assert redact_value(name, url) == f"https://alerts.example.com/***?team={MASK}", name
    assert redact_value("WEBHOOK_URL", "not a url") == "not a url"  # nothing to hide in it
    assert redact_args(["--webhook-url", url]) == ["--webhook-url", redact_value("webhook", url)]
    assert redact_args([f"--webhook={url}"]) == [f"--webhook={redact_value('webhook', url)}"]


def test_ordinary_urls_keep_their_path() -> None:
    for url in ("https://example.com/docs/webhooks", "https://api.github.com/repos/o/r/hooks",
                "https://discord.com/invite", "https://slack.com/help/articles/1",
                "https://example.com/a/b?q=1"):
        assert redact_url(url) == url
        assert redact_value("homepage", url) == url


WEBHOOKS = """
[mcp.servers.notify]
command = "notify-server"
args = ["--slack", "https://hooks.slack.com/services/T0/B0/SECRET-A1"]
env = { DB_PASS = "SECRET-E1", SMTP_PASS = "SECRET-E2", REDIS_PASS = "SECRET-E3", PASSPHRASE = "SECRET-E4", WEBHOOK_URL = "https://alerts.example.com/in/SECRET-E5", DISCORD = "https://discord.com/api/webhooks/1/SECRET-E6", COMPASS = "north", BYPASS = "on" }
"""


def test_config_show_hides_pass_names_and_webhook_paths(tmp_path: Path,
                                                        cli_env: dict[str, str]) -> None:
    (tmp_path / "work" / "config.toml").write_text(WEBHOOKS)
    for args in (["config", "show"], ["config", "show", "--json"]):
        proc = subprocess.run([sys.executable, "-m", "jarvis.cli", *args], capture_output=True,
                              text=True, env=cli_env, timeout=60, cwd=tmp_path / "work")
        assert proc.returncode == 0, proc.stderr
        leaked = sorted({line for line in proc.stdout.splitlines() if "SECRET" in line})
        assert leaked == [], leaked
        for shown in ("https://hooks.slack.com/***", "https://alerts.example.com/***",
                      "https://discord.com/api/webhooks/***", "north", "on"):
            assert shown in proc.stdout, shown


def test_an_engine_url_with_a_password_is_masked_in_errors_and_the_run_log(cli_env) -> None:
    """A remote engine behind basic auth (`https://user:pw@host/v1`) or a `?key=` in its URL:
    the failure `jarvis ask` prints, its --json, and the run log show the URL masked."""
    import socket

    from jarvis.engine.openai_compat import OpenAICompatEngine
    from jarvis.errors import EngineError

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = f"http://admin:pw-SECRET-1@127.0.0.1:{port}/v1?key=key-SECRET-2"
    engine = OpenAICompatEngine("vllm", host, model="m", max_retries=0, timeout=2.0)
    with pytest.raises(EngineError) as caught:
        engine.generate([{"role": "user", "content": "hi"}])
    assert "SECRET" not in str(caught.value) and "admin:***@" in str(caught.value)
    assert "SECRET" not in repr(engine)
    for args in (["ask", "hi"], ["ask", "--json", "hi"]):
        out = subprocess.run([sys.executable, "-m", "jarvis.cli", *args, "--engine", "vllm",
                              "--host", host], capture_output=True, text=True, env=cli_env,
                             timeout=60)
        assert out.returncode != 0 and "cannot reach vllm" in out.stderr, out.stderr
        assert "SECRET" not in out.stdout + out.stderr
    runs = subprocess.run([sys.executable, "-m", "jarvis.cli", "runs", "list", "--json"],
                          capture_output=True, text=True, env=cli_env, timeout=60)
    assert runs.returncode == 0 and "SECRET" not in runs.stdout
