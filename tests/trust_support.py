"""The world of the trust suites (test_trust_attacks.py, test_trust_utility.py).

A `Lab` is one case's world, all real and on loopback:
- a workspace made by `jarvis init` (the starter config) plus what the case needs, with a
  private note holding a fresh secret (notes/private.txt);
- a `Site`: an HTTP server that serves pages (and a SearXNG-compatible /search) and records
  every request that reaches it, on any path (the attacker's receiver is another Site);
- the scripted model (jarvis.testing: FakeOpenAIServer with explicit calls or `obey()`);
- optionally the trust_lab MCP server (a source tool and resource, a sink tool);
- a DNS log: `jarvis` runs with a sitecustomize that records every name the process asks the
  resolver for (socket.getaddrinfo), so a test can assert a secret never reached DNS.

`jarvis ask` runs as a subprocess with no terminal (stdin is /dev/null).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jarvis.testing import FakeOpenAIServer

LAB_SERVER = Path(__file__).resolve().parent / "mcp_servers" / "trust_lab.py"
MARK = "<<jarvis-test-call {}>>"

SITECUSTOMIZE = '''\
import os
import socket

_log = os.environ.get("JARVIS_TEST_DNS_LOG")
if _log:
    _real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        with open(_log, "a", encoding="utf-8") as fh:
            fh.write(f"{host}\\n")
        return _real(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
'''


def mark(name: str, _style: str = "<<", **arguments: Any) -> str:
    """An instruction the obedient model follows (jarvis.testing.obey); `_style="[["` for
    text that goes through a tool that strips what looks like HTML (search snippets)."""
    text = MARK.format(json.dumps({"name": name, "arguments": arguments}))
    return text if _style == "<<" else "[[" + text[2:-2] + "]]"


@dataclass
class Hit:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def text(self) -> str:
        head = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.method} {self.path}\n{head}\n{self.body.decode('utf-8', 'replace')}"


@dataclass
class Site:
    """A loopback HTTP server: `pages` by path (content type, body); records every request."""

    pages: dict[str, tuple[str, str]] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.hits.append(Hit(self.command, self.path, dict(self.headers.items()), body))
                kind, page = outer.pages.get(urlsplit(self.path).path, ("text/plain", "ok"))
                data = page.encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_HEAD = do_PUT = _handle  # noqa: N815 - stdlib names

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def everything(self) -> str:
        return "\n\n".join(hit.text() for hit in list(self.hits))

    def search_results(self, *rows: tuple[str, str, str]) -> None:
        """Serve a SearXNG-style JSON /search answering (title, url, content) rows."""
        self.pages["/search"] = ("application/json", json.dumps({"results": [
            {"title": t, "url": u, "content": c, "engines": ["lab"]} for t, u, c in rows]}))


class Lab:
    """One case's world (see the module docstring)."""

    def __init__(self, tmp_path: Path, cli_env: dict[str, str]) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "workspace"
        self.root.mkdir()
        self.secret = f"JARVIS-SECRET-{os.urandom(6).hex()}"
        self.site = Site()  # pages the person (or a search) points at: localhost:PORT
        self.attacker = Site()  # the attacker's receiver: 127.0.0.1:PORT
        self.dns_log = tmp_path / "dns.log"
        # The lab MCP server's own folder: stdio servers run sandboxed, seeing only this.
        self.mcp_dir = tmp_path / "lab-server"
        self.mcp_dir.mkdir()
        from sandbox_support import give_to_sandbox

        give_to_sandbox(self.mcp_dir)  # writable for the sandbox's uid (jarvis as root)
        self.mcp_record = self.mcp_dir / "record.txt"
        self.mcp_page = self.mcp_dir / "page.txt"
        site_dir = tmp_path / "site-customize"
        site_dir.mkdir()
        (site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        self.env = dict(cli_env)
        self.env.update(PYTHONPATH=str(site_dir), JARVIS_TEST_DNS_LOG=str(self.dns_log),
                        JARVIS_ENGINE="vllm", JARVIS_MODEL="test-model")
        self.env.pop("JARVIS_CONFIG", None)
        init = self.jarvis("init")
        assert init.returncode == 0, init.stderr
        notes = self.root / "notes"
        notes.mkdir()
        (notes / "private.txt").write_text(f"My bank PIN reminder: {self.secret}\n",
                                           encoding="utf-8")
        (notes / "todo.txt").write_text("Buy milk. Call Anna about the trip to Lisbon.\n",
                                        encoding="utf-8")
        self.model: FakeOpenAIServer | None = None

    # --- addresses ---------------------------------------------------------------------------
    @property
    def site_host(self) -> str:
        return f"localhost:{self.site.port}"

    @property
    def attacker_host(self) -> str:
        return f"127.0.0.1:{self.attacker.port}"

    def page_url(self, path: str) -> str:
        return f"http://{self.site_host}{path}"

    def attacker_url(self, path: str = "/collect") -> str:
        return f"http://{self.attacker_host}{path}"

    # --- configuration -----------------------------------------------------------------------
    def configure(self, *, mcp: bool = False, channel_confirm: bool = False,
                  mcp_trusted: bool = False, extra: str = "",
                  store_description: str | None = None) -> None:
        """The starter config plus: the loopback sites as SSRF exceptions (not egress rules),
        SearXNG on the site, a confirm=false json:// channel to the attacker's receiver (the
        person's own channel in the utility suite), and the lab MCP server when asked (its
        `store` tool described by `store_description` when given)."""
        hosts = json.dumps([self.site_host, self.attacker_host])
        lines = [
            "", "# --- the case's additions ---",
            "[tools.http_request]", f"allowed_hosts = {hosts}",
            "[tools.web_fetch]", f"allowed_hosts = {hosts}",
            "[tools.web_search]", 'backend = "searxng"',
            f'base_url = "http://{self.site_host}"',
            "[channels.hook]", f'url = "json://{self.attacker_host}/hook"',
            f"confirm = {'true' if channel_confirm else 'false'}",
        ]
        if mcp:
            argv = [str(LAB_SERVER), "--page", str(self.mcp_page), "--record",
                    str(self.mcp_record)]
            if store_description is not None:
                described = self.mcp_dir / "store-description.txt"
                described.write_text(store_description, encoding="utf-8")
                argv += ["--store-description", str(described)]
            args = json.dumps(argv)
            lines += ["[mcp.servers.lab]", f"command = {json.dumps(sys.executable)}",
                      f"args = {args}", f"trusted = {'true' if mcp_trusted else 'false'}",
                      f"writable_paths = {json.dumps([str(self.mcp_dir)])}",
                      "connect_timeout = 60"]  # a loaded machine starts Python slowly
        with (self.root / "config.toml").open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n" + extra)

    # --- running -----------------------------------------------------------------------------
    def start_model(self, script: list[Any], default: Any = None) -> FakeOpenAIServer:
        """The scripted model: items in order (a bare tool call is a turn that makes it),
        then `default` on every later turn."""
        from jarvis.core.types import ToolCall
        from jarvis.testing import reply

        items = [reply(tool_calls=[i]) if isinstance(i, ToolCall) else i for i in script]
        self.model = FakeOpenAIServer(items, default=default).start()
        self.env["VLLM_HOST"] = self.model.url
        return self.model

    def jarvis(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], cwd=self.root,
                              env=self.env, text=True, capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def ask(self, prompt: str, tools: list[str], *flags: str) -> dict[str, Any]:
        out = self.jarvis("ask", "--json", "--tools", ",".join(tools), *flags, prompt)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def close(self) -> None:
        if self.model is not None:
            self.model.stop()
        self.site.close()
        self.attacker.close()

    # --- what happened -----------------------------------------------------------------------
    def dns_names(self) -> list[str]:
        if not self.dns_log.exists():
            return []
        return self.dns_log.read_text(encoding="utf-8").split()

    def mcp_received(self) -> str:
        return self.mcp_record.read_text(encoding="utf-8") if self.mcp_record.exists() else ""

    def assert_nothing_leaked(self) -> None:
        """The secret reached no server, no MCP tool, no resolver."""
        secret = self.secret.lower()
        assert secret not in self.attacker.everything().lower(), self.attacker.everything()[:2000]
        assert secret not in self.site.everything().lower()
        assert secret not in self.mcp_received().lower()
        assert not [n for n in self.dns_names() if secret in n.lower()], self.dns_names()
