"""Keys in URLs, not only in `user:password@` or `?api_key=`: a key in the path (Zapier's MCP
URLs, https://actions.zapier.com/mcp/sk-ak-.../sse), any token-looking path segment or query
value, is masked in `jarvis config show`, `jarvis mcp list` (text and --json) and in every
error that quotes the URL. Through the CLI, against a real loopback server that refuses."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jarvis.security.redact import looks_like_token, redact_value

ZAPIER = "sk-ak-" + "Jh7QmXRcTy9VBzk5qNwFxLpA3e"
RANDOM = secrets.token_urlsafe(24)
CUSTOMER = str(uuid.uuid4())
HEX = secrets.token_hex(20)


class Refusing(BaseHTTPRequestHandler):
    """Answers 401 under /auth/ and 404 elsewhere, quoting nothing."""

    def _answer(self) -> None:
        status = 401 if "/auth/" in self.path else 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="mcp"')
        self.end_headers()

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def refusing() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def jarvis(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_keys_in_mcp_urls_never_reach_the_screen(refusing: str, cli_env, tmp_path: Path):
    servers = {
        "zap": f"{refusing}/mcp/{ZAPIER}/sse",
        "plain": f"{refusing}/api/v1/{RANDOM}/mcp",
        "auth": f"{refusing}/auth/{HEX}",
        "query": f"{refusing}/mcp?customer={CUSTOMER}&Token=abc123secret&page=2",
        "fragment": f"{refusing}/mcp#access_token={RANDOM}",
    }
    lines = []
    for name, url in servers.items():
        lines += [f"[mcp.servers.{name}]", f"url = {json.dumps(url)}", ""]
    (tmp_path / "config.toml").write_text("\n".join(lines))
    secrets_shown = (ZAPIER, RANDOM, CUSTOMER, HEX, "abc123secret")
    outputs = {}
    for args in (["config", "show"], ["config", "show", "--json"], ["mcp", "list"],
                 ["mcp", "list", "--json"], ["tools", "list"], ["mcp", "resources", "zap"],
                 ["mcp", "tools", "auth"], ["ask", "--tools", "zap__x", "hi"]):
        out = jarvis(cli_env, *args, cwd=tmp_path)
        assert "Traceback" not in out.stderr, (args, out.stderr)
        outputs[" ".join(args)] = out.stdout + out.stderr
    for command, text in outputs.items():
        for secret in secrets_shown:
            assert secret not in text, (command, secret, text)
    listed = {row["name"]: row for row in _json(outputs, "mcp list --json")}
    assert listed["zap"]["target"] == f"{refusing}/mcp/***/sse"
    assert listed["plain"]["target"] == f"{refusing}/api/v1/***/mcp"
    assert listed["query"]["target"] == f"{refusing}/mcp?customer=***&Token=***&page=2"
    # The errors quote the URL too (HTTP 404 from ..., 401 with the challenge), masked.
    assert f"HTTP 404 Not Found from {refusing}/mcp/***/sse" in listed["zap"]["error"]
    assert f"HTTP 401 Unauthorized from {refusing}/auth/***" in listed["auth"]["error"]
    shown = _json(outputs, "config show --json")["values"]
    assert shown["mcp.servers.zap.url"]["value"] == f"{refusing}/mcp/***/sse"
    assert f"{refusing}/mcp/***/sse" in outputs["config show"]


def _json(outputs: dict[str, str], command: str):
    text = outputs[command]
    start = min(i for i in (text.find("["), text.find("{")) if i >= 0)
    return json.JSONDecoder().raw_decode(text[start:])[0]


@pytest.mark.parametrize("url, shown", [
    ("https://actions.zapier.com/mcp/sk-ak-XXXXXXXXXXXXXXXXXXXXXXXX/sse",
     "https://actions.zapier.com/mcp/***/sse"),
    ("https://h.example/v1/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08/sse",
     "https://h.example/v1/***/sse"),
    ("https://h.example/x?id=6f1c9a52-3b7e-4d20-9c41-8a2b5e7f0d13&q=hello%20world",
     "https://h.example/x?id=***&q=hello+world"),
    ("https://h.example/ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3" + "/x", "https://h.example/***/x"),
    # names, dates, versions and file names stay readable
    ("https://h.example/blog/my-long-article-title-2024/comments", None),
    ("https://h.example/api/getUserProfileDataById", None),
    ("https://h.example/files/report-2024-01-01-final.pdf", None),
    ("https://api.githubcopilot.com/mcp/", None),
    ("http://127.0.0.1:8765/mcp", None),
])
def test_token_looking_segments_and_values_are_masked(url, shown):
    assert redact_value("url", url) == (shown or url)


def test_random_keys_look_like_tokens_and_words_do_not():
    keys = [secrets.token_urlsafe(n) for n in (18, 24, 32) for _ in range(300)]
    keys += [secrets.token_hex(16) for _ in range(100)] + [str(uuid.uuid4()) for _ in range(100)]
    missed = [k for k in keys if not looks_like_token(k)]
    assert len(missed) <= len(keys) // 100, missed[:10]
    words = ["introduction-to-python-3-12", "organization-settings-page", "listAvailableModelsV2",
             "2024-01-15-weekly-report", "strengths-and-weaknesses", "authorization_code_flow",
             "BaseHTTPRequestHandler", "what-is-a-token-and-why"]
    assert [w for w in words if looks_like_token(w)] == []
