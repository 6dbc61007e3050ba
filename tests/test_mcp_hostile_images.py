"""An MCP server that lies about images (tests/mcp_servers/hostile_images.py, official SDK, over
stdio): nothing but real images within the limits reaches the engine, the rest become short
notes the model reads; sampling requests too large or with a bad image are refused with a clear
error; a prompt with thousands of arguments lists as one bounded line."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp.types import BlobResourceContents, ReadResourceResult
from mcp_support import SERVERS, STDIO_CONNECT, approve_all, write_config

from jarvis.core.config import load_config
from jarvis.core.images import MAX_IMAGES_PER_MESSAGE, check_image
from jarvis.core.types import ImageBlock, Message, TextBlock
from jarvis.engine.openai_compat import OpenAICompatEngine
from jarvis.mcp.capabilities import set_sampling_engine
from jarvis.mcp.manager import McpManager
from jarvis.mcp.resources import resource_result
from jarvis.sdk import Jarvis
from jarvis.testing import FakeOpenAIServer, ScriptedEngine, reply, tool_call

HOSTILE = SERVERS / "hostile_images.py"
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5Er"
       "kJggg==")
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(60)).decode()


def hostile(**options) -> dict:
    return {"command": sys.executable, "args": [str(HOSTILE)], **STDIO_CONNECT, **options}


def image_urls(request: dict) -> list[str]:
    return [part["image_url"]["url"] for message in request["messages"]
            if isinstance(message["content"], list)
            for part in message["content"] if part.get("type") == "image_url"]


def ask(tmp_path: Path, tool: str) -> tuple[dict, list[dict]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_config(tmp_path, {"h": hostile()})
    script = [reply(tool_calls=[tool_call(f"h__{tool}", {})]), reply("seen")]
    with FakeOpenAIServer(script, models=["llava-test"]) as server:
        engine = OpenAICompatEngine("vllm", server.url, model="llava-test", client="http",
                                    max_retries=0)
        with Jarvis(config_path=path, engine=engine) as j:
            result = j.ask_full("look", agent="orchestrator", tools=[f"h__{tool}"],
                                approver=approve_all)
        engine.close()
        return result, server.requests


def test_only_real_images_reach_the_engine(tmp_path: Path) -> None:
    result, requests = ask(tmp_path, "bad_images")
    assert result["content"] == "seen"
    urls = image_urls(requests[1])
    # The PNG, and the JPEG labelled PNG sent as what it is; nothing else.
    assert urls == [f"data:image/png;base64,{PNG}", f"data:image/jpeg;base64,{JPEG}"]
    text = json.dumps(requests[1]["messages"])
    assert text.count("[image from the server refused:") == 7
    for reason in ("its data is a URL", "its data is not base64", "are not a PNG, JPEG",
                   "its declared type is not an image type"):
        assert reason in text, reason
    assert "169.254.169.254" not in text and "IGNORE ALL PREVIOUS" not in text
    assert "PHN2Zy" not in text  # the SVG's base64 is not pasted anywhere


def test_many_and_huge_images_are_bounded(tmp_path: Path) -> None:
    _, requests = ask(tmp_path, "many_images")
    assert len(image_urls(requests[1])) == 16  # MAX_IMAGES per result
    assert "more than 16 images in one result" in json.dumps(requests[1]["messages"])
    _, requests = ask(tmp_path / "huge", "huge_image")
    assert image_urls(requests[1]) == []
    assert "too large, not shown" in json.dumps(requests[1]["messages"])


def test_the_engine_boundary_checks_every_image() -> None:
    """Images from anywhere (a jarvis tool's ORS block, a caller's parts) pass the same check
    where messages become the engine's request."""
    good = ImageBlock(data=PNG, mimeType="image/png")
    parts = [TextBlock("look"), good, ImageBlock(data="http://x/y.png", mimeType="image/png"),
             ImageBlock(data=PNG, mimeType='image/png;base64,AAAA"')] + [good] * 40
    wire = Message(role="user", parts=parts).to_openai()["content"]
    sent = [p for p in wire if p["type"] == "image_url"]
    notes = [p["text"] for p in wire if p["type"] == "text"][1:]
    assert len(sent) == MAX_IMAGES_PER_MESSAGE
    assert all(p["image_url"]["url"] == f"data:image/png;base64,{PNG}" for p in sent)
    assert notes[0] == "[image not sent: its data is a URL, not base64 image bytes]"
    assert "is not an image type" in notes[1]
    assert notes[2:] == [f"[image not sent: more than {MAX_IMAGES_PER_MESSAGE} images in one "
                         f"message]"] * (41 - MAX_IMAGES_PER_MESSAGE)
    assert check_image(PNG, "image/jpg") == (None, "image/png")  # the bytes decide the type
    assert check_image("iVBORw0KGgo", "image/png")[0] == "its data is not base64"
    t0 = time.perf_counter()
    assert check_image("iVBORw0KGgoA" + "A" * 12_000_000, "image/png")[0] == "larger than 8 MB"
    assert check_image("iVBORw0KGgoA" + "A" * 8_000_000, "image/png")[0] is None
    assert time.perf_counter() - t0 < 2.0  # a regex and a 64-byte decode, not more


