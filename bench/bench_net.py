"""What the SSRF-safe client costs: checking a URL, and a whole GET on loopback compared with
a plain httpx.Client request to the same server (a fresh client per call in both, as the tool
does), plus web_fetch's text extraction on a saved article page.

    python bench/bench_net.py [N]      (default N=200 requests)
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODY = b'{"status": "ok"}' * 64


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else keep-alive clients wait ~40 ms for a delayed ACK

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args: object) -> None:
        pass


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    import httpx

    from jarvis.security.net import NetPolicy, SafeHttpClient, check_url
    from jarvis.tools.web_fetch import html_to_text

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hostport = f"127.0.0.1:{server.server_address[1]}"
    url = f"http://{hostport}/status"
    policy = NetPolicy.make([hostport])
    safe = SafeHttpClient(policy)

    def plain() -> None:
        with httpx.Client(trust_env=False) as client:
            client.get(url).read()

    reused = httpx.Client(trust_env=False)

    def keepalive() -> None:
        reused.get(url).read()

    def guarded() -> None:
        safe.request("GET", url)

    deny = NetPolicy()
    public = lambda host, port: ["93.184.215.14"]  # noqa: E731

    def check_public() -> None:
        check_url("https://example.com/a/b?c=d", deny, public)

    def check_refused() -> None:
        try:
            check_url("http://[::ffff:127.0.0.1]/", deny, public)
        except Exception:
            pass

    page = (ROOT / "tests" / "fixtures" / "web" / "news_article.html").read_text()
    tables = ("<html><body>" + "<table><tr><td>a</td><td>b</td></tr></table>" * 6_000
              + "</body></html>")
    html_to_text(page, "http://x/")  # import and warm up
    for fn in (plain, guarded, keepalive):
        fn()
    rows = [
        ("check_url, public name (resolver stubbed)", timed(check_public, n * 10), None),
        ("check_url, refused ::ffff:127.0.0.1", timed(check_refused, n * 10), None),
        ("GET on loopback: SafeHttpClient", timed(guarded, n), "plain"),
        ("GET on loopback: plain httpx.Client", timed(plain, n), None),
        ("GET on loopback: one reused httpx.Client", timed(keepalive, n), "plain"),
        ("web_fetch text extraction, 9 KB article", timed(lambda: html_to_text(page, "http://x/"),
                                                         max(n // 4, 10)), None),
        # The hostile shape of the justext fallback (quadratic in short blocks): 6,000 tiny
        # tables, 24,000 elements; 20-34 s before the page size chose trafilatura's fast mode.
        ("web_fetch text extraction, 6,000 tiny tables", timed(
            lambda: html_to_text(tables, "http://x/"), 3), None),
    ]
    base = statistics.median(rows[3][1])
    print(f"{'measure':<45} {'median ms':>10} {'p95 ms':>8}  ratio")
    for label, samples, compare in rows:
        samples.sort()
        med = statistics.median(samples)
        p95 = samples[int(len(samples) * 0.95) - 1]
        ratio = f"{med / base:.2f}x plain httpx" if compare else ""
        print(f"{label:<45} {med:>10.3f} {p95:>8.3f}  {ratio}")
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    main()
