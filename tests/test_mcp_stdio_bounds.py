"""jarvis's transports to MCP servers (jarvis/mcp/stdio.py, http_bounds.py): over stdio a
message is read in time linear in its size (the SDK's reader took time growing with the square
of a line: 3.7 s for a 16 MB reply against 0.17 s); over stdio and HTTP one over
`max_message_mb` is dropped without being kept, the call it answers failing at once with a
reason, the server still answering the next call; a compressed HTTP reply is refused."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
from growth import assert_linear
from mcp_support import SERVERS, write_config

from jarvis.core.config import load_config
from jarvis.mcp.adapter import McpReadResourceTool
from jarvis.mcp.manager import McpManager
from jarvis.mcp.stdio import Oversized, read_lines, refusal

HOSTILE = SERVERS / "hostile_images.py"


class Chunks:
    """A byte stream yielding the given chunks (what anyio's process stdout yields)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __aiter__(self):
        return self._gen()

    async def _gen(self):
        for chunk in self.chunks:
            yield chunk


def lines_of(chunks: list[bytes], limit: int) -> list[bytes | Oversized]:
    async def collect() -> list[bytes | Oversized]:
        return [line async for line in read_lines(Chunks(chunks), limit)]

    return anyio.run(collect)


def test_lines_split_across_chunks_and_an_oversized_one_between_good_ones() -> None:
    big = b'{"jsonrpc":"2.0","id":7,"result":{"x":"' + b"a" * 5000 + b'"}}'
    stream = b'{"a":1}\n\n{"b":' + b"2}\n" + big + b'\n{"c":3}\n{"partial"'
    chunks = [stream[i:i + 97] for i in range(0, len(stream), 97)]
    got = lines_of(chunks, limit=1000)
    assert got[0] == b'{"a":1}' and got[1] == b'{"b":2}' and got[3] == b'{"c":3}', got
    assert len(got) == 4  # the blank line is skipped, the unfinished last one never yielded
    assert isinstance(got[2], Oversized) and got[2].size == len(big)
    assert got[2].head == big[:512]
    answer = refusal(got[2], "h", 1000)
    assert answer.message.id == 7 and "max_message_mb of [mcp.servers.h]" in (
        answer.message.error.message)
    # exactly at the limit is kept
    assert lines_of([b"x" * 1000 + b"\n"], limit=1000) == [b"x" * 1000]


def test_an_oversized_message_without_an_id_at_its_start_gets_no_made_up_answer() -> None:
    (line,) = lines_of([b'{"jsonrpc":"2.0","method":"notifications/x","params":{"p":"'
                        + b"b" * 3000 + b'"}}\n'], limit=100)
    assert isinstance(line, Oversized) and refusal(line, "h", 100) is None


def test_reading_a_long_line_takes_time_linear_in_its_length() -> None:
    # 64 KiB chunks, as anyio reads a pipe; the SDK's reader copies the line so far per chunk.
    def make(n: int) -> list[bytes]:
        return [b"a" * 65536] * n + [b"\n"]

    assert_linear(make, lambda chunks: lines_of(chunks, limit=1 << 40), 64,
                  what="reading one long MCP line")


def test_a_reply_over_max_message_mb_fails_at_once_and_the_server_still_answers(
        tmp_path: Path) -> None:
    # images://many is 24 images of ~0.5 MB: one ~17 MB message, over a 4 MB limit.
    path = write_config(tmp_path, {"h": {"command": __import__("sys").executable,
                                          "args": [str(HOSTILE)], "max_message_mb": 4,
                                          "timeout": 60}})
    made = McpManager(load_config(path))
    try:
        tool = McpReadResourceTool(manager=made)
        started = time.monotonic()
        many = tool.execute(server="h", uri="images://many")
        took = time.monotonic() - started
        assert not many.success and many.images() == [], many.content
        assert "over 4 MB" in many.content and "max_message_mb of [mcp.servers.h]" in many.content
        assert took < 30, took  # answered by the refusal, not by the 60 s call timeout
        hello = tool.execute(server="h", uri="notes://hello")
        assert hello.success and "hello" in hello.content, hello.content
    finally:
        made.close()


# --- the same bounds over HTTP (jarvis/mcp/http_bounds.py) ---------------------------------
def test_an_http_reply_over_max_message_mb_is_dropped_and_the_next_call_reconnects(
        tmp_path: Path) -> None:
    from mcp_support import HttpFeatures

    server = HttpFeatures(tmp_path)  # notes://huge is 300 000 characters
    path = write_config(tmp_path, {"web": {"url": server.url, "max_message_mb": 0.1}})
    made = McpManager(load_config(path))
    try:
        tool = McpReadResourceTool(manager=made)
        huge = tool.execute(server="web", uri="notes://huge")
        assert not huge.success, huge.content
        assert "over 0.1 MB" in huge.content and "max_message_mb of [mcp.servers.web]" in (
            huge.content), huge.content
        readme = tool.execute(server="web", uri="notes://readme")
        assert readme.success and "Read me first." in readme.content, readme.content
    finally:
        made.close()
        server.close()


def test_a_compressed_http_reply_is_refused_not_inflated(tmp_path: Path) -> None:
    # jarvis asks for no compression; a server that compresses anyway (a 1 MB gzip body can
    # inflate to gigabytes) is refused before a byte is inflated.
    import gzip
    import http.server
    import threading

    body = gzip.compress(b'{"jsonrpc":"2.0","id":1,"result":{}}' + b" " * 10_000_000)

    class Gzipping(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gzipping)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    path = write_config(tmp_path, {"z": {"url": url, "connect_timeout": 10}})
    made = McpManager(load_config(path))
    try:
        reason = made.refresh()["z"]
        assert reason and "Content-Encoding 'gzip'" in reason, reason
    finally:
        made.close()
        httpd.shutdown()
        httpd.server_close()