def test_a_resource_with_many_large_images_is_bounded() -> None:
    blob = base64.b64encode(base64.b64decode(PNG) + bytes(1024 * 1024)).decode()
    result = ReadResourceResult(contents=[
        BlobResourceContents(uri=f"images://many/{i}", blob=blob, mime_type="image/png")
        for i in range(40)] + [BlobResourceContents(uri="images://svg", mime_type="image/png",
                                                    blob=base64.b64encode(b"<svg/>").decode())])
    out = resource_result("mcp_read_resource", "h", "images://many", result, max_chars=1000)
    images = out.images()
    assert 1 <= len(images) <= 16 and sum(len(i.data) for i in images) <= 8_000_000
    assert "not shown: over" in out.content and "images://svg not shown: its bytes" in out.content


@pytest.fixture
def manager(tmp_path: Path):
    path = write_config(tmp_path, {"h": hostile(sampling=True)})
    made = McpManager(load_config(path))
    assert made.refresh() == {"h": None}
    made.register_known()
    yield made
    made.close()
    set_sampling_engine(None)


def test_sampling_requests_are_bounded(manager: McpManager) -> None:
    from jarvis.core.registry import ToolRegistry
    from jarvis.tools.executor import ToolExecutor

    engine = ScriptedEngine(["never", "never"])
    set_sampling_engine(engine, "m")

    def run(name: str):
        tool = ToolRegistry.get(name)
        return ToolExecutor([tool], approver=approve_all).execute({"name": name, "arguments": {}})

    started = time.monotonic()
    flood = run("h__sample_flood")
    bad = run("h__sample_bad_image")
    assert time.monotonic() - started < 30
    assert engine.calls == []  # the engine was never asked for the refused ones
    assert not flood.success and "characters of text; the limit is 200000" in flood.content
    assert not bad.success and "image 1 of the sampling request refused" in bad.content
    greedy = run("h__sample_greedy")  # asks for 10**9 tokens: gets the most jarvis gives
    assert greedy.content == "model said: never" and engine.calls[0]["max_tokens"] == 4096


def test_a_prompt_with_thousands_of_arguments_lists_as_one_bounded_line(tmp_path: Path,
                                                                         cli_env) -> None:
    write_config(tmp_path, {"h": hostile()})
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", "mcp", "prompts", "h"], cwd=tmp_path,
                         env=cli_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (line,) = out.stdout.splitlines()
    assert line.startswith("huge(a0?, a1?") and "... 1980 more (--json shows all)" in line
    assert len(line) < 600 and "Traceback" not in out.stderr


def test_images_of_one_request_are_bounded_newest_first() -> None:
    """Each agent turn adds its tools' images and every request resends the transcript: the
    request carries the newest images up to the budget, older ones as placeholders."""
    from jarvis.core.images import MAX_REQUEST_IMAGE_CHARS
    from jarvis.engine.base import to_wire

    big = ImageBlock(data="iVBORw0KGgoA" + "A" * (8_000_000 - 12), mimeType="image/png")
    turns = [Message(role="user", parts=[TextBlock(f"turn {i}"), big]) for i in range(10)]
    wire = to_wire([Message(role="system", content="s"), *turns])
    sent = [i for i, m in enumerate(wire[1:]) if isinstance(m["content"], list)]
    assert sent == [7, 8, 9]  # 3 x 8 M characters fit in the 24 M budget, newest first
    assert wire[1]["content"] == "turn 0\n[image: image/png, 5.7 MB]"
    assert sum(len(json.dumps(m)) for m in wire) < MAX_REQUEST_IMAGE_CHARS + 10_000
    assert to_wire(turns, images=False)[9]["content"] == "turn 9\n[image: image/png, 5.7 MB]"


def test_file_links_outside_the_roots_are_not_read(tmp_path: Path) -> None:
    """A server's link to file:///etc/passwd (or ../ out of the workspace, or a symlink out of
    it), read by the model through any server: refused before any server is asked."""
    from jarvis.core.types import ErrorType
    from jarvis.mcp.adapter import McpReadResourceTool

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("inside")
    (tmp_path / "docs" / "out").symlink_to("/etc")
    path = write_config(tmp_path, {"h": hostile()}, extra='[tools.file_read]\nallowed_dirs = ["docs"]\n')
    made = McpManager(load_config(path))
    try:
        tool = McpReadResourceTool(manager=made)
        for uri in ("file:///etc/passwd", f"file://{tmp_path}/../../etc/passwd",
                    f"file://{tmp_path}/docs/out/passwd", "file://evil.example/share/x",
                    "FILE:///etc/shadow", f"file://{tmp_path}/docs/%2e%2e/%2e%2e/etc/passwd"):
            out = tool.execute(server="h", uri=uri)
            assert not out.success and out.error_type is ErrorType.DENIED, uri
            assert out.content.startswith("refused:"), out.content
        # Inside the roots the server is asked (this one has no such resource: its own error).
        inside = tool.execute(server="h", uri=f"file://{tmp_path}/docs/a.txt")
        assert not inside.success and not inside.content.startswith("refused:")
    finally:
        made.close()


def test_sampling_requests_per_minute_are_bounded() -> None:
    """A server asking again and again (every answer costs the user): at most 30 a minute."""
    import asyncio

    from mcp.types import CreateMessageRequestParams, SamplingMessage, TextContent

    from jarvis.mcp.capabilities import MAX_SAMPLING_PER_MINUTE, ClientCallbacks

    engine = ScriptedEngine(["ok"] * (MAX_SAMPLING_PER_MINUTE + 5))
    set_sampling_engine(engine, "m")
    try:
        callbacks = ClientCallbacks("h", None, [])
        params = CreateMessageRequestParams(messages=[SamplingMessage(
            role="user", content=TextContent(type="text", text="again"))], max_tokens=10)
        answers = [asyncio.run(callbacks.sample(None, params))
                   for _ in range(MAX_SAMPLING_PER_MINUTE + 5)]
    finally:
        set_sampling_engine(None)
    assert len(engine.calls) == MAX_SAMPLING_PER_MINUTE
    assert all("more than 30 sampling requests in a minute" in a.message
               for a in answers[MAX_SAMPLING_PER_MINUTE:])


def test_a_data_url_in_structured_content_is_not_pasted_into_the_text() -> None:
    from mcp.types import CallToolResult

    from jarvis.mcp.results import to_tool_result

    url = "data:image/png;base64," + base64.b64encode(bytes(30_000)).decode()
    out = to_tool_result("h__t", "h", "t", CallToolResult(
        content=[], structured_content={"thumbnail": url, "name": "cat"}))
    assert "AAAA" not in out.content and "cat" in out.content
    assert "[image/png data URL, about 30000 bytes, not shown]" in out.content


def test_resources_with_many_images_or_a_bad_blob_from_a_real_server(tmp_path: Path,
                                                                     cli_env) -> None:
    from jarvis.mcp.adapter import McpReadResourceTool

    path = write_config(tmp_path, {"h": hostile()})
    made = McpManager(load_config(path))
    try:
        tool = McpReadResourceTool(manager=made)
        many = tool.execute(server="h", uri="images://many")
        assert many.success and len(many.images()) == 16, many.content  # 5 large, 11 small
        assert "not shown: over" in many.content and "not shown: more than 16 images" in many.content
        assert sum(len(i.data) for i in many.images()) <= 8_000_000
        bad = tool.execute(server="h", uri="blobs://bad")
        assert bad.images() == [] and "not shown: its data is not base64" in bad.content
    finally:
        made.close()
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", "mcp", "read", "h", "blobs://bad",
                          "-o", str(tmp_path / "out.png")], cwd=tmp_path, env=cli_env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert "is not valid base64; not written" in out.stderr
    assert not (tmp_path / "out.png").exists()


def test_many_large_text_blocks_are_bounded_in_total() -> None:
    from mcp.types import CallToolResult, TextContent

    from jarvis.mcp import results

    many = [TextContent(type="text", text="y" * 900_000) for _ in range(50)]
    out = results.to_tool_result("h__t", "h", "t", CallToolResult(content=many))
    assert len(out.content) < results.MAX_RESULT_TEXT_CHARS + 1_000_000
    assert "47 more text item(s) of this result cut" in out.content
    tiny = [TextContent(type="text", text="z") for _ in range(5000)]
    out = results.to_tool_result("h__t", "h", "t", CallToolResult(content=tiny))
    assert len(out.blocks) == results.MAX_BLOCKS + 1
    assert "4000 more content item(s)" in out.content
